"""The toy kind's results as the console prints them, and its headline (`kit show`, the bundle's report)."""

from __future__ import annotations

from rich.table import Table

from kit.core.layout import Layout
from kit.protocols.headline import Headline

from .results import ToyResults


def render(table: ToyResults) -> Table:
    view = Table(title="Toy answers")
    for column in ("answers", "distinct", "first"):
        view.add_column(column)
    view.add_row(str(table.answers), str(table.distinct), str(table.first))
    return view


def headline(table: ToyResults, h: Headline) -> None:
    h.verdict.append(f"{table.distinct} distinct answer(s) in {table.answers}")
    h.tables.append(Layout("toy", "Toy answers.", ["answers", "distinct"], [[str(table.answers), str(table.distinct)]]))
