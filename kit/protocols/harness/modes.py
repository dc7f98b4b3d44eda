"""The determinism harness's modes: for each, its arms, the controls its report counts, its gates and its
estimator, defined as the harness's analyzer for that mode defines them (one analyzer per mode, named in
seed 002's section 10; FOLLOWUP-COMPANIONS.md's companions A to F).

Common to the A/B modes: `cross_arm_negative_control` holds when the box's calls of the measured arms
(and, in cache-instance, its burn-ins) carry one and the same request sha256; `arms_differ` is null
unless the manipulation gate and that control pass and both arms have valid calls, then whether the two
arms' modal outputs differ. Medians interpolate (the harness's percentile 50); a missing duration is 0.

- cache-ab (arms cold, warm; warmups and flushers excluded): threshold = 3 x the warm arm's median
  prefill; `cold_all_above` when every valid cold prefill is above it; `warm_median_below_cold_third`
  when the warm median is below the cold median / 3; `pass` is their conjunction.
- cache-timing (arms adjacent, gapped; warmups and burn-ins excluded): every valid adjacent prefill
  below LOW and every valid gapped prefill above HIGH ms.
- cache-instance (arms pure, contaminated; burn-ins, warmups and flushers excluded): every valid pure
  prefill below LOW, every valid contaminated prefill above HIGH ms, and every cycle's reset confirmed
  (`pre_unload_confirmed` of its burn-in); per cycle whether all its pure calls and all its contaminated
  calls carry their arm's pooled modal output, and the flip at the flusher (both, and the modals
  differ); `endpoint3_flip_all_cycles` when the flip holds in every cycle (null unless arms_differ is).
- churn-ab (arms blocked, churn; warmups excluded): load durations in s; `cold_threshold_s` = 3 x the
  blocked arm's median load; `churn_all_cold` when every valid churn call loaded above it,
  `blocked_warm` when the blocked median is below 1 s (the harness's WARM_MAX_S), `churn_all_confirmed`
  when every churn call that ended normally had its unload confirmed; `pass` is their conjunction.
  Estimator (`churn_minus_blocked`), only when the manipulation and cross-arm gates pass: the Wald
  difference of the modal shares, `diff` = p1 - p2, `se` = sqrt(p1(1-p1)/n1 + p2(1-p2)/n2), `ci95` =
  diff -/+ 1.959964 se. Also the report's exploratory `cache_state_decomposition` per box, by schedule
  position (`repeat`): the first blocked block (repeats 0-9), each later block's head, the rest, churn.
- margins (descriptive, no gate): per `box::cell`, the per-call minimum top1-minus-top2 logprob
  margins, the share of token positions below 0.001, 0.01 and 0.1, and the fork of the two most
  frequent variants (count, then sha256) at the first token where their token streams differ.

LOW and HIGH are the harness's registered thresholds (25 and 30 ms) unless `--thresholds` gives others.
A mode the kit does not know gets the arm metrics and no gate, with the reason.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict

from kit.protocols.harness.record import Call, MarginRow
from kit.protocols.harness.table import (Arm, Box, Cycle, Estimate, Gate, Gates, LoadDuration, PrefillClasses,
                                         Totals)
from kit.protocols.results_model import Number
from kit.record.cache_state import separation

Z95 = 1.959963984540054  # the harness's 97.5th percentile of the standard normal
REGISTERED_MS = (25.0, 30.0)  # the harness's prefill thresholds for cache-timing and cache-instance
COLD_FACTOR = 3.0
WARM_MAX_S = 1.0
MINI_BLOCK = 10
MARGIN_THRESHOLDS = (0.001, 0.01, 0.1)
BECAUSE_HISTORY = ("not computed, because the harness matches modal outputs against labelled variants of earlier "
                   "sessions that are constants of its analyzer, not in the records")
BECAUSE_CONFIRMATORY = ("not computed, because it needs the study-3 confirmatory report's modal output (the "
                        "harness's --confirmatory-report), which is not among the imported files")
GateValue = Number | bool | dict[str, bool | None] | None  # a value a mode's gate reports beside `pass`


class Position(TypedDict):
    """The churn report's outputs and timings of one schedule position class of one box."""

    n: int
    distinct: int
    modal_share: float
    shas: list[str]
    prefill_ms_median: Number | None
    load_s_median: Number | None


Decomposition = dict[str, dict[str, Position]]  # box -> position class -> its calls


