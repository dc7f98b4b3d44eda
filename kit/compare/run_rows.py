"""A run's findings.json read into the quantities of kit.compare.measures, one RunRow per table row.

Rates keep the interval findings.json gives (Tables III and V: the dependence-aware envelope; Table
VI: the two-way bootstrap); where findings.json gives only counts (Tables IV and VII, the canonical
history of Table VI) the interval is the Wilson 95% interval of kit.stats. A row's configuration
(model, format, engine, prompt cache, pass order, workload) comes from the row itself, else from the
run's entry in ``runs`` or ``grid``; what findings.json does not record stays None and is said so.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from kit.engines import registry
from kit.analysis.findings_model import Findings, RunEntry, SweepFindings
from kit.protocols.bfcl_passes.setting import pass_order
from kit.compare.measures import ROWS, TREND, Measured, RunRow, Section
from kit.stats import rate_interval

VLLM_FORMAT_NOTE = ("format read as BF16: vLLM served the checkpoint at its own dtype (bfloat16 for the "
                    "paper's Qwen2.5 and Llama-3.1 checkpoints)")


class FindingsShape(ValueError):
    """findings.json lacks something a table row needs, or holds a value of the wrong type."""


def number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FindingsShape(f"{what} is {value!r}, not a number")
    return float(value)


def count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise FindingsShape(f"{what} is {value!r}, not a count")
    return value


def optional(value: Any, what: str, scale: float = 1.0) -> float | None:
    """A number that findings.json writes as null when it is not finite (an infinite bound)."""
    if value is None:
        return None
    found = number(value, what) * scale
    return found if math.isfinite(found) else None


def wilson(k: Any, n: Any, what: str) -> Measured:
    k, n = count(k, f"{what} count"), count(n, f"{what} n")
    if n == 0 or k > n:
        raise FindingsShape(f"{what}: {k} of {n}")
    found = rate_interval(k, n)
    return Measured(100 * found.rate, 100 * found.lo, 100 * found.hi, k, n, "Wilson 95%")


def given_rate(cells: dict[str, Any], prefix: str, method: str, what: str) -> Measured:
    """A rate with the interval findings.json gives (keys `{prefix}k`, `n`, `rate`, `lo`, `hi`)."""
    k, n = count(cells[f"{prefix}k"], f"{what} k"), count(cells[f"{prefix}n"], f"{what} n")
    return Measured(100 * number(cells[f"{prefix}rate"], f"{what} rate"), 100 * number(cells[f"{prefix}lo"], what),
                    100 * number(cells[f"{prefix}hi"], what), k, n, method)


class RunIndex:
    """What findings.json says about each run: its `runs` entry and, for grid runs, its `grid` entry."""

    def __init__(self, findings: Findings):
        self.runs = {r.run: r for r in findings.runs}
        self.grid = {g.run: g for g in findings.grid or []}
        self.workload = {str(r.get("run")): r.get("source") for r in findings.table("VII").rows}

    def engine(self, run: str) -> str | None:
        entry, grid = self.runs.get(run), self.grid.get(run)
        return (entry.engine if entry else None) or (grid.engine if grid else None)

    def prompt_cache(self, run: str) -> str | None:
        entry = self.runs.get(run)
        return entry.prompt_cache if entry else None

    def of_kind(self, kind: str, fmt: str | None = None) -> list[RunEntry]:
        return [r for r in self.runs.values() if r.kind == kind and (
            fmt is None or str((r.sweep or {}).get("format") or r.format) == fmt)]


def table_rows(findings: Findings, table: str) -> list[dict[str, Any]]:
    """A table's rows; none when findings.json has no such table (`kit analyze` writes all five)."""
    return list(findings.table(table).rows)


def one(values: list[Any]) -> Any:
    """The single value several runs agree on; None when none says, `mixed (...)` when they differ."""
    found = sorted({str(v) for v in values if v is not None})
    return None if not found else found[0] if len(found) == 1 else f"mixed ({', '.join(found)})"


