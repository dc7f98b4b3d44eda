"""What a reviewer reads first about each bundled run: a headline verdict (what diverged, how often, with
its interval) and whether the run's controls held, plus its main table, all as plain strings.

The HTML report (kit.bundle.report) and `kit show` (kit.bundle.show) render the same headlines, so the
page and the terminal say the same thing. Tables reuse `kit.analysis.tables.Layout` (caption, header,
string cells, notes); the paper's Tables III–VII come from `analysis/findings.json` when `kit analyze`
left one in the run folder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kit.analysis.findings_model import FILE, Table
from kit.analysis.tables import DASH, LAYOUTS, Layout, ci, pct
from kit.bundle.content import BundledRun
from kit.core.paths import RunPaths

FINDINGS = f"analysis/{FILE}"  # written by `kit analyze RUN_DIR` (its default --out)
FEW = 10  # below this many observations a rate is flagged as resting on few observations
HELD = {True: "held", False: "did NOT hold", None: "not judged"}  # a Headline's `held`, in words
ODD = (AttributeError, KeyError, TypeError, ValueError, IndexError, ZeroDivisionError)  # fields laid out otherwise


@dataclass
class Headline:
    """One run's verdict lines, control lines (held: True, False, or None when it has none or they were
    not judged) and its main results table(s)."""

    run_id: str
    kind: str
    status: str
    verdict: list[str] = field(default_factory=list)
    controls: list[str] = field(default_factory=list)
    held: bool | None = None
    tables: list[Layout] = field(default_factory=list)


def few(n: Any) -> str:
    """A warning appended to a rate that rests on fewer than FEW observations."""
    return f" (n={n} only: little evidence)" if isinstance(n, int) and n < FEW else ""


def rate(k: int, n: int, interval: dict[str, Any] | None = None, unit: str = "episodes") -> str:
    """`k/n unit (r%, 95% CI [lo, hi])`; the Wilson interval is computed when the results give none."""
    if not n:
        return f"0/0 {unit} (no observation)"
    if interval and interval.get("lo") is not None:
        lo, hi, method = interval["lo"], interval["hi"], interval.get("method")
    else:
        from kit.stats.intervals import wilson_interval  # noqa: PLC0415 - kit.stats is heavy to import

        (lo, hi), method = wilson_interval(k, n), "wilson"
    label = f"95% CI{' (' + method + ')' if method else ''}"
    return f"{k}/{n} {unit} ({pct(k / n)}%, {label} {ci(lo, hi)}){few(n)}"


def _comparison(c: dict[str, Any]) -> str:
    if "skipped" in c:
        return f"not compared: {c['skipped']}"
    return rate(int(c["diverged"]), int(c["episodes"]), c.get("interval"))


def _comparison_row(name: str, c: dict[str, Any]) -> list[str]:
    if "skipped" in c:
        return [name, " vs ".join(c.get("passes") or []) or DASH, DASH, DASH, DASH, str(c["skipped"])]
    interval = c.get("interval") or {}
    n = int(c["episodes"])
    return [name, " vs ".join(c.get("passes") or []), f"{c['diverged']}/{n}",
            pct(c["diverged"] / n) if n else DASH, ci(interval.get("lo"), interval.get("hi")), few(n).strip()]


COMPARISON_HEADER = ["comparison", "passes", "diverged", "rate (%)", "95% CI", "note"]


def _reset(t: dict[str, Any], h: Headline) -> None:
    ok = [s for s in t["sessions"] if s["status"] == "OK"]
    layout = Layout("restored-state control", "Per session: items whose tokens each path reproduces, and items "
                    "whose cache-hit path differs from the recompute path.",
                    ["session", "status", "items", "recompute reproduces", "cache hit reproduces", "paths differ",
                     "cache-caused"])
    for s in t["sessions"]:
        layout.rows.append([str(s["session"]), str(s["status"])] + ([str(s[k]) for k in (
            "items", "recompute_reproduces", "hit_reproduces", "paths_differ", "cache_caused")] if s in ok
            else [DASH] * 5))
    h.tables.append(layout)
    if not ok:
        h.verdict.append("no OK session: nothing to judge")
        return
    for s in ok:
        h.verdict.append(f"session {s['session']}: the cache-hit path differs from the recompute path in "
                         + rate(int(s["paths_differ"]), int(s["items"]), unit="items")
                         + f"; {s['cache_caused']} attributable to the cache")
    bad = [s for s in ok if s["recompute_reproduces"] != s["items"] or s["hit_reproduces"] != s["items"]]
    h.held = not bad
    h.controls.append("each path reproduces itself: " + "; ".join(
        f"{s['session']} recompute {s['recompute_reproduces']}/{s['items']}, cache hit {s['hit_reproduces']}/"
        f"{s['items']}" for s in ok))
    across = t.get("across_sessions") or {}
    if "items" in across:
        h.controls.append(f"same in all {across['sessions']} OK sessions: recompute {across['recompute_same_in_all']}/"
                          f"{across['items']}, cache hit {across['hit_same_in_all']}/{across['items']}")


def _grid(t: dict[str, Any], h: Headline) -> None:
    comps = t["comparisons"]
    h.tables.append(Layout("grid", "Episodes whose trajectory changed, per comparison of two passes.",
                           COMPARISON_HEADER, [_comparison_row(n, c) for n, c in comps.items()]))
    if "path" in comps:
        h.verdict.append("path divergence (cache on vs cache off): " + _comparison(comps["path"]))
    for name, c in comps.items():
        if name != "path" and "run-to-run" not in name:
            h.verdict.append(f"{name}: {_comparison(c)}")
    off = comps.get("run-to-run cache-off")
    if off is None or "skipped" in off:
        h.controls.append("no cache-off repeat: the control was not run")
        return
    h.held = int(off["diverged"]) == 0
    h.controls.append("cache-off run-to-run (should not diverge): " + _comparison(off))
    if "run-to-run cache-on" in comps:
        h.controls.append("cache-on run-to-run: " + _comparison(comps["run-to-run cache-on"]))


def _sweep(t: dict[str, Any], h: Headline) -> None:
    layout = Layout("sweep", "Path divergence per weight format over histories (cache-on pass vs the format's "
                    "cache-off reference).", ["format", "histories", "mean (%)", "SD", "range (%)", "status varies"])
    for label, row in t["formats"].items():
        if "skipped" in row:
            layout.rows.append([str(label), DASH, DASH, DASH, DASH, str(row["skipped"])])
            h.verdict.append(f"{label}: {row['skipped']}")
            continue
        layout.rows.append([str(label), str(row["histories"]), pct(row["mean"]), pct(row["sd"]),
                            f"{pct(row['min'])}{DASH}{pct(row['max'])}",
                            f"{row['episodes_status_varies']}/{row['episodes']}"])
        h.verdict.append(f"{label}: path divergence {pct(row['mean'])}% on average over {row['histories']} "
                         f"histories of {row['episodes']} episodes (range {pct(row['min'])}{DASH}{pct(row['max'])}%)"
                         f"{few(row['histories'])}; the two-way interval is Table VI of `kit analyze`")
    h.tables.append(layout)
    checks = t.get("reference_check") or {}
    judged = [c for c in checks.values() if "skipped" not in c]
    h.held = all(c.get("identical") for c in judged) if judged else None
    for label, c in checks.items():
        h.controls.append(f"{label} reference under two orders (should not diverge): {_comparison(c)}")
    if not checks:
        h.controls.append("no repeated reference pass: the control was not run")


def _flag_order(t: dict[str, Any], h: Headline) -> None:
    rows = []
    for name, cell in t["cells"].items():
        label = f"prompt cache {cell['prompt_cache']}, {cell['order']}"
        rows.append(_comparison_row(label, cell["run_to_run"]))
        h.verdict.append(f"{label}: cache-on run-to-run divergence {_comparison(cell['run_to_run'])}")
    h.tables.append(Layout("flag_order", "Cache-on passes repeated (run-to-run divergence) per server-level prompt "
                           "cache setting and pass order.", COMPARISON_HEADER, rows))
    fresh = t.get("fresh_server_per_arm")
    h.held = fresh
    h.controls.append({True: "every arm ran on its own fresh server", False: "arms did NOT each run on a fresh "
                       "server of their own", None: "no servers recorded"}[fresh])
    for name, check in (t.get("orders") or {}).items():
        h.controls.append(f"{name}: cache-on passes " + {True: "identical in both orders", False: "differ between "
                          "the orders", None: "not compared"}[check.get("identical")])


def _share(s: dict[str, Any]) -> str:
    if not s.get("n"):
        return DASH
    lo, hi = s["wilson95"]
    return f"{s['modal_count']}/{s['n']} ({pct(lo)}{DASH}{pct(hi)}%){few(s['n'])}"


def _pinning(t: dict[str, Any], h: Headline) -> None:
    gate = t["gate"]
    h.held = gate["status"] == "PASS"
    h.controls.append(f"gate {gate['status']}: reloads confirmed {gate['reloads_confirmed'][0]}/"
                      f"{gate['reloads_confirmed'][1]}" + "".join(f"; {r}" for r in gate.get("reasons") or []))
    arms = t["arms"]
    if arms.get("differ") is None:
        h.verdict.append(f"pure vs contaminated arm: {arms.get('withheld', 'not measured')}")
    else:
        h.verdict.append(f"pure vs contaminated arm: {'outputs DIFFER' if arms['differ'] else 'identical outputs'}"
                         f" (modal share: pure {_share(arms['pure'])}, contaminated {_share(arms['contaminated'])})")
    h.verdict.extend(str(a) for a in (t.get("verdict") or {}).get("advice") or [])
    h.tables.append(Layout("pinning", "Cache states found (cycle calls of the measured prompt).",
                           ["state", "calls", "distinct outputs", "modal share (95% CI)"],
                           [[str(s["state"]), ", ".join(map(str, s.get("roles") or [])), str(s.get("distinct")),
                             _share(s)] for s in t["states"]]))


def _harness(t: dict[str, Any], h: Headline) -> None:
    gate = t["gates"]["manipulation"]
    h.held = gate.get("pass")
    h.controls.append("manipulation gate " + {None: "not evaluated", True: "PASS", False: "FAIL"}[gate.get("pass")]
                      + f" ({gate.get('rule')})")
    differ = t.get("arms_differ")
    h.verdict.append("arms " + {None: "not judged", True: "DIFFER", False: "identical"}[differ])
    arms = {a: m.get("metrics", {"n": 0, "distinct_count": 0}) if "n_raw" in m and "n" not in m else m
            for a, m in t["arms"].items()}  # a study's arms hold their metrics (kit.protocols.harness.results); older: flat
    over = " over every box" if len(t.get("boxes") or {}) > 1 else ""
    h.tables.append(Layout("harness", f"Measured calls per arm{over}.", ["arm", "n", "distinct outputs", "modal share"],
                           [[str(a), str(m["n"]), str(m["distinct_count"]),
                             DASH if m.get("modal_share") is None else f"{m['modal_share']:.3f}{few(m['n'])}"]
                            for a, m in arms.items()]))


def _watch(t: dict[str, Any], h: Headline) -> None:
    alarms = {kind: n for kind, n in t["alarms"].items() if n}
    h.verdict.append(f"{t['calls']} watched calls; alarms: "
                     + (", ".join(f"{kind} {n}" for kind, n in alarms.items()) if alarms else "none"))
    h.held = t["recorded_alarms_agree"]
    h.controls.append("the proxy's live alarms " + ("equal" if h.held else "DIFFER from") + " those recomputed")
    h.tables.append(Layout("watch", "Watched calls by cache state.", ["cache state", "calls"],
                           [[str(state), str(n)] for state, n in t["by_state"].items()]))


READERS: dict[str, Callable[[dict[str, Any], Headline], None]] = {
    "restored-state control": _reset, "grid": _grid, "sweep": _sweep, "flag_order": _flag_order,
    "pinning": _pinning, "harness": _harness, "watch": _watch}


def headline(run: BundledRun) -> Headline:
    """The run's headline from its results files (results/*.json with a `table` this kit knows)."""
    m = run.manifest
    kind = m.get("protocol", {}).get("kind") if isinstance(m.get("protocol"), dict) else None
    h = Headline(run.run_id, str(kind), str(m.get("status")))
    for name, data in run.tables().items():
        if not (name.startswith(f"{RunPaths.RESULTS}/") and name.endswith(".json") and isinstance(data, dict)):
            continue
        read = READERS.get(table) if isinstance(table := data.get("table"), str) else None
        if read is None:
            continue
        try:
            read(data, h)
        except ODD as exc:
            h.verdict.append(f"{name} is not laid out as this kit reads it ({type(exc).__name__}): see the raw file")
            h.held = None
    if not h.verdict and not h.controls:
        h.verdict.append("no results file this kit can summarise" + (f" (status {h.status})"
                                                                     if h.status != "finished" else ""))
    return h


def paper_tables(run: BundledRun) -> tuple[list[Layout], list[str]]:
    """The paper's Tables III–VII from the run's analysis/findings.json: the tables with rows, and one line
    per table not computed (with the reason). Empty when there is no findings file."""
    findings = run.tables().get(FINDINGS)
    tables = findings.get("tables") if isinstance(findings, dict) else None
    if not isinstance(tables, dict):
        return [], []
    shown, absent = [], []
    for name, make in LAYOUTS.items():
        try:
            layout = make(Table.model_validate(tables.get(name)).to_json())
        except ODD:
            absent.append(f"Table {name}: not laid out as this kit reads it")
            continue
        if layout.rows:
            shown.append(layout)
        else:
            absent.append(f"Table {name}: " + ("; ".join(layout.notes) or "no rows"))
    return shown, absent