class MinMargin(TypedDict):
    min: Number | None
    median: Number | None


class ForkSide(TypedDict):
    """One of the two most frequent variants at the token where they part."""

    token: str
    chosen_logprob: Number | None
    margin: Number | None


class Fork(TypedDict):
    """Where a cell's two most frequent variants part (`note`: `length-fork`, one a prefix of the other)."""

    token_index: int
    note: NotRequired[str]
    modal: ForkSide | None
    alternate: ForkSide | None


class MarginCell(TypedDict):
    """The margins report's numbers of one `box::cell`."""

    n: int
    records_with_margins: int
    variants: int
    variant_counts: list[int]
    min_margin: MinMargin
    defined_positions: int
    positions_below: dict[str, float | None]
    chosen_not_top1_total: int
    fork: Fork | None


class KitExtras(TypedDict, total=False):
    """The kit's own additions to a box's block (kit.protocols.harness.results): its prefill classes, and with
    thresholds its arms per prefill state."""

    prefill_classes: PrefillClasses
    by_state: dict[str, dict[str, Arm]]


class Study(TypedDict, total=False):
    """What a mode reports over the whole study, beside the boxes (a key of the table each)."""

    cache_state_decomposition: Decomposition
    cells: dict[str, MarginCell]


def median(values: list[Number]) -> Number | None:
    return statistics.median(values) if values else None


def prefill_ms(call: Call) -> Number:
    return call.prefill_ms or 0.0


def load_s(call: Call) -> float:
    return ((call.usage and call.usage.load_duration_ns) or 0) / 1e9


def box_of(call: Call) -> str:
    return call.box or "unknown"


def prefill_state(prefill_ms: float | None, low: float, high: float) -> str:
    """A call's prefill time against the thresholds LOW, HIGH (ms): below, between, above, or unknown."""
    if prefill_ms is None:
        return "unknown"
    return "below" if prefill_ms < low else "above" if prefill_ms > high else "between"


def kit_classes(arms: dict[str, list[Call]]) -> PrefillClasses:
    """Arms whose prefill ranges overlap merge into one class; each pair's separation, as measured."""
    times = {arm: [c.prefill_ms for c in calls if c.prefill_ms is not None] for arm, calls in arms.items()}
    names = [arm for arm in sorted(times) if times[arm]]
    group = {arm: {arm} for arm in names}
    pairs = {}
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            found = separation(times[a], times[b])
            pairs[f"{a}|{b}"] = found.to_json()
            if not found.separate:
                merged = group[a] | group[b]
                for arm in merged:
                    group[arm] = merged
    classes = sorted({tuple(sorted(g)) for g in group.values()})
    return PrefillClasses(rule="arms whose prefill ranges overlap are one class (kit.record.cache_state.separation)",
                          classes=[list(c) for c in classes], pairs=pairs)


@dataclass
class BoxCalls:
    """One box's calls: per arm all of them (`raw`) and the valid ones, the arms' blocks, every call, and the
    kit's own additions to its block (written after what the mode reports)."""

    box: str
    raw: dict[str, list[Call]]
    valid: dict[str, list[Call]]
    arms: dict[str, Arm]
    records: list[Call]
    thresholds: list[Number] | None
    extras: KitExtras = field(default_factory=KitExtras)

    def one_request(self, *extra: Call) -> bool:
        shas = {c.prompt_sha256 for calls in self.raw.values() for c in calls} | {c.prompt_sha256 for c in extra}
        return len(shas) == 1

    def limits(self) -> tuple[float, float]:
        low, high = self.thresholds or REGISTERED_MS
        return float(low), float(high)

    def differ(self, passed: bool, cross: bool, a: str, b: str) -> bool | None:
        ma, mb = (self.arms[arm].metrics for arm in (a, b))
        return ma.modal_sha256 != mb.modal_sha256 if passed and cross and ma and mb else None

    def block(self, cross: bool, gate: Gate, arms_differ: bool | None, arms: dict[str, Arm] | None = None,
              **reported: list[Cycle] | Estimate | bool | None) -> Box:
        """The box's block: its arms, its gates, whether its arms differ, what else the mode reports, the kit's."""
        return Box.of({"arms": self.arms if arms is None else arms, "gates": Gates(cross_arm_negative_control=cross, manipulation=gate),
                       "arms_differ": arms_differ, **reported, **self.extras})