def finish(row: RunRow) -> RunRow:
    """Checkpoints (vLLM's) carry no GGUF format label; they run at the checkpoint's dtype (BF16)."""
    engine = registry.said_in(row.engine)
    if engine is not None and engine.checkpoint and row.format == "unknown":
        row.format = "BF16"
        row.notes.append(VLLM_FORMAT_NOTE)
    return row


def table_iii(findings: Findings, index: RunIndex) -> list[RunRow]:
    rows = []
    for r in table_rows(findings, "III"):
        run = str(r["run"])
        rows.append(finish(RunRow(
            ("III", ROWS), run, f"prompt cache {r['prompt_cache']}, {r['order']}", str(r["model"]), str(r["format"]),
            index.engine(run), {"episodes": count(r["n"], "n")},
            {"prompt_cache": r.get("prompt_cache"), "order": r.get("order")},
            {"on_r2r": given_rate(r, "", "dependence-aware 95%", "run-to-run cache-on")})))
    return rows


def table_v(findings: Findings, index: RunIndex) -> list[RunRow]:
    rows = []
    for r in table_rows(findings, "V"):
        run = str(r["run"])
        grid = index.grid.get(run)
        order = pass_order(list(grid.passes)) if grid and grid.passes else None
        row = RunRow(("V", ROWS), run, f"{r['engine']} {r['format']}", str(r["model"]), str(r["format"]),
                     str(r.get("engine") or index.engine(run) or "") or None, {"episodes": count(r["n"], "n")},
                     {"prompt_cache": r.get("prompt_cache"), "order": order})
        row.measures["path"] = given_rate(r, "path_", "dependence-aware 95%", "path divergence")
        for key, prefix, what in (("off_r2r", "off_", "cache-off"), ("on_r2r", "on_", "cache-on")):
            if f"{prefix}k" in r:
                row.measures[key] = given_rate(r, prefix, "dependence-aware 95%", f"run-to-run {what}")
            else:
                row.missing[key] = f"this run has no run-to-run {what} comparison (needs two OK {what} passes)"
        rows.append(finish(row))
    return rows


def _absent(entry: Any, what: str) -> str | None:
    """Why a fit or test is not usable (its own `skipped` reason where it gives one), or None."""
    if not isinstance(entry, dict):
        return f"no {what} in findings.json"
    return str(entry["skipped"]) if "skipped" in entry else None


def odds_ratio(fit: Any, what: str) -> Measured | str:
    why = _absent(fit, what)
    if why:
        return why
    if fit.get("odds_ratio") is None:
        return f"the {what} has no finite estimate"
    return Measured(number(fit["odds_ratio"], what), optional(fit.get("or_lo"), what), optional(fit.get("or_hi"), what),
                    method=what)


def _p(test: Any, what: str) -> Measured | str:
    why = _absent(test, what)
    if why or test.get("p") is None:
        return why or f"the {what} gives no p"
    return Measured(number(test["p"], what), method=what, alternative=str(test.get("alternative") or "two-sided"))


def slope(boot: Any, what: str) -> Measured | str:
    why = _absent(boot, what)
    if why or boot.get("rate_slope") is None:
        return why or f"the {what} gives no rate slope"
    return Measured(100 * number(boot["rate_slope"], what), optional(boot.get("rate_slope_lo"), what, 100),
                    optional(boot.get("rate_slope_hi"), what, 100), method=what)


def _put(row: RunRow, key: str, found: Measured | str) -> None:
    if isinstance(found, Measured):
        row.measures[key] = found
    else:
        row.missing[key] = str(found)


def grid_trend(findings: Findings, index: RunIndex) -> list[RunRow]:
    rows = []
    table_v_rows = table_rows(findings, "V")
    for name, entry in (findings.grid_trend.models if findings.grid_trend else {}).items():
        engine, _, model = str(name).partition(" ")
        caches = [r.get("prompt_cache") for r in table_v_rows if str(r.get("model")) == model
                  and str(r.get("engine")) == engine]
        row = RunRow(("V", TREND), "grid runs", "path divergence over formats", model,
                     "+".join(map(str, entry["formats"])), engine, {"episodes": count(entry["episodes"], "episodes")},
                     {"prompt_cache": one(caches)})
        _put(row, "glmm_odds_ratio", odds_ratio(entry.get("glmm"), "random-intercept fit, Wald 95%"))
        _put(row, "clogit_odds_ratio", odds_ratio(entry.get("conditional_logit"), "conditional logit, Wald 95%"))
        _put(row, "permutation_p", _p(entry.get("permutation"), "exact permutation test"))
        _put(row, "rate_slope", slope(entry.get("episode_bootstrap"), "episode bootstrap 95%"))
        rows.append(finish(row))
    return rows


