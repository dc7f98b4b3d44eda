"""findings.json dicts in the shapes `kit analyze` writes (kit.analysis.findings, grid_findings,
sweep_findings, bridge_findings), with the counts a test chooses; intervals are Wilson 95% from
kit.stats so a test can work out by hand which published values fall inside them."""

from __future__ import annotations

from typing import Any

from kit.stats import rate_interval

QWEN7B = "qwen2.5-7b-instruct"


def cells(k: int, n: int, prefix: str = "") -> dict[str, Any]:
    found = rate_interval(k, n)
    return {f"{prefix}k": k, f"{prefix}n": n, f"{prefix}rate": found.rate, f"{prefix}lo": found.lo,
            f"{prefix}hi": found.hi}


def run_entry(run: str, kind: str, fmt: str, model: str = QWEN7B, engine: str = "llama.cpp",
              prompt_cache: str = "disabled", sweep: dict | None = None) -> dict[str, Any]:
    return {"run": run, "path": f"/runs/{run}", "kind": kind, "format": fmt, "model": model, "engine": engine,
            "prompt_cache": prompt_cache, "sweep": sweep, "ok_passes": ["off1", "on1"]}


def empty_tables() -> dict[str, Any]:
    return {name: {"rows": [], "skipped": [{"reason": f"no runs for Table {name} among the inputs"}]}
            for name in ("III", "IV", "V", "VI", "VII")}


def findings(runs: list[dict], tables: dict[str, list[dict]], **extra: Any) -> dict[str, Any]:
    found = {"schema": "kit.findings/1", "created": "2026-12-01T00:00:00+00:00", "runs": runs,
             "tables": empty_tables(), "mechanism": {}, **extra}
    for name, rows in tables.items():
        found["tables"][name] = {"rows": rows, "skipped": []}
    return found


def grid_run(fmt: str, path_k: int, on_k: int | None, off_k: int = 0, n: int = 80, model: str = QWEN7B,
             engine: str = "llama.cpp", prompt_cache: str = "default",
             passes: tuple[str, ...] = ("on", "off", "on", "off")) -> tuple[dict, dict, dict]:
    """(runs entry, grid entry, Table V row) of one grid configuration."""
    run = f"grid-{model}-{fmt}"
    row = {"engine": engine, "model": model, "format": fmt, "n": n, "prompt_cache": prompt_cache, "run": run,
           **cells(path_k, n, "path_"), **cells(off_k, n, "off_")}
    if on_k is not None:
        row.update(cells(on_k, n, "on_"))
    grid = {"run": run, "engine": engine, "model": model, "format": fmt, "passes": list(passes)}
    return run_entry(run, "grid", fmt, model, engine, prompt_cache), grid, row


def table_iii_row(k: int, n: int = 80, prompt_cache: str = "default", order: str = "adjacent",
                  fmt: str = "Q4_K_M", model: str = QWEN7B) -> dict[str, Any]:
    return {"model": model, "format": fmt, "prompt_cache": prompt_cache, "order": order,
            "run": f"flag-order/{prompt_cache}-{order}", **cells(k, n)}


def table_iv_row(fmt: str, differ: list[int], items: int = 100, reproduces: int | None = None,
                 model: str = QWEN7B) -> dict[str, Any]:
    same = items if reproduces is None else reproduces
    sessions = [f"s{i + 1}" for i in range(len(differ))]
    return {"run": f"reset-{fmt}", "model": model, "format": fmt, "sessions": sessions,
            "items": [items] * len(differ), "recompute_reproduces": [same] * len(differ),
            "hit_reproduces": [items] * len(differ), "paths_differ": differ,
            "across_sessions": {"sessions": len(differ), "items": items, "recompute_same_in_all": same,
                                "hit_same_in_all": items}}


def table_vii_row(fmt: str, n: int, differ: int, flips: int, correct_recompute: int, correct_hit: int, p: float,
                  model: str = QWEN7B, source: str = "gsm8k") -> dict[str, Any]:
    return {"run": f"bridge-{fmt}-{n}", "session": "s1", "model": model, "format": fmt, "source": source, "n": n,
            "recompute_reproduces": n, "hit_reproduces": n, "attributable_items": n, "paths_differ": differ,
            "path_divergence": {**{k: v for k, v in cells(differ, n).items()}, "method": "wilson"},
            "correct_recompute": correct_recompute, "correct_hit": correct_hit, "flips": flips,
            "mcnemar": {"b": 0, "c": flips, "p": p}}


def sweep(formats: dict[str, tuple[float, float, float, int]], histories: int = 10, episodes: int = 80,
          odds_ratio: tuple[float, float, float] = (2.2, 1.7, 3.0),
          slope: tuple[float, float, float] = (0.14, 0.1, 0.18), p: float = 1e-11) -> tuple[list[dict], dict, dict]:
    """(runs entries, Table VI rows, findings["sweep"]) from format -> (mean, lo, hi, canonical k); the
    paired difference from the first format is mean - reference mean with the interval shifted alike."""
    labels = list(formats)
    ref_mean = formats[labels[0]][0]
    rows, boot_formats = [], []
    for label, (mean, lo, hi, canonical) in formats.items():
        diff = mean - ref_mean
        entry = {"label": label, "rate": mean, "lo": lo, "hi": hi, "diff": diff, "diff_lo": diff - 0.12,
                 "diff_hi": diff + 0.12, "history_sd": 0.02, "history_min": mean - 0.03,
                 "history_max": mean + 0.03, "histories_above_reference": histories if diff > 0 else 0}
        boot_formats.append(entry)
        rows.append({"format": label, "canonical_k": canonical, "canonical_n": episodes,
                     "canonical_rate": canonical / episodes, "mean": mean, "sd": 0.02, "min": mean - 0.03,
                     "max": mean + 0.03, "lo": lo, "hi": hi, "is_reference": label == labels[0],
                     "diff": entry["diff"] if label != labels[0] else 0.0,
                     "diff_lo": entry["diff_lo"] if label != labels[0] else 0.0,
                     "diff_hi": entry["diff_hi"] if label != labels[0] else 0.0,
                     "above_reference": entry["histories_above_reference"], "histories": histories,
                     "episodes": episodes, "diverged_per_history": [canonical] * histories})
    boot = {"formats": boot_formats, "reference": labels[0], "rate_slope": slope[0], "rate_slope_lo": slope[1],
            "rate_slope_hi": slope[2], "b1_mean": 0.8, "odds_ratio": odds_ratio[0], "or_lo": odds_ratio[1],
            "or_hi": odds_ratio[2], "n_histories": histories, "n_episodes": episodes, "replicates": 2000,
            "failed_fits": 0, "seed": 20261007}
    runs = [run_entry(f"sweep/{label}-h{h}", "sweep", label, sweep={"format": label, "history": h})
            for label in labels for h in range(histories + 1)]
    found = {"formats": labels, "bootstrap": boot,
             "permutation": {"statistic": 100, "p": p, "alternative": "two-sided", "n_episodes": episodes}}
    return runs, rows, found
