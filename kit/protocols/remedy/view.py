"""The remedy's results as the console, the launcher, `kit show` and the bundle's report show them: per arm
each divergence measure with its interval and whether the fix closed it, then the cost per prompt-length bin
as a ratio to the unfixed arm."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kit.core.layout import DASH, Layout, ci, pct
from kit.core.terminal_text import printable
from kit.protocols.headline import Headline
from kit.protocols.kind import PlotRow
from kit.protocols.remedy.figure import cost_figure
from kit.protocols.remedy.results import RemedyResults
from kit.protocols.results_model import Interval

if TYPE_CHECKING:
    from rich.console import Group

TABLES = {"IV": "Table IV", "VII": "Table VII", "V": "Table V"}


def _measure(m: Interval | None) -> str:
    if not m or not m.n:
        return DASH
    return f"{m.k}/{m.n} ({pct(m.rate)}%, {ci(m.lo, m.hi)})"


def _ratio(value: float | None) -> str:
    return f"×{value:.2f}" if isinstance(value, (int, float)) else DASH


def layouts(t: RemedyResults) -> list[Layout]:
    """The divergence table (one row per arm) and the cost table (one row per arm and prompt-length bin)."""
    measures = [m for m in TABLES if any(m in arm.divergence for arm in t.arms)]
    rows = []
    for index, arm in enumerate(t.arms):
        fix = " ".join([*arm.fixes, *arm.server_args]) or "(unfixed)"
        cells = [arm.name, fix]
        for m in measures:
            verdict = "" if index == 0 else f" {arm.closed.get(m, '')}"
            cells.append(_measure(arm.divergence.get(m)) + verdict)
        rows.append(cells)
    divergence = Layout("remedy", "Divergence per arm (k/n, Wilson 95% CI); a fix closes a measure when it reads 0 "
                        "where the unfixed arm's reads more.", ["arm", "fix", *(TABLES[m] for m in measures)], rows)
    cost_rows = []
    for arm in t.arms:
        for label in t.bins:
            row = arm.cost.get(label)
            if not row:
                continue
            r = row.ratio
            cost_rows.append([arm.name, label, str(row.requests), f"{row.ttft_ms:.0f} {_ratio(r.get('ttft_ms'))}",
                              f"{row.prefill_tps or 0:.0f} {_ratio(r.get('prefill_tps'))}",
                              f"{row.decode_tps or 0:.1f} {_ratio(r.get('decode_tps'))}",
                              f"{row.latency_s:.2f} {_ratio(r.get('latency_s'))}"])
    cost = Layout("remedy cost", "Cost per prompt-length bin (prompt tokens), each value and its ratio to the "
                  "unfixed arm in the same bin.", ["arm", "prompt tokens", "requests", "TTFT ms", "prefill tok/s",
                                                   "decode tok/s", "latency s"], cost_rows)
    return [divergence, cost]


def remedy_table(results: RemedyResults) -> Group:
    from rich.console import Group  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415 - cells as plain text, never Rich markup

    tables = []
    for layout in layouts(results):
        table = Table(title=f"{layout.name}: {layout.caption}", title_justify="left")
        for column in layout.header:
            table.add_column(column)
        for row in layout.rows:
            table.add_row(*(Text(printable(cell)) for cell in row))
        tables.append(table)
    return Group(*tables)


def closing_lines(t: RemedyResults) -> list[str]:
    """Per measure: the cheapest fix that closed it (lowest worst-bin latency ratio), or that none did."""
    found = []
    for m, label in TABLES.items():
        if not any(m in arm.divergence for arm in t.arms):
            continue
        name = t.cheapest_closing.get(m)
        if name:
            arm = next(a for a in t.arms if a.name == name)
            found.append(f"{label}: cheapest fix that closes it: {name} (worst slowdown over the prompt-length "
                         f"bins {_ratio(arm.worst_slowdown)})")
        else:
            unfixed = t.arms[0].divergence.get(m) or Interval()
            why = "nothing to close (the unfixed arm did not diverge)" if unfixed.n and not unfixed.k \
                else "no fix measured here closes it"
            found.append(f"{label}: {why}")
    return found


def _not_ok(t: RemedyResults) -> str:
    return f"{len(t.not_ok_passes)} passes did not end OK and are not counted"


def remedy_note(run_dir: Path, t: RemedyResults) -> str | None:
    lines = closing_lines(t)
    if t.not_ok_passes:
        lines.append(f"{_not_ok(t)}: {', '.join(t.not_ok_passes[:5])}")
    return "; ".join(lines) or None


def headline(t: RemedyResults, h: Headline) -> None:
    h.verdict.extend(closing_lines(t))
    if t.not_ok_passes:
        h.verdict.append(f"{len(t.not_ok_passes)} passes not OK, not counted")
    h.tables.extend(layouts(t))
    figure = cost_figure(t)
    if figure is not None:
        h.figures.append(figure)


def plot_rows(table: RemedyResults) -> list[PlotRow]:
    rows = []
    for arm in table.arms:
        for m, label in TABLES.items():
            measure = arm.divergence.get(m)
            if measure and measure.n and measure.k is not None and measure.lo is not None and measure.hi is not None:
                rows.append((f"{arm.name} {label}"[:60], measure.k, measure.n, measure.lo, measure.hi))
    return rows