def _sweep_config(index: RunIndex, fmt: str | None) -> tuple[str, str | None, str | None]:
    runs = index.of_kind("sweep", fmt)
    return (one([r.model for r in runs]) or "unknown", one([r.engine for r in runs]),
            one([r.prompt_cache for r in runs]))


def table_vi(findings: Findings, index: RunIndex) -> list[RunRow]:
    rows, found = [], table_rows(findings, "VI")
    reference = next((str(r["format"]) for r in found if r.get("is_reference")), None)
    for r in found:
        fmt = str(r["format"])
        model, engine, cache = _sweep_config(index, fmt)
        row = RunRow(("VI", ROWS), "sweep", fmt, model, fmt, engine,
                     {"episodes": count(r["episodes"], "episodes"), "histories": count(r["histories"], "histories")},
                     {"prompt_cache": cache, "reference": reference})
        if r.get("canonical_k") is not None:
            episodes = count(r["canonical_n"], "canonical history n")
            row.measures["canonical"] = wilson(r["canonical_k"], episodes, "canonical history")
            row.scale_overrides["canonical"] = {"episodes": episodes}
        else:
            row.missing["canonical"] = "this sweep has no canonical history (history 0) for this format"
        row.measures["mean"] = Measured(100 * number(r["mean"], "mean"), 100 * number(r["lo"], "lo"),
                                        100 * number(r["hi"], "hi"), method="two-way bootstrap 95%")
        if r.get("is_reference"):
            row.missing["diff"] = f"{fmt} is this sweep's reference format"
        else:
            row.measures["diff"] = Measured(100 * number(r["diff"], "diff"), 100 * number(r["diff_lo"], "diff_lo"),
                                            100 * number(r["diff_hi"], "diff_hi"),
                                            method="two-way bootstrap 95%, paired by episode and history")
        rows.append(finish(row))
    return rows


def sweep_trend(findings: Findings, index: RunIndex) -> list[RunRow]:
    sweep = findings.sweep or SweepFindings()
    boot = sweep.bootstrap
    if "formats" not in boot:
        return []
    model, engine, cache = _sweep_config(index, None)
    row = RunRow(("VI", TREND), "sweep", "path divergence over formats", model,
                 "+".join(str(f["label"]) for f in boot["formats"]), engine,
                 {"episodes": count(boot["n_episodes"], "n_episodes"),
                  "histories": count(boot["n_histories"], "n_histories")}, {"prompt_cache": cache})
    if boot.get("glmm_skipped") or boot.get("glmm_note"):
        row.missing["glmm_odds_ratio"] = str(boot.get("glmm_skipped") or boot.get("glmm_note"))
    else:
        _put(row, "glmm_odds_ratio", odds_ratio(boot, "two-way bootstrap 95% (GLMM refits)"))
    _put(row, "rate_slope", slope(boot, "two-way bootstrap 95%"))
    _put(row, "permutation_p", _p(sweep.permutation if "permutation" in sweep.model_fields_set else None,
                                  "exact permutation test"))
    return [finish(row)]


