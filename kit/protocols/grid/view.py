"""The grid's results as the console and the launcher show them."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from kit.protocols.kind import PlotRow
from kit.core.layout import Layout
from kit.protocols.headline import COMPARISON_HEADER, Headline, comparison_line, comparison_row


def rate_cells(comparison: dict[str, Any]) -> tuple[str, str, str]:
    """A comparison's diverged/episodes, rate and Wilson interval as table cells."""
    if "skipped" in comparison:
        return "—", "—", str(comparison["skipped"])
    interval = comparison["interval"]
    if interval is None:
        return "0/0", "—", ""
    return (f"{comparison['diverged']}/{comparison['episodes']}", f"{100 * interval['rate']:.1f}%",
            f"[{100 * interval['lo']:.1f}, {100 * interval['hi']:.1f}]")


def grid_table(table: dict[str, Any]) -> Table:
    """Divergence per comparison (Wilson 95% intervals), then BFCL outcomes per pass."""
    view = Table(title="Grid: episodes whose trajectory changed", title_justify="left")
    for column in ("comparison", "passes", "diverged", "rate", "95% CI (Wilson)", "first request"):
        view.add_column(column)
    for name, comparison in table["comparisons"].items():
        firsts = comparison.get("first_request_index") or []
        view.add_row(str(name), " vs ".join(comparison["passes"]), *rate_cells(comparison),
                     ", ".join(map(str, firsts[:8])) + (" …" if len(firsts) > 8 else ""))
    outcomes = []
    for row in table["passes"]:
        if "outcomes" in row:
            outcomes.append(f"{row['pass']} {row['outcomes']['valid']}/{row['outcomes']['episodes']} valid")
        else:
            outcomes.append(f"{row['pass']} {row['status']}"
                            + (f" ({row['reason']})" if row.get("reason") else ""))
    identity = table["comparisons"].get("run-to-run cache-off", {}).get("identity")
    caption = "BFCL outcomes: " + "; ".join(outcomes)
    if identity:
        caption += (f"\ncache-off repeat: {identity['episodes_identical']}/{identity['episodes']} episodes identical, "
                    f"{identity['logprobs_identical']}/{identity['logprob_records']} log-probabilities identical")
    view.caption, view.caption_justify = caption, "left"
    return view


def plot_rows(table: dict[str, Any]) -> list[PlotRow]:
    """Per comparison with an interval: its divergent episodes (the launcher's divergence plot)."""
    return [(name, comparison["diverged"], comparison["episodes"], comparison["interval"]["lo"],
             comparison["interval"]["hi"]) for name, comparison in table["comparisons"].items()
            if comparison.get("interval")]


def headline(t: dict[str, Any], h: Headline) -> None:
    """The run's headline from its results table (kit.protocols.headline; `kit show` and the bundle's report)."""
    comps = t["comparisons"]
    h.tables.append(Layout("grid", "Episodes whose trajectory changed, per comparison of two passes.",
                           COMPARISON_HEADER, [comparison_row(n, c) for n, c in comps.items()]))
    if "path" in comps:
        h.verdict.append("path divergence (cache on vs cache off): " + comparison_line(comps["path"]))
    for name, c in comps.items():
        if name != "path" and "run-to-run" not in name:
            h.verdict.append(f"{name}: {comparison_line(c)}")
    off = comps.get("run-to-run cache-off")
    if off is None or "skipped" in off:
        h.controls.append("no cache-off repeat: the control was not run")
        return
    h.held = int(off["diverged"]) == 0
    h.controls.append("cache-off run-to-run (should not diverge): " + comparison_line(off))
    if "run-to-run cache-on" in comps:
        h.controls.append("cache-on run-to-run: " + comparison_line(comps["run-to-run cache-on"]))
