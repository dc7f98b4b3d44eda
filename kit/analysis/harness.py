"""What seed 002's determinism-harness reports say of a run, recomputed from its imported calls.

Read from the run folder only (records/calls.jsonl and the manifest's `protocol.resolved`), so `kit
verify` recomputes it. For every arm (the cell's `key=value` suffix; controls are never counted):
calls in (`n_raw`), calls left out (`ok` false: `error`; a stop other than `stop`:
`truncated_or_other_stop`), and of the rest `n`, the modal output's count, share and sha256, distinct
outputs, whether all are identical, and prefill min/median/max (Ollama's `prompt_eval_duration_ns`);
also the share of call pairs with identical outputs (`pairwise_agreement`), the first character at
which each non-modal output departs from the modal one (`divergence_char_indices`) and the population
variance of the output token counts (`output_token_variance`). The same metrics per prefill state
where fixed thresholds are given (`below` LOW, `between`, `above` HIGH ms). Prefill classes the kit
finds on its own: arms whose prefill ranges overlap are one class (kit.cache_state.separation: no
constant boundary). Per cycle (modes with `meta_cycle`): whether the
output flips across the interposed control call, and whether every unload was confirmed.

Gates, as the harness states them for its modes (the rule used is written beside each result):
- cache A/B (arms cold, warm): every cold prefill above 3x the warm median, and the warm median below a
  third of the cold median;
- cache timing (arms adjacent, gapped; needs thresholds LOW,HIGH): every adjacent prefill below LOW and
  every gapped prefill above HIGH;
- any other mode: no manipulation gate (null, with the reason).
`cross_arm_negative_control`: every measured call of every arm sent one and the same request. `arms_differ`
is null unless the manipulation gate passed; then whether the arms' modal outputs differ.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from kit.atomic_file import write_json_atomic
from kit.cache_state import separation
from kit.manifest import Manifest
from kit.paths import RunPaths
from kit.records import read_records

TABLE = "harness"
RESULTS = RunPaths.result_name("harness")
CALLS = RunPaths.records_name("calls")


def _prefill(calls: list[dict[str, Any]]) -> dict[str, float] | None:
    times = [c["prefill_ms"] for c in calls if c.get("prefill_ms") is not None]
    if not times:
        return None
    return {"min": min(times), "median": statistics.median(times), "max": max(times)}


def _first_difference(text: str, modal: str) -> int:
    """The first character index where `text` departs from the modal output."""
    return next((i for i, (a, b) in enumerate(zip(text, modal)) if a != b), min(len(text), len(modal)))


def metrics(calls: list[dict[str, Any]]) -> dict[str, Any]:
    """An arm's (or a state's) numbers, as the harness's reports name them."""
    error = [c for c in calls if not c["ok"]]
    other_stop = [c for c in calls if c["ok"] and c.get("stop_reason") != "stop"]
    kept = [c for c in calls if c["ok"] and c.get("stop_reason") == "stop"]
    outputs = Counter(c["output_sha256"] for c in kept)
    modal_sha, modal_count = outputs.most_common(1)[0] if outputs else (None, 0)
    pairs = len(kept) * (len(kept) - 1) // 2
    modal_text = next((c["text"] for c in kept if c["output_sha256"] == modal_sha), "")
    tokens = [c["usage"]["output_tokens"] for c in kept if isinstance((c.get("usage") or {}).get("output_tokens"), int)]
    return {"n_raw": len(calls), "excluded": {"error": len(error), "truncated_or_other_stop": len(other_stop)},
            "n": len(kept), "modal_count": modal_count, "modal_share": modal_count / len(kept) if kept else None,
            "modal_sha256": modal_sha, "distinct_count": len(outputs), "all_identical": len(outputs) == 1,
            "pairwise_agreement": sum(k * (k - 1) // 2 for k in outputs.values()) / pairs if pairs else None,
            "divergence_char_indices": sorted({_first_difference(c["text"], modal_text) for c in kept
                                               if c["output_sha256"] != modal_sha}),
            "output_token_variance": statistics.pvariance(tokens) if tokens else None,
            "prefill_ms": _prefill(kept),
            "response_models": sorted({c.get("response_model") or "" for c in kept}),
            "model_drift": len({c.get("response_model") for c in kept}) > 1
            or any(c.get("response_model") != c.get("model_sent") for c in kept),
            "wire_mismatch": any(c.get("wire_sha256") not in (None, c["prompt_sha256"]) for c in kept)}


def _state(prefill_ms: float | None, low: float, high: float) -> str:
    if prefill_ms is None:
        return "unknown"
    return "below" if prefill_ms < low else "above" if prefill_ms > high else "between"


def kit_classes(arms: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Arms whose prefill ranges overlap merge into one class; each pair's separation, as measured."""
    times = {arm: [c["prefill_ms"] for c in calls if c.get("prefill_ms") is not None] for arm, calls in arms.items()}
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
    return {"rule": "arms whose prefill ranges overlap are one class (kit.cache_state.separation)",
            "classes": [list(c) for c in classes], "pairs": pairs}


def cycles(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cycle: does the output flip across the interposed control call; were the unloads confirmed."""
    by_cycle: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for call in calls:
        if call.get("cycle") is not None:
            by_cycle[call["cycle"]].append(call)
    found = []
    for cycle, members in sorted(by_cycle.items()):
        members.sort(key=lambda c: c["schedule_index"])
        interposed = next((i for i, c in enumerate(members) if c.get("control")), None)
        before = [c for c in members[:interposed] if not c.get("control")] if interposed is not None else []
        after = [c for c in members[interposed + 1:] if not c.get("control")] if interposed is not None else []
        confirmed = [c["pre_unload_confirmed"] for c in members if c.get("pre_unload_confirmed") is not None]
        waits = [c["unload_wait_ms"] for c in members if c.get("unload_wait_ms") is not None]
        found.append({"cycle": cycle, "calls": len(members),
                      "interposed": members[interposed]["control"] if interposed is not None else None,
                      "flips": before[-1]["output_sha256"] != after[0]["output_sha256"] if before and after else None,
                      "unload_confirmed": all(confirmed) if confirmed else None,
                      "unload_wait_ms_max": max(waits) if waits else None})
    return found


def manipulation(mode: str, arms: dict[str, dict[str, Any]], raw: dict[str, list[dict[str, Any]]],
                 thresholds: list[float] | None) -> dict[str, Any]:
    def times(arm: str) -> list[float]:
        return [c["prefill_ms"] for c in raw[arm] if c["ok"] and c.get("stop_reason") == "stop"]

    if {"cold", "warm"} <= arms.keys() and times("cold") and times("warm"):
        cold, warm = statistics.median(times("cold")), statistics.median(times("warm"))
        threshold = 3 * warm
        gate = {"cold_median_ms": cold, "warm_median_ms": warm, "threshold_ms": threshold,
                "cold_all_above": all(t > threshold for t in times("cold")),
                "warm_median_below_cold_third": warm < cold / 3}
        return {**gate, "pass": gate["cold_all_above"] and gate["warm_median_below_cold_third"],
                "rule": "cache A/B: every cold prefill > 3 x warm median, and warm median < cold median / 3"}
    if {"adjacent", "gapped"} <= arms.keys() and times("adjacent") and times("gapped"):
        if thresholds is None:
            return {"pass": None, "rule": "cache timing: needs fixed thresholds (kit import --thresholds LOW,HIGH)"}
        low, high = thresholds
        gate = {"adjacent_median_ms": statistics.median(times("adjacent")), "adjacent_max_ms_threshold": low,
                "adjacent_all_below": all(t < low for t in times("adjacent")),
                "gapped_median_ms": statistics.median(times("gapped")), "gapped_min_ms_threshold": high,
                "gapped_all_above": all(t > high for t in times("gapped"))}
        return {**gate, "pass": gate["adjacent_all_below"] and gate["gapped_all_above"],
                "rule": f"cache timing: every adjacent prefill < {low} ms and every gapped prefill > {high} ms"}
    return {"pass": None, "rule": f"no manipulation gate is defined for mode {mode!r} with arms {sorted(arms)}"}


def compute(records: list[dict[str, Any]], resolved: dict[str, Any]) -> dict[str, Any]:
    measured = [r for r in records if not r.get("control")]
    raw: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for call in measured:
        raw[call["arm"] or "(none)"].append(call)
    arms = {arm: metrics(calls) for arm, calls in sorted(raw.items())}
    thresholds = resolved.get("thresholds")
    by_state = None
    if thresholds:
        by_state = {arm: {state: metrics([c for c in calls if _state(c.get("prefill_ms"), *thresholds) == state])
                          for state in sorted({_state(c.get("prefill_ms"), *thresholds) for c in calls})}
                    for arm, calls in sorted(raw.items())}
    gate = manipulation(resolved.get("mode", ""), arms, raw, thresholds)
    modal = {arm: m["modal_sha256"] for arm, m in arms.items()}
    controls = Counter(r["control"] for r in records if r.get("control"))
    return {"table": TABLE, "mode": resolved.get("mode"), "files": {"harness": RESULTS},
            "totals": {"records_in": len(records), "controls_excluded": dict(sorted(controls.items()))},
            "arms": arms, "by_state": by_state, "thresholds_ms": thresholds,
            "prefill_classes": kit_classes(raw), "cycles": cycles(records),
            "gates": {"cross_arm_negative_control": len({c["prompt_sha256"] for c in measured}) == 1,
                      "manipulation": gate},
            "arms_differ": (len(set(modal.values())) > 1) if gate.get("pass") else None}


def results(run_dir: Path) -> dict[str, Any]:
    """Compute the harness table from the run folder and write results/harness.json; with the harness's
    own report imported beside the calls, the table says value by value where they agree."""
    manifest = Manifest.load(run_dir)
    resolved = manifest.run.protocol.resolved
    table = {"run_id": manifest.run_id, **compute(read_records(run_dir / CALLS).records, resolved)}
    if resolved.get("report"):
        from kit.analysis.harness_report import compare  # noqa: PLC0415

        report = json.loads((run_dir / resolved["report"]).read_text())
        table["report_comparison"] = compare(table, report, resolved.get("box"))
    RunPaths(run_dir).results.mkdir(exist_ok=True)
    write_json_atomic(run_dir / RESULTS, table)
    return table
