"""A formatted table as plain strings (`Layout`: caption, header, cells, notes) and the number formats every
table uses: the paper's tables (kit.analysis.tables), each kind's headline (its view.py), the bundle's report
and `kit show`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DASH = "–"


@dataclass
class Layout:
    """A formatted table: caption, header and string cells, plus notes (e.g. why rows were skipped)."""

    name: str
    caption: str
    header: list[str]
    rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def pct(x: Any) -> str:
    return DASH if x is None else f"{100 * float(x):.1f}"


def ci(lo: Any, hi: Any, signed: bool = False) -> str:
    if lo is None or hi is None:
        return DASH
    fmt = "{:+.1f}" if signed else "{:.1f}"
    return f"[{fmt.format(100 * lo)}, {fmt.format(100 * hi)}]"