def gate(passed: bool | None, rule: str, **values: GateValue) -> Gate:
    """A manipulation gate: the mode's values (in its analyzer's order), then `pass` and `rule`."""
    return Gate.of({**values, "pass": passed, "rule": rule})


def cache_ab(b: BoxCalls) -> Box:
    warm, cold = ([prefill_ms(c) for c in b.valid[arm]] for arm in ("warm", "cold"))
    warm_median, cold_median = median(warm), median(cold)
    threshold = warm_median * COLD_FACTOR if warm_median is not None else None
    cold_all_above = bool(cold) and threshold is not None and all(v > threshold for v in cold)
    warm_below = warm_median is not None and cold_median is not None and warm_median < cold_median / COLD_FACTOR
    passed = cold_all_above and warm_below
    cross = b.one_request()
    return b.block(cross, gate(passed, "every cold prefill > 3 x the warm median, and the warm median < the cold "
                               "median / 3", cold_all_above=cold_all_above, warm_median_below_cold_third=warm_below,
                               warm_median_ms=warm_median, cold_median_ms=cold_median, threshold_ms=threshold),
                   b.differ(passed, cross, "cold", "warm"))


def cache_timing(b: BoxCalls) -> Box:
    low, high = b.limits()
    adjacent, gapped = ([prefill_ms(c) for c in b.valid[arm]] for arm in ("adjacent", "gapped"))
    adjacent_below = bool(adjacent) and all(v < low for v in adjacent)
    gapped_above = bool(gapped) and all(v > high for v in gapped)
    passed = adjacent_below and gapped_above
    cross = b.one_request()
    return b.block(cross, gate(passed, f"every adjacent prefill < {low:g} ms and every gapped prefill > {high:g} ms",
                               adjacent_all_below=adjacent_below, gapped_all_above=gapped_above,
                               adjacent_median_ms=median(adjacent), gapped_median_ms=median(gapped),
                               adjacent_max_ms_threshold=low, gapped_min_ms_threshold=high),
                   b.differ(passed, cross, "adjacent", "gapped"))


def _uniform(calls: list[Call], modal: str | None) -> bool:
    return bool(calls) and len({c.output_sha256 for c in calls}) == 1 and calls[0].output_sha256 == modal


def cache_instance(b: BoxCalls) -> Box:
    low, high = b.limits()
    burnins = [c for c in b.records if c.control == "burnin"]
    resets = {c.cycle: bool(c.pre_unload_confirmed) for c in burnins}
    burnin_prefill = {c.cycle: prefill_ms(c) for c in burnins}
    numbers = sorted({c.cycle for arm in ("pure", "contaminated") for c in b.valid[arm]} | set(resets),
                     key=lambda c: (c is None, c if c is not None else 0))
    pure, contaminated = ([prefill_ms(c) for c in b.valid[arm]] for arm in ("pure", "contaminated"))
    pure_below = bool(pure) and all(v < low for v in pure)
    contaminated_above = bool(contaminated) and all(v > high for v in contaminated)
    confirmed = bool(resets) and all(resets.get(c) for c in numbers)
    passed = pure_below and contaminated_above and confirmed
    cross = b.one_request(*burnins)
    differ = b.differ(passed, cross, "pure", "contaminated")
    modals = {arm: metrics.modal_sha256 if (metrics := b.arms[arm].metrics) else None
              for arm in ("pure", "contaminated")}
    cycles = []
    for number in numbers:
        calls = {arm: [c for c in b.valid[arm] if c.cycle == number] for arm in ("pure", "contaminated")}
        uniform = {arm: _uniform(calls[arm], modals[arm]) for arm in calls}
        cycles.append(Cycle(cycle=number, burnin_reset_confirmed=resets.get(number),
                            burnin_prefill_ms=burnin_prefill.get(number),
                            pure_uniform=uniform["pure"], pure_n=len(calls["pure"]),
                            contaminated_uniform=uniform["contaminated"], contaminated_n=len(calls["contaminated"]),
                            flip_at_flusher=(uniform["pure"] and uniform["contaminated"]
                                             and modals["pure"] != modals["contaminated"])))
    endpoint3 = (bool(cycles) and all(c.flip_at_flusher for c in cycles)) if differ is not None else None
    return b.block(cross, gate(passed, f"every pure prefill < {low:g} ms, every contaminated prefill > {high:g} ms, "
                               "every cycle's reset confirmed", pure_all_below=pure_below,
                               contaminated_all_above=contaminated_above, resets_confirmed=confirmed,
                               resets_by_cycle={str(c): resets.get(c) for c in numbers},
                               pure_median_ms=median(pure), contaminated_median_ms=median(contaminated),
                               pure_max_ms_threshold=low, contaminated_min_ms_threshold=high),
                   differ, cycles=cycles, endpoint3_flip_all_cycles=endpoint3)


