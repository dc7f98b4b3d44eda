"""Findings of grid runs: Table V (divergence per configuration), Table III (pass order × the
server-level prompt cache) and the paired trend over formats on the production-default grid.

Counts come from :func:`kit.protocols.grid.results.grid_table` (the grid's own results, recomputed from the
records); each single-pass rate gets the dependence-aware interval over its episode indicators in
execution order (the first pass's manifest ``order``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kit.engines import registry
from kit.protocols.grid import results as grid_results
from kit.analysis.collect import RunFolder, format_rank
from kit.protocols.results_model import Comparison
from kit.protocols.bfcl_passes.setting import pass_order, prompt_cache_setting
from kit.record.divergence import TOKEN_IDS

COMPARISON_KEYS = {"run-to-run cache-off": "off_r2r", "run-to-run cache-on": "on_r2r", "path": "path"}


def _indicators(comparison: Comparison, order: list[str]) -> tuple[list[str], list[int]]:
    per_episode = comparison.per_episode
    units = [u for u in order if u in per_episode] or list(per_episode)
    return units, [int(per_episode[u].diverged) for u in units]


def grid_run_findings(run: RunFolder, replicates: int, seed: int) -> dict[str, Any]:
    """One grid run: each comparison with counts, Wilson and dependence-aware intervals (`grid_run_counts`,
    then `add_intervals`)."""
    return add_intervals(grid_run_counts(run), replicates, seed)


def grid_run_counts(run: RunFolder) -> dict[str, Any]:
    """One grid run's comparisons with their counts and Wilson intervals, its records read through
    RunFolder.records (once each, within `RunFolder.reading`, their log-probabilities parsed only where an
    identity count compares them: kit.record.files.logprobs_pair); each dependence-aware interval is left
    None for `add_intervals` (it needs the statistics stack, which a worker that reads records need not load)."""
    table = grid_results.grid_table(run.path, run.manifest.passes,
                                    lambda file, _logprobs: run.records(file, "deferred"))  # parsed when compared
    out: dict[str, Any] = {"run": run.run_id, "engine": run.engine_name, "model": run.model, "format": run.format,
                           "cache_ram": run.cache_ram, "passes": list(run.resolved.get("passes") or []),
                           "top_logprobs": run.top_logprobs, "comparisons": {},
                           "outcomes": [p.to_json() for p in table.passes],
                           "flips": {name: f.to_json() for name, f in table.flips.items()}}
    for name, comparison in table.comparisons.items():
        key = COMPARISON_KEYS.get(name, name)
        if not comparison.compared:
            out["comparisons"][key] = {"passes": comparison.passes, "skipped": comparison.skipped}
            continue
        first = run.ok_passes.get(comparison.passes[0])
        order = list(first.order) if first else []
        units, indicators = _indicators(comparison, order)
        written = comparison.to_json()
        entry = {k: written[k] for k in ("passes", "episodes", "diverged", "kinds", "first_request_index",
                                         "first_token_index")}
        entry["wilson"] = written["interval"]
        entry["episode_ids"] = units
        entry["indicators_in_execution_order"] = indicators
        if indicators:
            entry["interval"] = None  # its place among the keys: `add_intervals` fills it in
        if comparison.identity is not None:
            entry["identity"] = comparison.identity.to_json()
        out["comparisons"][key] = entry
    return out


def add_intervals(found: dict[str, Any], replicates: int, seed: int) -> dict[str, Any]:
    """`found` (`grid_run_counts`) with the dependence-aware interval of each comparison that has episodes."""
    from kit.stats import dependence_aware_interval  # noqa: PLC0415

    for entry in found["comparisons"].values():
        if "interval" in entry:
            entry["interval"] = dependence_aware_interval(entry["indicators_in_execution_order"],
                                                          replicates=replicates, seed=seed).to_json()
    return found


def table_iii(grid: list[dict[str, Any]]) -> dict[str, Any]:
    """Run-to-run cache-on divergence by server-level prompt cache (default / disabled) × pass order."""
    rows, skipped = [], []
    for g in grid:
        comparison = g["comparisons"].get("on_r2r")
        order = pass_order(g["passes"])
        if not comparison or "interval" not in comparison or order is None:
            skipped.append({"run": g["run"], "reason": "no run-to-run cache-on comparison (needs two OK cache-on "
                                                       "passes)"})
            continue
        rows.append({"model": g["model"], "format": g["format"], "prompt_cache": prompt_cache_setting(g["cache_ram"]),
                     "order": order, "run": g["run"], **_rate_cells(comparison["interval"])})
    return {"rows": rows, "skipped": skipped}


def _has_prompt_cache(label: str) -> bool:
    """Whether the engine a grid run names has a server-level prompt cache to report (an unknown label: kept)."""
    engine = registry.said_in(label)
    return engine is None or engine.server_prompt_cache


def _rate_cells(interval: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    return {f"{prefix}k": interval["k"], f"{prefix}n": interval["n"], f"{prefix}rate": interval["rate"],
            f"{prefix}lo": interval["lo"], f"{prefix}hi": interval["hi"]}


def table_v(grid: list[dict[str, Any]]) -> dict[str, Any]:
    """Episode-level divergence per grid configuration (one row per run)."""
    rows, skipped = [], []
    for g in sorted(grid, key=lambda g: (g["engine"], g["model"], format_rank(g["format"]))):
        c = g["comparisons"]
        if "path" not in c or "interval" not in c["path"]:
            skipped.append({"run": g["run"], "reason": (c.get("path") or {}).get("skipped",
                                                                                   "no path comparison in this run")})
            continue
        row = {"engine": g["engine"], "model": g["model"], "format": g["format"], "n": c["path"]["episodes"],
               # vLLM has no server-level prompt cache (llama.cpp's --cache-ram layer: EngineKind.server_prompt_cache)
               "prompt_cache": prompt_cache_setting(g["cache_ram"]) if _has_prompt_cache(g["engine"]) else "none",
               "run": g["run"], "compared_on": c["path"].get("compared_on", TOKEN_IDS),
               **_rate_cells(c["path"]["interval"], "path_")}
        for key, prefix in (("off_r2r", "off_"), ("on_r2r", "on_")):
            if key in c and "interval" in c[key]:
                row.update(_rate_cells(c[key]["interval"], prefix))
        rows.append(row)
    return {"rows": rows, "skipped": skipped}


def grid_trend(grid: list[dict[str, Any]], replicates: int, seed: int) -> dict[str, Any]:
    """Paired trend of path divergence over formats, per model with two or more formats (paper §IV-D,
    production-default grid): random-intercept model, conditional logit, exact permutation test and a
    bootstrap resampling episodes jointly across formats."""
    from kit.stats import (  # noqa: PLC0415
        StatsInputError,
        fit_conditional_logit,
        fit_random_intercept_logit,
        permutation_trend_test,
        sweep_bootstrap,
    )

    models: dict[str, dict[str, dict[str, Any]]] = {}
    skipped = []
    for g in grid:
        path = g["comparisons"].get("path") or {}
        if "interval" not in path:
            continue
        per_model = models.setdefault(f"{g['engine']} {g['model']}", {})
        if g["format"] in per_model:
            skipped.append({"run": g["run"], "reason": f"another run of {g['format']} is already in the trend"})
            continue
        order = list(g["comparisons"]["path"].get("indicators_in_execution_order") or [])
        per_model[g["format"]] = dict(zip(_units(g), order))
    results = {}
    for model, by_format in models.items():
        formats = sorted(by_format, key=format_rank)
        if len(formats) < 2:
            skipped.append({"model": model, "reason": "one format only: no trend to estimate"})
            continue
        episodes = sorted(set.intersection(*(set(by_format[f]) for f in formats)))
        table = np.array([[by_format[f][e] for f in formats] for e in episodes], dtype=int)
        scores = np.arange(len(formats), dtype=float)
        ep = np.repeat(np.arange(len(episodes)), len(formats))
        sc, y = np.tile(scores, len(episodes)), table.ravel()
        entry: dict[str, Any] = {"formats": formats, "scores": scores.tolist(), "episodes": len(episodes),
                                 "diverged_per_format": table.sum(axis=0).tolist()}
        fits = {"glmm": (fit_random_intercept_logit, (ep, sc, y), {}),
                "conditional_logit": (fit_conditional_logit, (ep, sc, y), {}),
                "permutation": (permutation_trend_test, (table,), {}),
                "episode_bootstrap": (sweep_bootstrap, (table[None], scores, formats),
                                      {"replicates": replicates, "seed": seed, "glmm": False})}
        for name, (fit, args, kwargs) in fits.items():
            try:
                entry[name] = fit(*args, **kwargs).to_json()
            except StatsInputError as exc:
                entry[name] = {"skipped": exc.line()}
            except (ArithmeticError, ValueError, np.linalg.LinAlgError) as exc:
                entry[name] = {"skipped": f"the fit failed on these data ({type(exc).__name__}: {exc})"}
        results[model] = entry
    return {"models": results, "skipped": skipped}


def _units(g: dict[str, Any]) -> list[str]:
    return list((g["comparisons"]["path"].get("episode_ids")) or [])
