"""Comparing recomputed results with bundled ones, number by number.

Integers, strings, booleans and nulls must be equal; floats must agree within a tight tolerance
(relative 1e-9, absolute 1e-12), NaN equals NaN. Every difference is reported with its key path.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from typing import Any

REL_TOL = 1e-9
ABS_TOL = 1e-12


@dataclass(frozen=True)
class Mismatch:
    """One difference: in which file, at which key, the bundled value and the recomputed one."""

    file: str
    key: str
    bundled: Any
    recomputed: Any

    def line(self) -> str:
        return (f"MISMATCH {self.file} {self.key or '(whole file)'}: bundled {_show(self.bundled)}, "
                f"recomputed {_show(self.recomputed)}")


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) or value.startswith("<") else repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _number_equal(a: float, b: float) -> bool:
    if math.isnan(a) and math.isnan(b):
        return True
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def _join(key: str, part: str | int) -> str:
    return f"{key}[{part}]" if isinstance(part, int) else (f"{key}.{part}" if key else str(part))


def compare_json(bundled: Any, recomputed: Any, file: str, key: str = "") -> list[Mismatch]:
    """Every difference between two JSON values, recursively."""
    if isinstance(bundled, dict) and isinstance(recomputed, dict):
        out = []
        for name in sorted(set(bundled) | set(recomputed), key=str):
            sub = _join(key, name)
            if name not in recomputed:
                out.append(Mismatch(file, sub, bundled[name], "<absent>"))
            elif name not in bundled:
                out.append(Mismatch(file, sub, "<absent>", recomputed[name]))
            else:
                out.extend(compare_json(bundled[name], recomputed[name], file, sub))
        return out
    if isinstance(bundled, list) and isinstance(recomputed, list):
        out = [m for i, (a, b) in enumerate(zip(bundled, recomputed)) for m in compare_json(a, b, file, _join(key, i))]
        if len(bundled) != len(recomputed):
            out.append(Mismatch(file, _join(key, "length"), len(bundled), len(recomputed)))
        return out
    both_numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (bundled, recomputed))
    if both_numbers and (isinstance(bundled, float) or isinstance(recomputed, float)):
        return [] if _number_equal(float(bundled), float(recomputed)) else [Mismatch(file, key, bundled, recomputed)]
    if type(bundled) is not type(recomputed) or bundled != recomputed:
        return [Mismatch(file, key, bundled, recomputed)]
    return []


def cell_value(text: str) -> Any:
    """A table cell as the number it reads, else as its text."""
    for convert in (int, float):
        try:
            return convert(text)
        except ValueError:
            continue
    return text


def parse_csv(data: bytes) -> list[list[Any]]:
    return [[cell_value(c) for c in row] for row in csv.reader(io.StringIO(data.decode("utf-8")))]


def compare_file(name: str, bundled: bytes, recomputed: bytes) -> list[Mismatch]:
    """Compare two versions of a results file: JSON and CSV cell by cell, anything else byte for byte."""
    try:
        if name.endswith(".json"):
            return compare_json(json.loads(bundled), json.loads(recomputed), name)
        if name.endswith(".csv"):
            return compare_json(parse_csv(bundled), parse_csv(recomputed), name)
    except (ValueError, UnicodeDecodeError, csv.Error, RecursionError) as exc:
        return [Mismatch(name, "", f"<unreadable: {type(exc).__name__}: {exc}>", "<readable>")]
    return [] if bundled == recomputed else [Mismatch(name, "", "<bytes>", "<different bytes>")]
