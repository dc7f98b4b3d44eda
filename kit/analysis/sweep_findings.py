"""Findings of the replicated sweep (Table VI, Fig. 2): path divergence per format over histories.

A sweep is a set of grid-like run folders, one per (format, history), each with one cache-on pass and
the format's cache-off reference (layout in docs/analysis.md). History 0 is the canonical episode
order and is reported descriptively; histories 1.. are the random orders that enter the two-way
bootstrap (episodes × histories), the history-averaged random-intercept slope (refitted in every
resampled history) and the exact permutation test with one shared format permutation per episode.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.analysis.collect import RunFolder, format_rank
from kit.analysis.passes import PassData, divergence_indicators, load_pass

CANONICAL = 0
SEPARATED_B1 = 15.0  # |slope| beyond this (odds ratio > 3e6 per format step) means no finite estimate


def arm_passes(run: RunFolder) -> tuple[str | None, str | None]:
    """(cache-on pass id, cache-off pass id) among the run's OK passes, first of each arm."""
    on = next((p for p, i in run.ok_passes.items() if i.arm == "on"), None)
    off = next((p for p, i in run.ok_passes.items() if i.arm == "off"), None)
    return on, off


def cell_divergence(run: RunFolder, loaded: dict[str, PassData]) -> dict[str, Any]:
    """Path divergence of one sweep cell: cache-on pass against the cache-off reference, per episode."""
    on, off = arm_passes(run)
    if on is None or off is None:
        return {"skipped": "needs one OK cache-on pass and one OK cache-off reference pass"}
    units, indicators, verdicts = divergence_indicators(loaded[on], loaded[off])
    return {"passes": [on, off], "episodes": units, "indicators": indicators, "diverged": int(sum(indicators)),
            "n": len(units), "first_request_index": [v["request_index"] for v in verdicts if v["diverged"]]}


def sweep_findings(cells: list[tuple[RunFolder, dict[str, Any]]], replicates: int, seed: int,
                   mapper=None) -> dict[str, Any]:
    """Table VI from the sweep cells' path divergence (``mapper``: see :func:`kit.stats.sweep_bootstrap`)."""
    from kit.stats import StatsInputError, sweep_bootstrap, sweep_permutation_test  # noqa: PLC0415

    skipped = [{"run": run.run_id, "reason": cell["skipped"]} for run, cell in cells if "skipped" in cell]
    by_cell: dict[tuple[str, int], dict[str, Any]] = {}
    for run, cell in cells:
        if "skipped" in cell:
            continue
        key = (str(run.sweep.get("format", run.format)), int(run.sweep.get("history", -1)))
        if key in by_cell:
            skipped.append({"run": run.run_id, "reason": f"a second folder for format {key[0]}, history {key[1]}"})
            continue
        by_cell[key] = {"run": run.run_id, **cell}
    formats = sorted({f for f, _ in by_cell}, key=format_rank)
    histories = sorted({h for _, h in by_cell})
    per_cell = {f"{f}/h{h}": {k: v for k, v in c.items() if k != "episodes"} for (f, h), c in by_cell.items()}
    result: dict[str, Any] = {"formats": formats, "histories": histories, "cells": per_cell, "skipped": skipped}
    canonical = {f: by_cell[(f, CANONICAL)] for f in formats if (f, CANONICAL) in by_cell}
    result["canonical"] = {f: _rate(c) for f, c in canonical.items()}
    random = [h for h in histories if h != CANONICAL and all((f, h) in by_cell for f in formats)]
    incomplete = [h for h in histories if h != CANONICAL and h not in random]
    if incomplete:
        skipped.append({"histories": incomplete, "reason": "not every format ran these histories; left out of "
                                                           "the cube"})
    if not random or not formats:
        result["skipped_table"] = "no random history with every format: no two-way bootstrap"
        return result
    episodes = sorted(set.intersection(*(set(by_cell[(f, h)]["episodes"]) for f in formats for h in random)))
    cube = np.zeros((len(random), len(episodes), len(formats)), dtype=int)
    for hi, h in enumerate(random):
        for fi, f in enumerate(formats):
            status = dict(zip(by_cell[(f, h)]["episodes"], by_cell[(f, h)]["indicators"]))
            cube[hi, :, fi] = [status[e] for e in episodes]
    scores = np.arange(len(formats), dtype=float)
    result.update({"random_histories": random, "episodes": len(episodes), "scores": scores.tolist(),
                   "per_history_rates": {f: [float(cube[hi, :, fi].mean()) for hi in range(len(random))]
                                         for fi, f in enumerate(formats)},
                   "per_history_counts": {f: [int(cube[hi, :, fi].sum()) for hi in range(len(random))]
                                          for fi, f in enumerate(formats)},
                   "episodes_changing_status": {f: int(((cube[:, :, fi].min(axis=0) == 0)
                                                        & (cube[:, :, fi].max(axis=0) == 1)).sum())
                                                for fi, f in enumerate(formats)}})
    try:
        result["bootstrap"] = sweep_bootstrap(cube, scores, formats, replicates=replicates, seed=seed,
                                              glmm=len(formats) >= 2, mapper=mapper).to_json()
    except (StatsInputError, ValueError, np.linalg.LinAlgError) as exc:
        # rates and differences do not need the random-intercept model: keep them, say why the slope is missing
        result["bootstrap"] = sweep_bootstrap(cube, scores, formats, replicates=replicates, seed=seed,
                                              glmm=False).to_json()
        result["bootstrap"]["glmm_skipped"] = f"the random-intercept fit failed ({type(exc).__name__}: {exc})"
    b1 = result["bootstrap"].get("b1_mean")
    if b1 is not None and abs(b1) > SEPARATED_B1:
        result["bootstrap"]["glmm_note"] = (
            f"slope {b1:.1f} on the logit scale: the outcomes are (quasi-)separated by format, so the maximum "
            "likelihood slope is infinite and this value is where the optimiser stopped; read the rates instead")
    try:
        result["permutation"] = sweep_permutation_test(cube).to_json() if len(formats) >= 2 else {
            "skipped": "one format only"}
    except StatsInputError as exc:
        result["permutation"] = {"skipped": exc.line()}
    return result


