"""Results of the pinning protocol, computed from the run folder's records and manifest only.

States are re-derived here from each record's telemetry, or from its prefill time under the
calibration re-fitted from the calibration records, so every number can be recomputed from files.
The manipulation endpoints (do the arms differ, where do the bytes flip) are withheld when the gate
is VOID; state and regime determinism do not depend on the manipulation and are always reported.
"""

from __future__ import annotations

import csv
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from kit.atomic_file import write_json_atomic
from kit.cache_state import (
    HISTORY_STATE,
    Calibration,
    calibrate,
    classify,
    from_telemetry,
    separation,
)
from kit.divergence import emitted, first_difference
from kit.manifest import Manifest, PassInfo
from kit.paths import RunPaths
from kit.records import read_records

CALIBRATION_HISTORY = {"cal_fresh": "fresh", "cal_repeat": "repeat", "cal_after_other": "after_other"}
CYCLE_MEASURED = ("burn_in", "pure", "contaminated")


def calibration_state(record: dict[str, Any], tolerance: int) -> str | None:
    """The state a calibration call is labelled with: its telemetry where the engine has it, else the
    state its history implies (fresh instance, repeated prompt, after a different prompt)."""
    history = CALIBRATION_HISTORY.get(record["role"])
    if history is None:
        return None
    completion = record["completion"]
    telemetry = from_telemetry(completion.get("cached_tokens"), completion.get("prompt_tokens"), tolerance)
    return telemetry.state if telemetry else HISTORY_STATE[history]


def _tolerance(manifest: Manifest) -> int:
    return manifest.run.protocol.resolved.get("reuse_tolerance", 8)


def load(run_dir: Path) -> tuple[Manifest, dict[str, PassInfo], dict[str, list[dict]]]:
    """The manifest, its passes, and each pass's records (passes without a records file have none)."""
    manifest = Manifest.load(run_dir)
    passes = manifest.run.passes
    records = {pid: read_records(run_dir / str(info.file)).records if (run_dir / str(info.file)).exists() else []
               for pid, info in passes.items()}
    return manifest, passes, records


def fit_calibration(passes: dict[str, PassInfo], records: dict[str, list[dict]], tolerance: int) -> Calibration | None:
    samples = [(state, r["completion"]["prefill_ms"])
               for pid, info in passes.items() if info.phase == "calibration" and info.status == "OK"
               for r in records[pid]
               if (state := calibration_state(r, tolerance)) and r["completion"].get("prefill_ms")]
    return calibrate(samples) if samples else None


def state_of(record: dict[str, Any], calibration: Calibration | None, tolerance: int) -> tuple[str, float | None, str]:
    """(state, confidence, source) of one record, recomputed; "unknown" when neither telemetry nor a
    calibration can say."""
    completion = record["completion"]
    label = from_telemetry(completion.get("cached_tokens"), completion.get("prompt_tokens"), tolerance)
    if label is None and calibration is not None:
        label = classify(calibration, completion.get("prefill_ms"))
    if label is None or label.state is None:
        return "unknown", None, "none"
    return label.state, label.confidence, label.source


def lineage(rows: list[dict[str, Any]]) -> list[str]:
    """Each call's state including how the reused KV was formed: a full-KV reuse serves the KV that the
    last measured call which evaluated anything built, so it is named after that builder
    ("full_kv<-full_eval", "full_kv<-partial"). `rows` are one pass's records in order, with `_state` set."""
    builder: str | None = None
    names = []
    for r in rows:
        state = r["_state"]
        if state == "full_kv" and builder is not None:
            names.append(f"full_kv<-{builder}")
        else:
            names.append(state)
        if r["measured"] and state != "full_kv":
            builder = state
    return names


def modal(outputs: list[str]) -> dict[str, Any]:
    """Modal share of a list of output ids, with its Wilson 95% interval."""
    from kit.stats.intervals import wilson_interval  # noqa: PLC0415 - the stats package is heavy to import

    if not outputs:
        return {"n": 0}
    counts = Counter(outputs)
    top, k = counts.most_common(1)[0]
    lo, hi = wilson_interval(k, len(outputs))
    return {"n": len(outputs), "distinct": len(counts), "modal_output": top, "modal_count": k,
            "modal_share": round(k / len(outputs), 6), "wilson95": [round(lo, 6), round(hi, 6)]}