def table_iv(findings: Findings, index: RunIndex) -> list[RunRow]:
    rows = []
    for r in table_rows(findings, "IV"):
        run = str(r["run"])
        items = [count(n, "items") for n in r["items"]]
        if not items:
            continue
        row = RunRow(("IV", ROWS), run, str(r["format"]), str(r["model"]), str(r["format"]), index.engine(run),
                     {"items": min(items), "sessions": len(items)}, {"workload": index.workload.get(run)})
        for key in ("recompute_reproduces", "hit_reproduces", "paths_differ"):
            per_session = tuple(wilson(k, n, key) for k, n in zip(r[key], items))
            row.measures[key] = Measured(None, k=None, n=None, method="Wilson 95%, every session",
                                         sessions=per_session)
        across = r.get("across_sessions") or {}
        for key, field in (("recompute_same_in_all", "recompute_same_in_all"), ("hit_same_in_all", "hit_same_in_all")):
            if across.get("items"):
                row.measures[key] = wilson(across[field], across["items"], key)
            else:
                row.missing[key] = "no item served in every session"
        rows.append(finish(row))
    return rows


def table_vii(findings: Findings, index: RunIndex) -> list[RunRow]:
    rows = []
    for r in table_rows(findings, "VII"):
        run, n = str(r["run"]), count(r["n"], "n")
        if n == 0:
            continue
        row = RunRow(("VII", ROWS), run, f"{r['format']}, {n} items", str(r["model"]), str(r["format"]),
                     index.engine(run), {"items": n}, {"workload": r.get("source")})
        row.measures["recompute_reproduces"] = wilson(r["recompute_reproduces"], n, "recompute reproduces")
        row.measures["hit_reproduces"] = wilson(r["hit_reproduces"], n, "cache hit reproduces")
        both = count(r.get("attributable_items", 0), "attributable_items")
        if r.get("path_divergence"):
            row.measures["path_divergence"] = given_rate(r["path_divergence"], "", "Wilson 95%", "path divergence")
        else:
            row.missing["path_divergence"] = "no item on which both paths reproduced themselves"
        if "correctness_skipped" in r or both == 0:
            why = r.get("correctness_skipped") or "no attributable item"
            for key in ("flips", "correct_recompute", "correct_hit", "mcnemar_p"):
                row.missing[key] = f"no correctness in this run: {why}"
        else:
            row.measures["flips"] = wilson(r["flips"], both, "flips")
            row.measures["correct_recompute"] = wilson(r["correct_recompute"], both, "correct recompute")
            row.measures["correct_hit"] = wilson(r["correct_hit"], both, "correct cache hit")
            _put(row, "mcnemar_p", _p({**r["mcnemar"], "alternative": "two-sided"} if r.get("mcnemar") else None,
                                      "exact McNemar"))
        rows.append(finish(row))
    return rows


READERS: dict[Section, Callable[[Findings, RunIndex], list[RunRow]]] = {
    ("III", ROWS): table_iii, ("IV", ROWS): table_iv, ("V", ROWS): table_v, ("V", TREND): grid_trend,
    ("VI", ROWS): table_vi, ("VI", TREND): sweep_trend, ("VII", ROWS): table_vii,
}


def skipped_reason(findings: Findings, section: Section) -> str:
    """Why findings.json has no rows for this section (its own words where it gives them)."""
    table, part = section
    if part == TREND:
        source = findings.grid_trend if table == "V" else findings.sweep
        skipped = source.skipped if source else []
        reasons = [s.get("reason") for s in skipped if isinstance(s, dict) and s.get("reason")]
        if isinstance(source, SweepFindings) and not source.bootstrap.get("formats"):
            reasons.insert(0, source.skipped_table or "no two-way bootstrap")
        return "; ".join(map(str, reasons[:2])) or ("no grid trend (needs grid runs of two or more formats)"
                                                    if table == "V" else "no sweep among the inputs")
    skipped = findings.table(table).skipped
    reasons = [s.get("reason") for s in skipped if isinstance(s, dict) and s.get("reason")]
    return "; ".join(map(str, reasons[:2])) or "no rows"


def read_rows(findings: Findings, section: Section) -> list[RunRow]:
    """Every row this run has for `section`; FindingsShape naming the table when something is malformed."""
    try:
        return READERS[section](findings, RunIndex(findings))
    except FindingsShape as exc:
        raise FindingsShape(f"Table {section[0]}{' trend' if section[1] == TREND else ''}: {exc}") from None
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        what = f"missing key {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        raise FindingsShape(f"Table {section[0]}{' trend' if section[1] == TREND else ''}: {what}") from None
