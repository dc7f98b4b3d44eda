"""The harness table as the kit first defined it (before several boxes and the harness's own definitions per
mode): kept unchanged for run folders imported by earlier releases (no `definitions` in the manifest's
`protocol.resolved`), so their bundles still verify value by value. New imports use kit.protocols.harness.results.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict

from pydantic import JsonValue

from kit.core.paths import RunPaths
from kit.protocols.harness.modes import kit_classes, prefill_state
from kit.protocols.harness.record import Call, Resolved
from kit.protocols.harness.report import MISSING, Missing, get as _get
from kit.protocols.harness.table import ArmV1, CycleV1, Gate, HarnessRunV1, Prefill, ReportComparison, Row
from kit.protocols.results_model import JsonObject, Number

TABLE = "harness"
RESULTS = RunPaths.result_name("harness")


def _prefill(calls: list[Call]) -> Prefill | None:
    times = [c.prefill_ms for c in calls if c.prefill_ms is not None]
    if not times:
        return None
    return Prefill(min=min(times), median=statistics.median(times), max=max(times))


def _first_difference(text: str, modal: str) -> int:
    """The first character index where `text` departs from the modal output."""
    return next((i for i, (a, b) in enumerate(zip(text, modal)) if a != b), min(len(text), len(modal)))


def metrics(calls: list[Call]) -> ArmV1:
    """An arm's (or a state's) numbers, as the harness's reports name them."""
    error = [c for c in calls if not c.ok]
    other_stop = [c for c in calls if c.ok and c.stop_reason != "stop"]
    kept = [c for c in calls if c.kept()]
    outputs = Counter(c.output_sha256 for c in kept)
    modal_sha, modal_count = outputs.most_common(1)[0] if outputs else (None, 0)
    pairs = len(kept) * (len(kept) - 1) // 2
    modal_text = next((c.text for c in kept if c.output_sha256 == modal_sha), "")
    tokens = [t for c in kept if c.usage and isinstance(t := c.usage.output_tokens, int)]
    return ArmV1(n_raw=len(calls), excluded={"error": len(error), "truncated_or_other_stop": len(other_stop)},
                 n=len(kept), modal_count=modal_count, modal_share=modal_count / len(kept) if kept else None,
                 modal_sha256=modal_sha, distinct_count=len(outputs), all_identical=len(outputs) == 1,
                 pairwise_agreement=sum(k * (k - 1) // 2 for k in outputs.values()) / pairs if pairs else None,
                 divergence_char_indices=sorted({_first_difference(c.text, modal_text) for c in kept
                                                 if c.output_sha256 != modal_sha}),
                 output_token_variance=statistics.pvariance(tokens) if tokens else None,
                 prefill_ms=_prefill(kept),
                 response_models=sorted({c.response_model or "" for c in kept}),
                 model_drift=len({c.response_model for c in kept}) > 1
                 or any(c.response_model != c.model_sent for c in kept),
                 wire_mismatch=any(c.wire_sha256 not in (None, c.prompt_sha256) for c in kept))


def cycles(calls: list[Call]) -> list[CycleV1]:
    """Per cycle: does the output flip across the interposed control call; were the unloads confirmed."""
    by_cycle: dict[int, list[Call]] = defaultdict(list)
    for call in calls:
        if call.cycle is not None:
            by_cycle[call.cycle].append(call)
    found = []
    for cycle, members in sorted(by_cycle.items()):
        members.sort(key=lambda c: c.schedule_index)
        interposed = next((i for i, c in enumerate(members) if c.control), None)
        before = [c for c in members[:interposed] if not c.control] if interposed is not None else []
        after = [c for c in members[interposed + 1:] if not c.control] if interposed is not None else []
        confirmed = [c.pre_unload_confirmed for c in members if c.pre_unload_confirmed is not None]
        waits = [c.unload_wait_ms for c in members if c.unload_wait_ms is not None]
        found.append(CycleV1(cycle=cycle, calls=len(members),
                             interposed=members[interposed].control if interposed is not None else None,
                             flips=before[-1].output_sha256 != after[0].output_sha256 if before and after else None,
                             unload_confirmed=all(confirmed) if confirmed else None,
                             unload_wait_ms_max=max(waits) if waits else None))
    return found


def manipulation(mode: str | None, arms: dict[str, ArmV1], raw: dict[str, list[Call]],
                 thresholds: list[Number] | None) -> Gate:
    def times(arm: str) -> list[Number]:
        return [c.prefill_ms or 0 for c in raw[arm] if c.kept()]

    if {"cold", "warm"} <= arms.keys() and times("cold") and times("warm"):
        cold, warm = statistics.median(times("cold")), statistics.median(times("warm"))
        threshold = 3 * warm
        cold_all_above = all(t > threshold for t in times("cold"))
        warm_below = warm < cold / 3
        return Gate.of({"cold_median_ms": cold, "warm_median_ms": warm, "threshold_ms": threshold,
                        "cold_all_above": cold_all_above, "warm_median_below_cold_third": warm_below,
                        "pass": cold_all_above and warm_below,
                        "rule": "cache A/B: every cold prefill > 3 x warm median, and warm median < cold median / 3"})
    if {"adjacent", "gapped"} <= arms.keys() and times("adjacent") and times("gapped"):
        if thresholds is None:
            return Gate.of({"pass": None,
                            "rule": "cache timing: needs fixed thresholds (kit import --thresholds LOW,HIGH)"})
        low, high = thresholds
        adjacent_below = all(t < low for t in times("adjacent"))
        gapped_above = all(t > high for t in times("gapped"))
        return Gate.of({"adjacent_median_ms": statistics.median(times("adjacent")), "adjacent_max_ms_threshold": low,
                        "adjacent_all_below": adjacent_below,
                        "gapped_median_ms": statistics.median(times("gapped")), "gapped_min_ms_threshold": high,
                        "gapped_all_above": gapped_above, "pass": adjacent_below and gapped_above,
                        "rule": f"cache timing: every adjacent prefill < {low} ms and every gapped prefill > "
                                f"{high} ms"})
    return Gate.of({"pass": None,
                    "rule": f"no manipulation gate is defined for mode {mode!r} with arms {sorted(arms)}"})


def compute(records: list[Call], resolved: Resolved) -> HarnessRunV1:
    measured = [r for r in records if not r.control]
    raw: dict[str, list[Call]] = defaultdict(list)
    for call in measured:
        raw[call.arm or "(none)"].append(call)
    arms = {arm: metrics(calls) for arm, calls in sorted(raw.items())}
    thresholds = resolved.thresholds
    by_state = None
    if thresholds:
        low, high = thresholds
        by_state = {arm: {state: metrics([c for c in calls if prefill_state(c.prefill_ms, low, high) == state])
                          for state in sorted({prefill_state(c.prefill_ms, low, high) for c in calls})}
                    for arm, calls in sorted(raw.items())}
    gate = manipulation(resolved.mode if "mode" in resolved.model_fields_set else "", arms, raw, thresholds)
    modal = {arm: m.modal_sha256 for arm, m in arms.items()}
    controls = Counter(r.control for r in records if r.control)
    return HarnessRunV1.of({"table": TABLE, "mode": resolved.mode, "files": {"harness": RESULTS},
                            "totals": {"records_in": len(records), "controls_excluded": dict(sorted(controls.items()))},
                            "arms": arms, "by_state": by_state, "thresholds_ms": thresholds,
                            "prefill_classes": kit_classes(raw), "cycles": cycles(records),
                            "gates": {"cross_arm_negative_control": len({c.prompt_sha256 for c in measured}) == 1,
                                      "manipulation": gate},
                            "arms_differ": (len(set(modal.values())) > 1) if gate.pass_ else None})


# report path (under boxes.<box>) -> kit table path; "*" is each arm
ARM_KEYS = {
    "n_raw": "n_raw", "excluded.error": "excluded.error",
    "excluded.truncated_or_other_stop": "excluded.truncated_or_other_stop",
    "metrics.n": "n", "metrics.modal_count": "modal_count", "metrics.modal_share": "modal_share",
    "metrics.modal_sha256": "modal_sha256", "metrics.distinct_count": "distinct_count",
    "metrics.all_identical": "all_identical", "metrics.pairwise_agreement": "pairwise_agreement",
    "metrics.divergence_char_indices": "divergence_char_indices",
    "metrics.output_token_variance": "output_token_variance", "prefill_ms.min": "prefill_ms.min",
    "prefill_ms.median": "prefill_ms.median", "prefill_ms.max": "prefill_ms.max",
    "flags.model_drift": "model_drift", "flags.response_models": "response_models",
    "flags.wire_mismatch": "wire_mismatch",
}


def _flat(data: JsonValue, prefix: str = "") -> dict[str, JsonValue]:
    if isinstance(data, dict) and data:
        return {k: v for key, value in data.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): data}


