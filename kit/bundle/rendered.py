"""Comparing a rendered table (CSV, Markdown or LaTeX: the tables of `kit analyze`, compare-paper.csv
and .md) with this kit's rendering of the same recomputed numbers.

Three rules, tried in order (docs/bundles.md, "How each file is compared"):

1. **this kit's rendering**: every line equal, table cells one by one (numbers as numbers, within the
   tolerance of kit.bundle.value_diff), captions and notes as text;
2. **another kit's wording** (a caption, `0/1` written `0 of 1`): the same number of rows, every number
   in the file (captions, header, rows), in order, equal to this kit's, and every word of each row one
   that this kit's row has (so `Table VII` written `Table III`, or another model's name, still fails);
3. **a table laid out anew since** (`relaid`, kit.analysis.tables.RELAID: Table IV before its `k of n`
   notation and sessions column): the numbers cannot line up, so each number in the bundled rows must
   be one this kit recomputed for that table (a value of its rows as a plain number, a percentage to one
   decimal, signed, or to three decimals, or a number of this kit's rendering of it), and each word of
   its rows one of the recomputed table's.

Anything else is a mismatch, reported cell by cell as rule 1 sees it.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kit.bundle.value_diff import ABS_TOL, REL_TOL, Mismatch, cell_value, compare_json

NUMBER = re.compile(r"\d+(?:\.\d+)?")
WORD = re.compile(r"[A-Za-z][\w.\-]*")
MD_CELL = re.compile(r"(?<!\\) \| ")


@dataclass
class Table:
    """A rendered table read back: its header row, its data rows (cells as text) and its other lines."""

    header: list[str] | None = None
    rows: list[list[str]] = field(default_factory=list)
    text: list[str] = field(default_factory=list)


def _md_row(line: str) -> list[str] | None:
    if not (line.startswith("| ") and line.endswith(" |")):
        return None
    return MD_CELL.split(line[2:-2])


def _tex_row(line: str) -> list[str] | None:
    return line[:-3].split(" & ") if line.endswith(r" \\") and " & " in line else None


def parse(name: str, data: bytes) -> Table:
    """A .csv, .md or .tex table as the kit writes them (ValueError/UnicodeDecodeError if unreadable)."""
    text = data.decode("utf-8")
    table = Table()
    if name.endswith(".csv"):
        rows = [list(r) for r in csv.reader(io.StringIO(text))]
        table.header, table.rows = (rows[0], rows[1:]) if rows else (None, [])
        return table
    split = _md_row if name.endswith(".md") else _tex_row
    for line in text.splitlines():
        if re.fullmatch(r"\|(-+\|)+", line):  # a Markdown header separator
            continue
        row = split(line)
        if row is None:
            table.text.append(line)
        elif table.header is None:
            table.header = row
        else:
            table.rows.append(row)
    return table


def _cells(rows: list[list[str]]) -> list[list[Any]]:
    return [[cell_value(c) for c in row] for row in rows]


def renderings(value: Any) -> list[str]:
    """The ways the kit's tables print a number (as is, a percentage to one decimal, signed, to three
    decimals), as text."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return [str(value)] if value is not None else []
    if isinstance(value, int):
        return [str(value)]
    return [repr(value), f"{value:g}", f"{value:.3f}", f"{100 * value:.1f}", f"{100 * value:+.1f}"]


def leaves(value: Any) -> Iterable[Any]:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        else:
            yield item


def numbers(texts: Iterable[str]) -> set[str]:
    """Every number in the texts, normalised (leading zeros of an integer dropped)."""
    out = set()
    for text in texts:
        for token in NUMBER.findall(text):
            out.add(token if "." in token else str(int(token)))
    return out


EXACT, IN_ORDER, FOUND = "exact", "numbers in order", "numbers found"


@dataclass
class Outcome:
    """What comparing one rendered table found: mismatches, how many values were compared, and by which
    rule."""

    mismatches: list[Mismatch]
    values: int
    rule: str = "exact"  # EXACT, IN_ORDER or FOUND: which of the rules above compared it


def _sequence(table: Table) -> list[str]:
    return [token for row in [table.text, table.header or [], *table.rows] for cell in row
            for token in NUMBER.findall(cell)]


def _unknown_words(theirs: list[str], known: set[str]) -> list[str]:
    return sorted({word for cell in theirs for word in WORD.findall(cell)} - known)


def _same_numbers(theirs: list[str], ours: list[str]) -> bool:
    return len(theirs) == len(ours) and all(
        a == b or math.isclose(float(a), float(b), rel_tol=REL_TOL, abs_tol=ABS_TOL) for a, b in zip(theirs, ours))


def compare_table(file: str, bundled: bytes, fresh: bytes, source: Any, relaid: str | None = None) -> Outcome:
    """Compare a bundled rendered table with this kit's rendering (`fresh`) of the recomputed `source`
    (the JSON the table is rendered from: a findings table, compare-paper's lines). `relaid` says how this
    table's layout changed since older kits wrote it, for a table whose numbers may no longer line up."""
    name = file.lower()
    try:
        theirs = parse(name, bundled)
    except (ValueError, UnicodeDecodeError, csv.Error) as exc:
        return Outcome([Mismatch(file, "", f"<unreadable: {type(exc).__name__}: {exc}>", "<readable>")], 0)
    ours = parse(name, fresh)
    exact = compare_json({"header": theirs.header, "text": theirs.text, "rows": _cells(theirs.rows)},
                         {"header": ours.header, "text": ours.text, "rows": _cells(ours.rows)}, file)
    if not exact:
        return Outcome([], sum(len(row) for row in theirs.rows) + sum(1 for line in theirs.text if line.strip()))
    sequence = _sequence(theirs)
    if len(theirs.rows) == len(ours.rows) and _same_numbers(sequence, _sequence(ours)) and not any(
            _unknown_words(row, {w for cell in mine for w in WORD.findall(cell)})
            for row, mine in zip(theirs.rows, ours.rows)):
        return Outcome([], len(sequence), IN_ORDER)
    if relaid is None or theirs.header == ours.header:
        return Outcome(exact, 0)
    texts = [cell for row in ours.rows for cell in row] + [t for leaf in leaves(source) for t in renderings(leaf)]
    known, words = numbers(texts), {w for text in texts for w in WORD.findall(text)}
    found, values = [], 0
    for i, row in enumerate(theirs.rows):
        for j, cell in enumerate(row):
            for token in sorted(numbers([cell])):
                values += 1
                if token not in known:
                    found.append(Mismatch(file, f"rows[{i}][{j}]", cell, f"<no recomputed value reads {token}>"))
            for word in _unknown_words([cell], words):
                found.append(Mismatch(file, f"rows[{i}][{j}]", cell, f"<no recomputed value reads {word!r}>"))
    return Outcome(found, values, FOUND)
