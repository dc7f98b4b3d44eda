"""The flag x order results (Table III from one run) as the console and the launcher show them."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from kit.core.layout import Layout
from kit.protocols.flag_order.results import FlagOrderResults
from kit.protocols.headline import COMPARISON_HEADER, Headline, comparison_line, comparison_row, rate_cells

SERVERS = {True: "every arm ran on its own fresh server", None: "no servers recorded"}  # fresh_server_per_arm


def flag_order_table(t: FlagOrderResults) -> Table:
    """Table III from one run: run-to-run cache-on divergence per cell (setting × pass order), the
    quartile split of the divergent episodes, then whether the two orders agree per setting."""
    view = Table(title="Flag × order: cache-on passes repeated (run-to-run divergence)", title_justify="left")
    for column in ("prompt cache", "order", "diverged", "rate", "95% CI (Wilson)", "per quartile", "trend p",
                   "path", "requests (1st pass)"):
        view.add_column(column)
    for cell in t.cells.values():
        r2r = cell.run_to_run
        quartiles = r2r.quartiles
        path = cell.path
        view.add_row(str(cell.prompt_cache), str(cell.order), *rate_cells(r2r),
                     " ".join(map(str, quartiles.diverged)) if quartiles and quartiles.diverged else "—",
                     f"{quartiles.trend['p']:.2g}" if quartiles else "—",
                     "—" if path is None else rate_cells(path)[0] if path.compared else "skipped",
                     str(cell.requests_first_pass if cell.requests_first_pass is not None else "—"))
    notes = []
    for name, check in t.orders.items():
        verdict = Text("differ", style="yellow") if check.identical is False else Text(
            "not compared" if check.identical is None else "identical token for token")
        counts = "; ".join(f"{k} {c.episodes_identical}/{c.episodes} episodes, {c.tokens} tokens"
                           for k, c in check.cache_on.items() if c.skipped is None)
        notes.append(Text.assemble(f"{name}: cache-on passes ", verdict, f" ({counts})" if counts else ""))
    servers = t.fresh_server_per_arm
    notes.append(Text(SERVERS[servers]) if servers is not False else
                 Text("arms did not each run on one fresh server of their own", style="red"))
    if t.void_passes:
        notes.append(Text("not analysed: " + ", ".join(f"{v.pass_} ({v.status})" for v in t.void_passes)))
    view.caption, view.caption_justify = Text("\n").join(notes), "left"
    return view


def headline(t: FlagOrderResults, h: Headline) -> None:
    """The run's headline from its results table (kit.protocols.headline; `kit show` and the bundle's report)."""
    rows = []
    for cell in t.cells.values():
        label = f"prompt cache {cell.prompt_cache}, {cell.order}"
        rows.append(comparison_row(label, cell.run_to_run))
        h.verdict.append(f"{label}: cache-on run-to-run divergence {comparison_line(cell.run_to_run)}")
    h.tables.append(Layout("flag_order", "Cache-on passes repeated (run-to-run divergence) per server-level prompt "
                           "cache setting and pass order.", COMPARISON_HEADER, rows))
    fresh = t.fresh_server_per_arm
    h.held = fresh
    h.controls.append(SERVERS[fresh] if fresh is not False else
                      "arms did NOT each run on a fresh server of their own")
    for name, check in t.orders.items():
        h.controls.append(f"{name}: cache-on passes " + {True: "identical in both orders", False: "differ between "
                          "the orders", None: "not compared"}[check.identical])
