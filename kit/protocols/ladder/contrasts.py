"""The ladder's arithmetic: each rung's pairing of outputs, its measures, the VOID rule and the headline.

Pure functions over outputs grouped by (pass, step label), unit by unit, in trial order (`Out`). A rung
(or a fix) is a contrast: a reference (pass, label, trial), a treatment (pass, label: every trial, less
the reference's own where both are one group) and optionally a control (pass, label, trial) that repeats
the reference's setting and must reproduce it. A contrast is measured on the units all three have.

- A contrast *holds* when every treatment output is byte-identical in tokens to its reference.
- A contrast whose requests did not show the cache state they were sent for (a "hit" that reused
  nothing, a miss that reused something, an aligned hit that reused another length: the record's gate)
  is VOID: never a pass, never a failure.
- The headline: "invariant through L<k>", k the highest rung such that L0..Lk all hold (a rung holds
  when its measured contrasts hold; its unmeasured parts are named beside it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from kit.core.errors import KitError
from kit.protocols.ladder.table import ContrastRow, Cost, FirstDifference, LadderHeadline
from kit.record.divergence import first_difference

RUNGS = ("L0", "L1", "L2", "L3", "L4", "L5", "L6", "L7")
Where = tuple[str, str]  # (pass id, step label)


@dataclass(frozen=True)
class Out:
    """One answer as the ladder compares it: emitted tokens, (token, logprob) per log-probability entry,
    its cache-state gate, cached tokens, and its cost (seconds, tokens generated)."""

    tokens: tuple
    logprobs: tuple[tuple[str, float], ...] = ()
    ok: bool = True
    why: str | None = None
    cached: int | None = None
    wall: float = 0.0
    generated: int = 0


Groups = dict[Where, dict[str, list[Out]]]  # (pass, label) -> unit -> outputs in trial order


@dataclass(frozen=True)
class Contrast:
    """One designed contrast: `ref` (pass, label, trial) against every output of `treat` (pass, label),
    `control` repeating the reference's setting. `served` names the outputs whose cost a fix reports."""

    rung: str
    what: str
    ref: tuple[str, str, int] | None = None
    treat: Where | None = None
    control: tuple[str, str, int] | None = None
    served: Where | None = None
    not_measured: str | None = None  # why it was not measured here (then nothing else is set)
    fix: str | None = None  # a fix's name (its row of the fixes table), else None: a rung's contrast
    note: str | None = None

    def to_json(self) -> dict[str, str | list[str | int]]:
        """The contrast as the manifest's `ladder` keeps it: the fields set, a pair or triple as a list."""
        return {key: (list(value) if isinstance(value, tuple) else value)
                for key, value in self.__dict__.items() if value is not None}

    @classmethod
    def from_json(cls, data: object, source: str) -> Contrast:
        """A contrast as `to_json` wrote it into the manifest at `source`; a one-line KitError naming the field of
        one of another shape."""
        from pydantic import TypeAdapter, ValidationError  # noqa: PLC0415 - only where results are computed

        try:
            return TypeAdapter(cls).validate_python(data, strict=False)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"]) or "the top level"
            raise KitError(f"{source}: a contrast's {where}: {first['msg']}",
                           "this run folder was changed after `kit run` wrote it") from None


def logprob_gap(a: Out, b: Out) -> float | None:
    """The largest |logprob difference| over the entries the two answers share before their tokens part
    (None when they share none)."""
    gaps = []
    for (token_a, lp_a), (token_b, lp_b) in zip(a.logprobs, b.logprobs):
        if token_a != token_b:
            break
        gaps.append(abs(lp_a - lp_b))
    return max(gaps) if gaps else None


@dataclass
class _Tally:
    pairs: int = 0
    identical: int = 0
    logprobs_equal: int = 0
    gap: float | None = None
    first: FirstDifference | None = None
    unique: list[int] = field(default_factory=list)
    gate_failures: list[str] = field(default_factory=list)


def pairs(groups: Groups, contrast: Contrast) -> list[tuple[str, int, Out, list[tuple[int, Out]]]]:
    """(unit, reference trial, reference output, [(trial, treatment output)]) for every unit the reference
    and the treatment both have, in the reference's unit order. Where the treatment is the reference's own
    group (L0: the identical request repeated), the reference trial is left out of the treatment."""
    assert contrast.ref is not None and contrast.treat is not None
    ref_pass, ref_label, ref_trial = contrast.ref
    reference = groups.get((ref_pass, ref_label), {})
    treated = groups.get(contrast.treat, {})
    same = contrast.treat == (ref_pass, ref_label)
    found = []
    for unit, outputs in reference.items():
        if len(outputs) <= ref_trial or unit not in treated:
            continue
        others = [(trial, out) for trial, out in enumerate(treated[unit]) if not (same and trial == ref_trial)]
        if others:
            found.append((unit, ref_trial, outputs[ref_trial], others))
    return found


def _gate_failures(groups: Groups, contrast: Contrast, units: Sequence[str]) -> list[str]:
    """Requests among the contrast's whose gate failed: the cache state they were sent for is unproven."""
    failed = []
    wheres = [contrast.treat] + [w[:2] for w in (contrast.ref, contrast.control) if w is not None]
    for where in dict.fromkeys(w for w in wheres if w is not None):
        for unit in units:
            for trial, out in enumerate(groups.get(where, {}).get(unit, ())):
                if not out.ok:
                    failed.append(f"{where[0]} {where[1]} {unit}#{trial}: {out.why}")
    return failed