def _fork(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    ta, tb = a["completion"]["text"], b["completion"]["text"]
    char = first_difference(ta, tb)
    return {"char": char, "token": first_difference(emitted(a), emitted(b)),
            "context": ta[max(0, (char or 0) - 40):(char or 0)] if char is not None else None,
            "a_continues": ta[char:char + 40] if char is not None else None,
            "b_continues": tb[char:char + 40] if char is not None else None}


def _cycle(pid: str, rows: list[dict], labels: dict[str, str]) -> dict[str, Any]:
    measured = [r for r in rows if r["role"] in CYCLE_MEASURED]
    names = [r["role"] if r["role"] == "burn_in" else f"{r['role']} {r['arm_index']}" for r in measured]
    flips = [names[i] for i in range(1, len(measured))
             if measured[i]["output_sha256"] != measured[i - 1]["output_sha256"]]
    arm_flips = [f for f in flips if f != "pure 1"]  # the burn-in -> pure boundary is excluded, as in seed 002
    return {"pass": pid, "calls": names, "outputs": [labels[r["output_sha256"]] for r in measured],
            "states": [r["_lineage"] for r in measured], "prefill_ms": [r["completion"].get("prefill_ms") for r in measured],
            "flips": flips, "flip_at_interposed_only": arm_flips == ["contaminated 1"]}


def pinning_table(run_dir: Path) -> dict[str, Any]:
    manifest, passes, records = load(run_dir)
    tolerance = _tolerance(manifest)
    calibration = fit_calibration(passes, records, tolerance)
    labels: dict[str, str] = {}
    for pid in passes:
        for r in records[pid]:
            r["_state"], r["_confidence"], r["_source"] = state_of(r, calibration, tolerance)
            if r["measured"] and r["output_sha256"] not in labels:
                labels[r["output_sha256"]] = chr(ord("A") + len(labels)) if len(labels) < 26 else f"O{len(labels)}"
    for pid in passes:
        for r, name in zip(records[pid], lineage(records[pid])):
            r["_lineage"] = name
    ok = {pid for pid, info in passes.items() if info.status == "OK"}
    cycles = [pid for pid, info in passes.items() if info.phase == "cycle"]
    cycle_rows = [r for pid in cycles if pid in ok for r in records[pid] if r["role"] in CYCLE_MEASURED]
    table: dict[str, Any] = {
        "table": "pinning", "run_id": manifest.run_id, "files": {"pinning": RunPaths.result_name("pinning"),
                                                              "calls": RunPaths.result_name("pinning_calls", ".csv")},
        "engine": {k: getattr(manifest.run.engine, k) for k in ("kind", "url", "model", "cache_ram", "engine")},
        "telemetry": any(r["_source"] == "telemetry" for rows in records.values() for r in rows),
        "calibration": calibration.to_json() if calibration else None,
        "outputs": {label: sha for sha, label in labels.items()},
        "passes": [{"pass": pid, "phase": info.phase, "status": info.status, "reason": info.reason,
                    "reload_confirmed": bool((info.reload or {}).get("confirmed"))} for pid, info in passes.items()],
    }
    table["states"] = _states(cycle_rows, labels)
    table["gate"] = _gate(passes, cycles, cycle_rows, manifest.run.protocol.resolved.get("gate_on", "states"))
    table["arms"] = _arms(cycle_rows, labels, table["gate"])
    table["cycles"] = [_cycle(pid, records[pid], labels) for pid in cycles if pid in ok]
    table["regimes"] = _regimes(passes, records, ok, labels)
    from kit.analysis.pinning_verdict import verdict  # noqa: PLC0415 - keeps this module short

    table["verdict"] = verdict(table)
    for rows in records.values():
        for r in rows:
            for key in ("_state", "_confidence", "_source", "_lineage"):
                r.pop(key, None)
    return table


def _states(rows: list[dict], labels: dict[str, str]) -> list[dict[str, Any]]:
    by_state: dict[str, list[dict]] = {}
    for r in rows:
        by_state.setdefault(r["_lineage"], []).append(r)
    result = []
    for state, group in by_state.items():
        times = [r["completion"]["prefill_ms"] for r in group if r["completion"].get("prefill_ms") is not None]
        summary = modal([r["output_sha256"] for r in group])
        summary["modal_output"] = labels[summary["modal_output"]]
        result.append({"state": state, "roles": sorted({r["role"] for r in group}),
                       "prefill_ms": {"min": min(times), "median": statistics.median(times), "max": max(times)}
                       if times else None, **summary})
    return sorted(result, key=lambda s: -(s["prefill_ms"] or {"median": 0})["median"])


def _gate(passes: dict[str, PassInfo], cycles: list[str], rows: list[dict], gate_on: str) -> dict[str, Any]:
    """Every cycle's reload confirmed, and the arms separate: by cache state (KV lineage included), or,
    with `gate_on: prefill_times`, by raw prefill time with no overlap."""
    confirmed = [pid for pid in cycles if (passes[pid].reload or {}).get("confirmed")]
    reasons = []
    if len(confirmed) < len(cycles):
        bad = [pid for pid in cycles if pid not in confirmed]
        detail = (passes[bad[0]].reload or {}).get("detail") or passes[bad[0]].reason
        reasons.append(f"reload not confirmed before {', '.join(bad)} ({detail})")
    arm_states = {arm: sorted({r["_lineage"] for r in rows if r["role"] == arm}) for arm in ("pure", "contaminated")}
    overlap = sorted(set(arm_states["pure"]) & set(arm_states["contaminated"]))
    if not arm_states["pure"] or not arm_states["contaminated"]:
        reasons.append("no calls in one of the arms (every cycle VOID?)")
    elif overlap or "unknown" in arm_states["pure"] + arm_states["contaminated"]:
        reasons.append(f"the arms' cache states overlap (pure {arm_states['pure']}, contaminated "
                       f"{arm_states['contaminated']})")
    pure = [r["completion"]["prefill_ms"] for r in rows if r["role"] == "pure" and r["completion"].get("prefill_ms")]
    dirty = [r["completion"]["prefill_ms"] for r in rows
             if r["role"] == "contaminated" and r["completion"].get("prefill_ms")]
    split = separation(pure, dirty).to_json() if pure and dirty else None
    if gate_on == "prefill_times" and split is not None and not split["separate"]:
        reasons.append(f"the arms' prefill times overlap (pure {split['a_range'][0]:.1f}-{split['a_range'][1]:.1f} ms, "
                       f"contaminated {split['b_range'][0]:.1f}-{split['b_range'][1]:.1f} ms)")
    return {"status": "PASS" if not reasons else "VOID", "gate_on": gate_on,
            "reloads_confirmed": [len(confirmed), len(cycles)],
            "arm_states": arm_states, "arm_prefill_times": split, "reasons": reasons}


def _arms(rows: list[dict], labels: dict[str, str], gate: dict[str, Any]) -> dict[str, Any]:
    arms: dict[str, Any] = {}
    picked = {}
    for arm in ("pure", "contaminated"):
        group = [r for r in rows if r["role"] == arm]
        summary = modal([r["output_sha256"] for r in group])
        if summary["n"]:
            picked[arm] = next(r for r in group if r["output_sha256"] == summary["modal_output"])
            summary["modal_output"] = labels[summary["modal_output"]]
        arms[arm] = summary
    if gate["status"] != "PASS":
        arms.update(differ=None, fork=None, withheld=f"gate VOID: {'; '.join(gate['reasons'])}")
    elif len(picked) == 2:
        differ = picked["pure"]["output_sha256"] != picked["contaminated"]["output_sha256"]
        arms.update(differ=differ, fork=_fork(picked["pure"], picked["contaminated"]) if differ else None)
    return arms


def _regimes(passes: dict[str, PassInfo], records: dict[str, list[dict]], ok: set[str],
             labels: dict[str, str]) -> dict[str, Any]:
    result = {}
    for phase, role in (("always_fresh", "fresh"), ("steady", "steady")):
        pids = [pid for pid, info in passes.items() if info.phase == phase]
        rows = [r for pid in pids if pid in ok for r in records[pid] if r["role"] == role]
        summary = modal([r["output_sha256"] for r in rows])
        if summary["n"]:
            summary["modal_output"] = labels[summary["modal_output"]]
            summary["states"] = dict(Counter(r["_lineage"] for r in rows))
        summary["void_passes"] = [pid for pid in pids if pid not in ok]
        result[phase] = summary
    return result


CSV_FIELDS = ("pass_id", "phase", "role", "arm_index", "state", "confidence", "source", "prefill_ms",
              "cached_tokens", "prompt_tokens", "output", "output_sha256")


def write(run_dir: Path) -> dict[str, Any]:
    """Compute the results and write results/pinning.json and results/pinning_calls.csv."""
    table = pinning_table(run_dir)
    out = RunPaths(run_dir).results
    out.mkdir(exist_ok=True)
    write_json_atomic(out / "pinning.json", table)
    manifest, passes, records = load(run_dir)
    calibration = Calibration.from_json(table["calibration"]) if table["calibration"] else None
    names = {sha: label for label, sha in table["outputs"].items()}
    with (out / "pinning_calls.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        writer.writeheader()
        for pid in passes:
            for r in records[pid]:
                state, confidence, source = state_of(r, calibration, _tolerance(manifest))
                c = r["completion"]
                writer.writerow({"pass_id": pid, "phase": r["phase"], "role": r["role"], "arm_index": r["arm_index"],
                                 "state": state, "confidence": confidence, "source": source,
                                 "prefill_ms": c.get("prefill_ms"), "cached_tokens": c.get("cached_tokens"),
                                 "prompt_tokens": c.get("prompt_tokens"), "output": names.get(r["output_sha256"], ""),
                                 "output_sha256": r["output_sha256"]})
    return table
