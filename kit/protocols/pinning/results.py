"""Results of the pinning protocol, computed from the run folder's records and manifest only.

States are re-derived here from each record's telemetry, or from its prefill time under the
calibration re-fitted from the calibration records, so every number can be recomputed from files.
The manipulation endpoints (do the arms differ, where do the bytes flip) are withheld when the gate
is VOID; state and regime determinism do not depend on the manipulation and are always reported.

Where the engine has no reset (a managed OpenAI-compatible endpoint, a llama-server started without
`--slot-save-path`), every pass is VOID, yet its calls were answered: `without_reset` reports what they measure
without one (states, their determinism, whether a state change flips the bytes, steady-state repeats), and
names each verdict that needs a reset as impossible, with the reason.
"""

from __future__ import annotations

import csv
import statistics
from collections import Counter
from pathlib import Path
from typing import NamedTuple

from kit.core.atomic_file import write_json_atomic, writing
from kit.record.cache_state import (
    HISTORY_STATE,
    Calibration,
    calibrate,
    classify,
    from_telemetry,
    separation,
)
from kit.record.divergence import first_difference
from kit.record.manifest import Manifest, PassInfo
from kit.core.paths import RunPaths
from kit.protocols.pinning.table import (
    Arms,
    Cycle,
    EngineEntry,
    Fork,
    Gate,
    Impossible,
    Modal,
    PinningPass,
    PinningResults,
    PrefillMs,
    Regime,
    StateRow,
    WithoutReset,
)
from kit.protocols.pinning.verdict import flips_of, verdict
from kit.record.files import RecordView, read_views

CALIBRATION_HISTORY = {"cal_fresh": "fresh", "cal_repeat": "repeat", "cal_after_other": "after_other"}
CYCLE_MEASURED = ("burn_in", "pure", "contaminated")


class Call(NamedTuple):
    """One call with the cache state recomputed for it: its state, how sure and from what (`state_of`), and
    the state named after the call that built the KV it reused (`lineage`)."""

    record: RecordView
    state: str
    confidence: float | None
    source: str
    lineage: str


def calibration_state(record: RecordView, tolerance: int) -> str | None:
    """The state a calibration call is labelled with: its telemetry where the engine has it, else the
    state its history implies (fresh instance, repeated prompt, after a different prompt)."""
    history = CALIBRATION_HISTORY.get(str(record.role))
    if history is None:
        return None
    telemetry = from_telemetry(record.cached_tokens, record.prompt_tokens, tolerance)
    return telemetry.state if telemetry else HISTORY_STATE[history]


def _tolerance(manifest: Manifest) -> int:
    return manifest.run.protocol.resolved.get("reuse_tolerance", 8)


def load(run_dir: Path) -> tuple[Manifest, dict[str, PassInfo], dict[str, list[RecordView]]]:
    """The manifest, its passes, and each pass's records (passes without a records file have none)."""
    manifest = Manifest.load(run_dir)
    passes = manifest.run.passes
    records = {pid: read_views(run_dir / str(info.file)) if info.file and (run_dir / info.file).exists() else []
               for pid, info in passes.items()}
    return manifest, passes, records


def no_reset(info: PassInfo) -> bool:
    """A VOID pass the engine could not be reset before (no reset exists, or the engine refused it; its reload
    says `without_reset`, which runs of earlier kits never wrote, so their results stay as they were): its calls
    are answers on an instance of unknown history, not failures."""
    return info.status == "VOID" and (info.reload or {}).get("without_reset") is True


def fit_calibration(passes: dict[str, PassInfo], records: dict[str, list[RecordView]],
                    tolerance: int) -> Calibration | None:
    """The timing classes fitted on the OK calibration passes; where none is OK because the engine has no reset,
    on the calls whose label needs none (repeats and the call after the other prompt, never the "fresh" one)."""
    def samples(passes_used: list[str], roles: tuple[str, ...]) -> list[tuple[str, float]]:
        return [(state, r.prefill_ms) for pid in passes_used for r in records[pid]
                if r.role in roles and (state := calibration_state(r, tolerance)) and r.prefill_ms]

    calibration_passes = {pid: info for pid, info in passes.items() if info.phase == "calibration"}
    found = samples([pid for pid, info in calibration_passes.items() if info.status == "OK"],
                    tuple(CALIBRATION_HISTORY))
    if not found:
        found = samples([pid for pid, info in calibration_passes.items() if no_reset(info)],
                        ("cal_repeat", "cal_after_other"))
    return calibrate(found) if found else None