def wald(x1: int, n1: int, x2: int, n2: int) -> Estimate:
    p1, p2 = x1 / n1, x2 / n2
    diff, se = p1 - p2, math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
    return Estimate(diff=diff, se=se, ci95=[diff - Z95 * se, diff + Z95 * se])


def churn_ab(b: BoxCalls) -> Box:
    loads = {arm: [load_s(c) for c in b.valid[arm]] for arm in ("blocked", "churn")}
    arms = {**b.arms, **{arm: b.arms[arm].model_copy(update={"load_duration_s": LoadDuration(
        median=median(values), max=max(values, default=None))}) for arm, values in loads.items()}}
    blocked = median(loads["blocked"])
    threshold = blocked * COLD_FACTOR if blocked is not None else None
    ended = [c for c in b.raw.get("churn", []) if c.kept()]
    blocked_warm = blocked is not None and blocked < WARM_MAX_S
    churn_confirmed = bool(ended) and all(c.pre_unload_confirmed is True for c in ended)
    churn_cold = bool(loads["churn"]) and threshold is not None and all(s > threshold for s in loads["churn"])
    passed = blocked_warm and churn_confirmed and churn_cold
    cross = b.one_request()
    blocked_m, churn_m = (b.arms[arm].metrics for arm in ("blocked", "churn"))
    estimate = (wald(churn_m.modal_count, churn_m.n, blocked_m.modal_count, blocked_m.n)
                if passed and cross and blocked_m and churn_m else None)
    return b.block(cross, gate(passed, "every churn call's unload confirmed and its load > 3 x the blocked median "
                               f"load, and the blocked median load < {WARM_MAX_S:g} s", blocked_warm=blocked_warm,
                               churn_all_confirmed=churn_confirmed, churn_all_cold=churn_cold,
                               blocked_median_load_s=blocked, churn_median_load_s=median(loads["churn"]),
                               cold_threshold_s=threshold),
                   None, arms, churn_minus_blocked=estimate)


def decomposition(records: list[Call]) -> Decomposition:
    """The churn report's exploratory cache-state decomposition, per box and schedule position class."""
    by_box: dict[str, dict[str, list[Call]]] = defaultdict(lambda: defaultdict(list))
    for call in records:
        if call.control == "warmup" or call.arm not in ("blocked", "churn") or not call.kept():
            continue
        repeat = call.repeat or 0
        position = ("churn" if call.arm == "churn" else "first_blocked_block" if repeat < MINI_BLOCK
                    else "block_head" if repeat % MINI_BLOCK == 0 else "block_rest")
        by_box[box_of(call)][position].append(call)
    out: Decomposition = {}
    for box in sorted(by_box):
        out[box] = {}
        for position in ("first_blocked_block", "block_head", "block_rest", "churn"):
            calls = by_box[box].get(position)
            if calls:
                shas = Counter(c.output_sha256 for c in calls)
                out[box][position] = Position(n=len(calls), distinct=len(shas),
                                              modal_share=max(shas.values()) / len(calls), shas=sorted(shas),
                                              prefill_ms_median=median([prefill_ms(c) for c in calls]),
                                              load_s_median=median([load_s(c) for c in calls]))
    return out


def _side(row: MarginRow) -> ForkSide:
    return ForkSide(token=row.token, chosen_logprob=row.chosen, margin=row.margin())


def _fork(calls: list[Call]) -> Fork | None:
    ranked = sorted(Counter(c.output_sha256 for c in calls).items(), key=lambda kv: (-kv[1], kv[0]))
    if len(ranked) < 2:
        return None
    streams = []
    for sha, _ in ranked[:2]:
        found = next((c.logprob_margins for c in calls if c.output_sha256 == sha and c.logprob_margins), None)
        if found is None:
            return None
        streams.append(found.tokens)
    first, second = streams
    limit = min(len(first), len(second))
    index = next((i for i in range(limit) if first[i].token != second[i].token), None)
    if index is None:
        return None if len(first) == len(second) else Fork(token_index=limit, note="length-fork", modal=None,
                                                           alternate=None)
    return Fork(token_index=index, modal=_side(first[index]), alternate=_side(second[index]))