def _agree(a: JsonValue, b: JsonValue) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def _row(key: str, reported: JsonValue, ours: JsonValue | Missing) -> Row:
    if isinstance(ours, Missing):
        return Row(value=key, report=reported, kit=None, agree=None)
    return Row(value=key, report=reported, kit=ours, agree=_agree(reported, ours))


def compare(table: HarnessRunV1, report: JsonObject, box: str | None) -> ReportComparison:
    """Rows for every value of the report's box `box` (its only box when None, kept as the harness wrote it), and
    the counts."""
    boxes = report.get("boxes") or {}
    name = box if box in boxes else next(iter(boxes), None)
    found = boxes.get(name) or {}
    rows = []
    for arm, reported in (found.get("arms") or {}).items():
        ours: JsonValue = table.arms[arm].to_json() if arm in table.arms else {}
        for key, value in _flat(reported).items():
            kit_key = ARM_KEYS.get(key)
            rows.append(_row(f"arms.{arm}.{key}", value,
                             _get(ours, tuple(kit_key.split("."))) if kit_key else MISSING))
    gates: JsonValue = table.gates.to_json()
    for key, value in _flat(found.get("gates") or {}).items():
        rows.append(_row(f"gates.{key}", value, _get(gates, tuple(key.split(".")))))
    rows.append(_row("arms_differ", found.get("arms_differ"), table.arms_differ))
    totals = report.get("totals") or {}
    controls = table.totals["controls_excluded"]
    excluded = controls if isinstance(controls, dict) else {}
    records_in = table.totals["records_in"]  # a count: compute writes it
    ours_totals: dict[str, JsonValue] = {"records_in": records_in if isinstance(records_in, int) else None,
                                         "flushers_excluded": excluded.get("flusher", 0),
                                         "warmups_excluded": excluded.get("warmup", 0) + excluded.get("burnin", 0)}
    rows += [_row(f"totals.{key}", value, ours_totals.get(key, MISSING)) for key, value in totals.items()]
    counted = [r for r in rows if r["agree"] is not None]
    return ReportComparison.of({"box": name, "rows": rows, "compared": len(counted),
                                "agree": sum(bool(r["agree"]) for r in counted),
                                "differ": [r["value"] for r in counted if not r["agree"]],
                                "not_computed_by_the_kit": [r["value"] for r in rows if r["agree"] is None]})