def state_of(record: RecordView, calibration: Calibration | None, tolerance: int) -> tuple[str, float | None, str]:
    """(state, confidence, source) of one record, recomputed; "unknown" when neither telemetry nor a
    calibration can say."""
    label = from_telemetry(record.cached_tokens, record.prompt_tokens, tolerance)
    if label is None and calibration is not None:
        label = classify(calibration, record.prefill_ms)
    if label is None or label.state is None:
        return "unknown", None, "none"
    return label.state, label.confidence, label.source


def lineage(rows: list[RecordView], states: list[str]) -> list[str]:
    """Each call's state including how the reused KV was formed: a full-KV reuse serves the KV that the
    last measured call which evaluated anything built, so it is named after that builder
    ("full_kv<-full_eval", "full_kv<-partial"). `rows` are one pass's records in order, `states` theirs."""
    builder: str | None = None
    names = []
    for r, state in zip(rows, states):
        if state == "full_kv" and builder is not None:
            names.append(f"full_kv<-{builder}")
        else:
            names.append(state)
        if r.measured and state != "full_kv":
            builder = state
    return names


def calls(records: list[RecordView], calibration: Calibration | None, tolerance: int) -> list[Call]:
    """One pass's records with their states and lineage recomputed."""
    states = [state_of(r, calibration, tolerance) for r in records]
    names = lineage(records, [state for state, _, _ in states])
    return [Call(r, *state, name) for r, state, name in zip(records, states, names)]


def modal(outputs: list[str]) -> Modal:
    """Modal share of a list of output ids, with its Wilson 95% interval."""
    from kit.stats.intervals import wilson_interval  # noqa: PLC0415 - the stats package is heavy to import

    if not outputs:
        return Modal(n=0)
    counts = Counter(outputs)
    top, k = counts.most_common(1)[0]
    lo, hi = wilson_interval(k, len(outputs))
    return Modal(n=len(outputs), distinct=len(counts), modal_output=top, modal_count=k,
                 modal_share=round(k / len(outputs), 6), wilson95=[round(lo, 6), round(hi, 6)])


def _fork(a: RecordView, b: RecordView) -> Fork:
    ta, tb = a.text, b.text
    char = first_difference(ta, tb)
    return Fork(char=char, token=first_difference(a.emitted, b.emitted),
                context=ta[max(0, (char or 0) - 40):(char or 0)] if char is not None else None,
                a_continues=ta[char:char + 40] if char is not None else None,
                b_continues=tb[char:char + 40] if char is not None else None)


def _cycle(pid: str, rows: list[Call], labels: dict[str, str]) -> Cycle:
    measured = [c for c in rows if c.record.role in CYCLE_MEASURED]
    names = [c.record.role if c.record.role == "burn_in" else f"{c.record.role} {c.record.arm_index}"
             for c in measured]
    flips = [names[i] for i in range(1, len(measured))
             if measured[i].record.output_sha256 != measured[i - 1].record.output_sha256]
    arm_flips = [f for f in flips if f != "pure 1"]  # the burn-in -> pure boundary is excluded, as in seed 002
    return Cycle(pass_=pid, calls=names, outputs=[labels[str(c.record.output_sha256)] for c in measured],
                 states=[c.lineage for c in measured], prefill_ms=[c.record.prefill_ms for c in measured],
                 flips=flips, flip_at_interposed_only=arm_flips == ["contaminated 1"])


def pinning_table(run_dir: Path, loaded: tuple[Manifest, dict[str, PassInfo], dict[str, list[RecordView]]] | None = None,
                  ) -> PinningResults:
    """The pinning results of a run folder (from `loaded`, what `load` gave, when the caller has read it)."""
    manifest, passes, records = loaded or load(run_dir)
    tolerance = _tolerance(manifest)
    calibration = fit_calibration(passes, records, tolerance)
    by_pass = {pid: calls(records[pid], calibration, tolerance) for pid in passes}
    labels: dict[str, str] = {}
    for pid in passes:
        for r in records[pid]:
            if r.measured and r.output_sha256 not in labels:
                labels[str(r.output_sha256)] = chr(ord("A") + len(labels)) if len(labels) < 26 else f"O{len(labels)}"
    ok = {pid for pid, info in passes.items() if info.status == "OK"}
    cycles = [pid for pid, info in passes.items() if info.phase == "cycle"]
    cycle_rows = [c for pid in cycles if pid in ok for c in by_pass[pid] if c.record.role in CYCLE_MEASURED]
    gate = _gate(passes, cycles, cycle_rows, manifest.run.protocol.resolved.get("gate_on", "states"))
    table = PinningResults(
        table="pinning", run_id=manifest.run_id, files={"pinning": RunPaths.result_name("pinning"),
                                                        "calls": RunPaths.result_name("pinning_calls", ".csv")},
        engine=EngineEntry(**{k: getattr(manifest.run.engine, k) for k in ("kind", "url", "model", "cache_ram", "engine")}),
        telemetry=any(c.source == "telemetry" for rows in by_pass.values() for c in rows),
        calibration=calibration.to_json() if calibration else None,
        outputs={label: sha for sha, label in labels.items()},
        passes=[PinningPass(pass_=pid, phase=info.phase, status=info.status, reason=info.reason,
                            reload_confirmed=bool((info.reload or {}).get("confirmed"))) for pid, info in passes.items()],
        states=_states(cycle_rows, labels), gate=gate, arms=_arms(cycle_rows, labels, gate),
        cycles=[_cycle(pid, by_pass[pid], labels) for pid in cycles if pid in ok],
        regimes=_regimes(passes, by_pass, ok, labels))
    unreset = _without_reset(passes, by_pass, labels) if not ok else None
    if unreset is not None:  # absent otherwise: the results of earlier runs recompute as they were written
        table.without_reset = unreset
    table.verdict = verdict(table)
    return table


