"""A small terminal plot of divergence rates with their 95% intervals, one row per session or comparison:

    path        |      [-----●------]                  | 25.0% [7.2, 59.1] (2/8)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text

if TYPE_CHECKING:
    from kit.protocols.results_model import Results


def rows_for(table: Results | dict[str, Any] | None) -> list[tuple[str, int, int, float, float]]:
    """(label, diverged, total, lo, hi) per row, as the kind that made the table plots it (its `plot_rows`)."""
    from kit.protocols import kinds  # noqa: PLC0415

    kind = kinds.for_table(table)
    if kind is None or kind.plot_rows is None or table is None:
        return []
    return kind.plot_rows(kind.read(table))


def _suffix(k: int, n: int, lo: float, hi: float) -> str:
    return f"| {100 * k / n:.1f}% [{100 * lo:.1f}, {100 * hi:.1f}] ({k}/{n})"


def plot(table: Results | dict[str, Any] | None, columns: int = 100) -> Text:
    """The plot as styled text, fitted into `columns` terminal columns (the bar gets what is left)."""
    rows = rows_for(table)
    text = Text()
    if not rows:
        return text.append("nothing to plot: no session or comparison finished with counts", style="dim")
    label_width = max(len(r[0]) for r in rows)
    width = max(10, min(50, columns - label_width - 2 - max(len(_suffix(*r[1:])) for r in rows)))
    text.append(" " * (label_width + 1) + "0%" + " " * (width - 4) + "100%\n", style="dim")
    for label, k, n, lo, hi in rows:
        cells = [" "] * width
        a, b = round(lo * (width - 1)), round(hi * (width - 1))
        for i in range(a, b + 1):
            cells[i] = "-"
        cells[a], cells[b] = "[", "]"
        cells[round(k / n * (width - 1))] = "●"
        text.append(f"{label:<{label_width}} |")
        text.append("".join(cells), style="bold yellow" if k else "green")
        text.append(_suffix(k, n, lo, hi) + "\n")
    text.append("95% intervals (Wilson; exact bound at 0 or n events)", style="dim")
    return text
