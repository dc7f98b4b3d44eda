"""The grid's results as the console and the launcher show them."""

from __future__ import annotations

from rich.table import Table

from kit.core.layout import Layout
from kit.protocols.grid.results import GridResults
from kit.protocols.headline import COMPARISON_HEADER, Headline, comparison_line, comparison_row, rate_cells
from kit.protocols.kind import PlotRow


def grid_table(t: GridResults) -> Table:
    """Divergence per comparison (Wilson 95% intervals), then BFCL outcomes per pass."""
    view = Table(title="Grid: episodes whose trajectory changed", title_justify="left")
    for column in ("comparison", "passes", "diverged", "rate", "95% CI (Wilson)", "first request"):
        view.add_column(column)
    for name, comparison in t.comparisons.items():
        firsts = comparison.first_request_index
        view.add_row(name, " vs ".join(comparison.passes), *rate_cells(comparison),
                     ", ".join(map(str, firsts[:8])) + (" …" if len(firsts) > 8 else ""))
    outcomes = []
    for row in t.passes:
        if row.outcomes is not None:
            outcomes.append(f"{row.pass_} {row.outcomes.valid}/{row.outcomes.episodes} valid")
        else:
            outcomes.append(f"{row.pass_} {row.status}" + (f" ({row.reason})" if row.reason else ""))
    off = t.comparisons.get("run-to-run cache-off")
    identity = off.identity if off is not None else None
    caption = "BFCL outcomes: " + "; ".join(outcomes)
    if identity:
        caption += (f"\ncache-off repeat: {identity.episodes_identical}/{identity.episodes} episodes identical, "
                    f"{identity.logprobs_identical}/{identity.logprob_records} log-probabilities identical")
    view.caption, view.caption_justify = caption, "left"
    return view


def plot_rows(table: GridResults) -> list[PlotRow]:
    """Per comparison with an interval: its divergent episodes (the launcher's divergence plot)."""
    return [(name, c.diverged, c.episodes, c.interval.lo, c.interval.hi)
            for name, c in table.comparisons.items()
            if c.interval is not None and c.interval.lo is not None and c.interval.hi is not None]


def headline(table: GridResults, h: Headline) -> None:
    """The run's headline from its results table (kit.protocols.headline; `kit show` and the bundle's report)."""
    comps = table.comparisons
    h.tables.append(Layout("grid", "Episodes whose trajectory changed, per comparison of two passes.",
                           COMPARISON_HEADER, [comparison_row(n, c) for n, c in comps.items()]))
    if "path" in comps:
        h.verdict.append("path divergence (cache on vs cache off): " + comparison_line(comps["path"]))
    for name, c in comps.items():
        if name != "path" and "run-to-run" not in name:
            h.verdict.append(f"{name}: {comparison_line(c)}")
    off = comps.get("run-to-run cache-off")
    if off is None or not off.compared:
        h.controls.append("no cache-off repeat: the control was not run")
        return
    h.held = off.diverged == 0
    h.controls.append("cache-off run-to-run (should not diverge): " + comparison_line(off))
    if "run-to-run cache-on" in comps:
        h.controls.append("cache-on run-to-run: " + comparison_line(comps["run-to-run cache-on"]))