def _states(rows: list[Call], labels: dict[str, str]) -> list[StateRow]:
    by_state: dict[str, list[Call]] = {}
    for c in rows:
        by_state.setdefault(c.lineage, []).append(c)
    result = []
    for state, group in by_state.items():
        times = [c.record.prefill_ms for c in group if c.record.prefill_ms is not None]
        summary = _labelled(modal([str(c.record.output_sha256) for c in group]), labels)
        result.append(StateRow(state=state, roles=sorted({str(c.record.role) for c in group}),
                               prefill_ms=PrefillMs(min=min(times), median=statistics.median(times), max=max(times))
                               if times else None, **summary.to_json()))
    return sorted(result, key=lambda s: -(s.prefill_ms.median if s.prefill_ms else 0))


def _labelled(summary: Modal, labels: dict[str, str]) -> Modal:
    """`summary` with its modal output named by its label ("A") rather than its sha256."""
    if summary.n:
        summary.modal_output = labels[str(summary.modal_output)]
    return summary


def _gate(passes: dict[str, PassInfo], cycles: list[str], rows: list[Call], gate_on: str) -> Gate:
    """Every cycle's reload confirmed, and the arms separate: by cache state (KV lineage included), or,
    with `gate_on: prefill_times`, by raw prefill time with no overlap."""
    confirmed = [pid for pid in cycles if (passes[pid].reload or {}).get("confirmed")]
    reasons = []
    if len(confirmed) < len(cycles):
        bad = [pid for pid in cycles if pid not in confirmed]
        detail = (passes[bad[0]].reload or {}).get("detail") or passes[bad[0]].reason
        reasons.append(f"reload not confirmed before {', '.join(bad)} ({detail})")
    arm_states = {arm: sorted({c.lineage for c in rows if c.record.role == arm}) for arm in ("pure", "contaminated")}
    overlap = sorted(set(arm_states["pure"]) & set(arm_states["contaminated"]))
    if not arm_states["pure"] or not arm_states["contaminated"]:
        reasons.append("no calls in one of the arms (every cycle VOID?)")
    elif overlap or "unknown" in arm_states["pure"] + arm_states["contaminated"]:
        reasons.append(f"the arms' cache states overlap (pure {arm_states['pure']}, contaminated "
                       f"{arm_states['contaminated']})")
    pure = [c.record.prefill_ms for c in rows if c.record.role == "pure" and c.record.prefill_ms]
    dirty = [c.record.prefill_ms for c in rows if c.record.role == "contaminated" and c.record.prefill_ms]
    split = separation(pure, dirty).to_json() if pure and dirty else None
    if gate_on == "prefill_times" and split is not None and not split["separate"]:
        reasons.append(f"the arms' prefill times overlap (pure {split['a_range'][0]:.1f}-{split['a_range'][1]:.1f} ms, "
                       f"contaminated {split['b_range'][0]:.1f}-{split['b_range'][1]:.1f} ms)")
    return Gate(status="PASS" if not reasons else "VOID", gate_on=gate_on, reloads_confirmed=[len(confirmed), len(cycles)],
                arm_states=arm_states, arm_prefill_times=split, reasons=reasons)