def _rate(cell: dict[str, Any]) -> dict[str, Any]:
    from kit.stats import rate_interval  # noqa: PLC0415

    return rate_interval(cell["diverged"], cell["n"]).to_json() if cell["n"] else {"k": 0, "n": 0}


def load_cell_passes(run: RunFolder, keep_logprobs: bool) -> dict[str, PassData]:
    on, off = arm_passes(run)
    return {p: load_pass(run.path, p, run.ok_passes[p], keep_logprobs) for p in (on, off) if p is not None}


def table_vi(result: dict[str, Any]) -> dict[str, Any]:
    """Rows of Table VI: canonical history, mean/SD/range/CI over random histories, difference from the
    reference format with its paired interval, and histories above the reference."""
    boot = result.get("bootstrap") or {}
    if "formats" not in boot:
        reason = boot.get("skipped") or result.get("skipped_table") or "no two-way bootstrap"
        return {"rows": [], "skipped": [{"reason": reason}] + result.get("skipped", [])}
    rows = []
    for fr in boot["formats"]:
        label = fr["label"]
        canonical = result["canonical"].get(label) or {}
        rows.append({"format": label, "canonical_k": canonical.get("k"), "canonical_n": canonical.get("n"),
                     "canonical_rate": canonical.get("rate"), "mean": fr["rate"], "sd": fr["history_sd"],
                     "min": fr["history_min"], "max": fr["history_max"], "lo": fr["lo"], "hi": fr["hi"],
                     "is_reference": label == boot["reference"], "diff": fr["diff"], "diff_lo": fr["diff_lo"],
                     "diff_hi": fr["diff_hi"], "above_reference": fr["histories_above_reference"],
                     "histories": boot["n_histories"], "episodes": boot["n_episodes"],
                     "diverged_per_history": result["per_history_counts"][label]})
    return {"rows": rows, "skipped": result.get("skipped", [])}