def margins_cells(records: list[Call]) -> Study:
    """The margins report's cells (`box::cell`, calls that ended normally, warmups left out)."""
    grouped = defaultdict(list)
    for call in records:
        if call.control != "warmup" and call.kept():
            grouped[f"{box_of(call)}::{call.unit}"].append(call)
    cells = {}
    for key in sorted(grouped):
        calls = grouped[key]
        found = [m for c in calls if (m := c.logprob_margins)]
        minima = [m.min_top2_margin for m in found if m.min_top2_margin is not None]
        rows = [margin for m in found for row in m.tokens if (margin := row.margin()) is not None]
        variants = Counter(c.output_sha256 for c in calls)
        cells[key] = MarginCell(n=len(calls), records_with_margins=len(found), variants=len(variants),
                                variant_counts=sorted(variants.values(), reverse=True),
                                min_margin=MinMargin(min=min(minima, default=None), median=median(minima)),
                                defined_positions=len(rows),
                                positions_below={str(t): sum(1 for r in rows if r < t) / len(rows) if rows else None
                                                 for t in MARGIN_THRESHOLDS},
                                chosen_not_top1_total=sum(m.chosen_not_top1 for m in found), fork=_fork(calls))
    return Study(cells=cells)


def margins_totals(records: list[Call]) -> Totals:
    measured = [c for c in records if c.control != "warmup"]
    return {"records_in": len(records), "warmups_excluded": len(records) - len(measured),
            "excluded": {"error": sum(1 for c in measured if not c.ok),
                         "truncated_or_other_stop": sum(1 for c in measured if c.ok and c.stop_reason != "stop"),
                         "no_margins": sum(1 for c in measured if c.kept() and not c.logprob_margins)}}


def no_gate(b: BoxCalls) -> Box:
    return b.block(b.one_request(), gate(None, "the harness defines no manipulation gate for this mode"), None)


@dataclass(frozen=True)
class Mode:
    """One mode of the harness: its arms (None: every arm found), the controls its report's totals count,
    its gates and estimator per box, what it reports over the study, and what the kit cannot compute."""

    name: str
    arms: tuple[str, ...] | None
    counted: dict[str, tuple[str, ...]]  # totals key -> the controls it counts
    box: Callable[[BoxCalls], Box] = no_gate
    study: Callable[[list[Call]], Study] = lambda records: Study()
    totals_of: Callable[[list[Call]], Totals] | None = None
    not_computed: dict[str, str] = field(default_factory=lambda: {"history_matches": BECAUSE_HISTORY})

    def counts(self, call: Call) -> bool:
        return self.arms is None or call.arm in self.arms

    def totals(self, records: list[Call]) -> Totals:
        if self.totals_of:
            return self.totals_of(records)
        controls = Counter(c.control for c in records if c.control)
        if not self.counted:
            return {"records_in": len(records), "controls_excluded": dict(sorted(controls.items()))}
        return {"records_in": len(records), **{key: sum(controls[n] for n in names)
                                               for key, names in self.counted.items()}}


MODES = {
    "cache-ab": Mode("cache-ab", ("cold", "warm"), {"warmups_excluded": ("warmup",),
                                                    "flushers_excluded": ("flusher",)}, cache_ab),
    "cache-timing": Mode("cache-timing", ("adjacent", "gapped"), {"warmups_excluded": ("warmup", "burnin")},
                         cache_timing),
    "cache-instance": Mode("cache-instance", ("pure", "contaminated"),
                           {"controls_excluded": ("burnin", "warmup", "flusher")}, cache_instance),
    "churn-ab": Mode("churn-ab", ("blocked", "churn"), {"warmups_excluded": ("warmup",)}, churn_ab,
                     lambda records: Study(cache_state_decomposition=decomposition(records)),
                     not_computed={"matches_confirmatory_modal": BECAUSE_CONFIRMATORY}),
    "margins": Mode("margins", None, {}, no_gate, margins_cells, margins_totals, not_computed={}),
}


def mode_of(name: str, records: list[Call]) -> Mode:
    """The mode a run's manifest names (`study3-cache-ab` is cache-ab), else the one whose arms its calls have."""
    for key, mode in MODES.items():
        if name.endswith(key):
            return mode
    arms = {c.arm for c in records if not c.control}
    found = next((m for m in MODES.values() if m.arms and set(m.arms) <= arms), None)
    return found or Mode(name or "unknown", None, {})