def _arms(rows: list[Call], labels: dict[str, str], gate: Gate) -> Arms:
    summaries: dict[str, Modal] = {}
    picked: dict[str, RecordView] = {}
    for arm in ("pure", "contaminated"):
        group = [c.record for c in rows if c.record.role == arm]
        summary = modal([str(r.output_sha256) for r in group])
        if summary.n:
            picked[arm] = next(r for r in group if r.output_sha256 == summary.modal_output)
        summaries[arm] = _labelled(summary, labels)
    arms = Arms(pure=summaries["pure"], contaminated=summaries["contaminated"])
    if not gate.passed:
        arms.differ, arms.fork, arms.withheld = None, None, f"gate VOID: {'; '.join(gate.reasons)}"
    elif len(picked) == 2:
        differ = picked["pure"].output_sha256 != picked["contaminated"].output_sha256
        arms.differ, arms.fork = differ, _fork(picked["pure"], picked["contaminated"]) if differ else None
    return arms


def _regime(passes: dict[str, PassInfo], by_pass: dict[str, list[Call]], counted: set[str], phase: str, role: str,
            labels: dict[str, str]) -> tuple[Regime, list[Call]]:
    """The calls of `role` in the passes of `phase` that are `counted`, and their modal output (labelled)."""
    rows = [c for pid, info in passes.items() if info.phase == phase and pid in counted
            for c in by_pass[pid] if c.record.role == role]
    return Regime(**_labelled(modal([str(c.record.output_sha256) for c in rows]), labels).to_json()), rows


def _regimes(passes: dict[str, PassInfo], by_pass: dict[str, list[Call]], ok: set[str],
             labels: dict[str, str]) -> dict[str, Regime]:
    result = {}
    for phase, role in (("always_fresh", "fresh"), ("steady", "steady")):
        summary, rows = _regime(passes, by_pass, ok, phase, role, labels)
        if summary.n:
            summary.states = dict(Counter(c.lineage for c in rows))
        summary.void_passes = [pid for pid, info in passes.items() if info.phase == phase and pid not in ok]
        result[phase] = summary
    return result


def _without_reset(passes: dict[str, PassInfo], by_pass: dict[str, list[Call]],
                   labels: dict[str, str]) -> WithoutReset | None:
    """What the calls of passes no reset preceded measure (see the module's documentation); None where no pass
    is of that kind. A pass's first call has an unknown history: its state stands, its KV lineage is unnamed."""
    unreset = [pid for pid, info in passes.items() if no_reset(info)]
    if not unreset:
        return None
    why = str((passes[unreset[0]].reload or {}).get("detail") or passes[unreset[0]].reason)
    rows = [c for pid in unreset if passes[pid].phase in ("cycle", "steady") for c in by_pass[pid] if c.record.measured]
    states = _states(rows, labels)
    steady, _ = _regime(passes, by_pass, set(unreset), "steady", "steady", labels)
    cycles = [_cycle(pid, by_pass[pid], labels) for pid in unreset if passes[pid].phase == "cycle"]
    impossible = [
        Impossible(verdict="manipulation gate", reason="needs a confirmed reset before every cycle"),
        Impossible(verdict="arms differ, fork", reason="the registered endpoints are withheld without the gate"),
        Impossible(verdict="always-fresh regime", reason="needs a fresh instance before every call")]
    if not any(s.state == "full_eval" for s in states):
        impossible.append(Impossible(verdict="full_eval state (a fresh instance)",
                                     reason="only a reset (or an eviction the kit cannot cause) gives one"))
    return WithoutReset(passes=unreset, why=why, states=states, state_change_flips_bytes=flips_of(states),
                        steady=steady, cycles=cycles,
                        flip_at_interposed_only=[sum(c.flip_at_interposed_only for c in cycles), len(cycles)],
                        impossible=impossible)


CSV_FIELDS = ("pass_id", "phase", "role", "arm_index", "state", "confidence", "source", "prefill_ms",
              "cached_tokens", "prompt_tokens", "output", "output_sha256")


def write(run_dir: Path) -> PinningResults:
    """Compute the results and write results/pinning.json and results/pinning_calls.csv."""
    manifest, passes, records = loaded = load(run_dir)
    table = pinning_table(run_dir, loaded)
    out = RunPaths(run_dir).results
    out.mkdir(exist_ok=True)
    write_json_atomic(out / "pinning.json", table.to_json())
    calibration = Calibration.from_json(table.calibration) if table.calibration else None
    names = {sha: label for label, sha in table.outputs.items()}
    with writing(out / "pinning_calls.csv") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for pid in passes:
            for r in records[pid]:
                state, confidence, source = state_of(r, calibration, _tolerance(manifest))
                writer.writerow({"pass_id": pid, "phase": r.phase, "role": r.role, "arm_index": r.arm_index,
                                 "state": state, "confidence": confidence, "source": source,
                                 "prefill_ms": r.prefill_ms, "cached_tokens": r.cached_tokens,
                                 "prompt_tokens": r.prompt_tokens, "output": names.get(str(r.output_sha256), ""),
                                 "output_sha256": r.output_sha256})
    return table