def measure(groups: Groups, contrast: Contrast) -> ContrastRow:
    """A contrast's row: status (holds / diverges / VOID / not measured), byte-identical share with its
    Wilson interval, unique outputs per prompt, logprobs equal, first difference, largest logprob gap,
    whether its control reproduced, and (for fixes) the cost of its served requests."""
    row = ContrastRow(rung=contrast.rung, what=contrast.what, status="not measured")
    if contrast.fix:
        row.fix = contrast.fix
    if contrast.note:
        row.note = contrast.note
    if contrast.not_measured:
        row.reason = contrast.not_measured
        return row
    found = pairs(groups, contrast)
    tally = _Tally(gate_failures=_gate_failures(groups, contrast, [unit for unit, *_ in found]))
    for unit, _, ref, treated in found:
        tally.unique.append(len({ref.tokens, *(out.tokens for _, out in treated)}))
        for trial, out in treated:
            tally.pairs += 1
            token = first_difference(ref.tokens, out.tokens)
            tally.identical += token is None
            tally.logprobs_equal += token is None and ref.logprobs == out.logprobs
            gap = logprob_gap(ref, out)
            if gap is not None:
                tally.gap = gap if tally.gap is None else max(tally.gap, gap)
            if token is not None and tally.first is None:
                tally.first = FirstDifference(unit=unit, trial=trial, token=token)
    _shares(tally, row)
    row.control = _control(groups, contrast)
    if contrast.served is not None:
        row.cost = cost(groups, contrast.served)
    if not tally.pairs:
        row.status, row.reason = "VOID", "no outputs to compare (every pass it needs is missing or VOID)"
    elif tally.gate_failures:
        row.status, row.reason = "VOID", (f"{len(tally.gate_failures)} request(s) did not show the cache state they "
                                          f"were sent for (first: {tally.gate_failures[0]})")
    else:
        row.status = "holds" if tally.identical == tally.pairs else "diverges"
    return row


def _shares(tally: _Tally, row: ContrastRow) -> None:
    """The tally's counts into `row`: its pairs, and where there are any, the shares and the first difference."""
    from kit.stats import wilson_interval  # noqa: PLC0415 - loads the statistics package only when computing

    row.pairs = tally.pairs
    if not tally.pairs:
        return
    lo, hi = wilson_interval(tally.identical, tally.pairs)
    row.identical, row.identical_share, row.interval = tally.identical, tally.identical / tally.pairs, [lo, hi]
    row.logprobs_equal, row.unique_max = tally.logprobs_equal, max(tally.unique)
    row.unique_mean, row.prompts = sum(tally.unique) / len(tally.unique), len(tally.unique)
    row.first_difference, row.max_logprob_gap = tally.first, tally.gap


def _control(groups: Groups, contrast: Contrast) -> bool | None:
    """Did the control (the reference's setting again) give the reference's tokens for every unit? None: no
    control (L0 is its own) or nothing to compare."""
    if contrast.control is None or contrast.ref is None:
        return None
    check = Contrast(contrast.rung, "control", ref=contrast.ref, treat=contrast.control[:2])
    trial = contrast.control[2]
    found = [(ref, out) for _, _, ref, treated in pairs(groups, check) for index, out in treated if index == trial]
    return all(ref.tokens == out.tokens for ref, out in found) if found else None


def cost(groups: Groups, where: Where) -> Cost | None:
    """What the served requests cost: mean seconds per request and generated tokens per second."""
    outs = [out for outputs in groups.get(where, {}).values() for out in outputs]
    seconds = sum(out.wall for out in outs)
    if not outs or seconds <= 0:
        return None
    return Cost(requests=len(outs), latency_s=seconds / len(outs),
                tokens_per_s=sum(out.generated for out in outs) / seconds)


def against(row: ContrastRow, unfixed: Cost | None) -> None:
    """A fix's cost beside the unfixed arm's, into its row: latency ratio and throughput change in percent."""
    if row.cost is None or unfixed is None:
        return
    row.latency_ratio = row.cost.latency_s / unfixed.latency_s
    row.throughput_change_pct = 100 * (row.cost.tokens_per_s / unfixed.tokens_per_s - 1)


def rung_status(rows: list[ContrastRow]) -> str:
    """A rung's status from its contrasts: not measured when none was; else the worst measured one
    (VOID before diverges before holds)."""
    measured = [row.status for row in rows if row.measured]
    for status in ("VOID", "diverges", "holds"):
        if status in measured:
            return status
    return "not measured"


def headline(rows: list[ContrastRow]) -> LadderHeadline:
    """"invariant through L<k>" (k the highest rung with L0..Lk all holding; None: not even L0), and every
    higher rung's own status."""
    by_rung = {rung: rung_status([row for row in rows if row.rung == rung]) for rung in RUNGS
               if any(row.rung == rung for row in rows)}
    through = None
    for rung in RUNGS:
        if by_rung.get(rung) != "holds":
            break
        through = rung
    above = {rung: status for rung, status in by_rung.items() if through is None or RUNGS.index(rung) > RUNGS.index(through)}
    text = f"invariant through {through}" if through else "not invariant even at L0 (the identical call repeated)"
    if above:
        text += "; then " + ", ".join(f"{rung} {status}" for rung, status in above.items())
    return LadderHeadline(through=through, rungs=by_rung, text=text)


def closes(fixes: list[ContrastRow], rung: str = "L2") -> list[str]:
    """The fixes that close `rung`: measured, not VOID, every output identical after the fix."""
    return [str(row.fix) for row in fixes if row.rung == rung and row.status == "holds" and row.fix != UNFIXED]


UNFIXED = "none (unfixed)"
