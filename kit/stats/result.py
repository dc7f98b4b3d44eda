"""The base for statistics results: a frozen dataclass that turns itself into plain JSON values."""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any


class _Absent:
    """A type no value has: numpy's types where numpy is not loaded (then no value is one of them)."""


def _numpy_types() -> tuple[Any, Any, Any, Any]:
    """numpy's array, bool, integer and floating types, or _Absent for each where no module has imported
    numpy (not imported here: a run's McNemar test, kit.stats.mcnemar, needs none of it)."""
    np = sys.modules.get("numpy")
    return (np.ndarray, np.bool_, np.integer, np.floating) if np is not None else (_Absent,) * 4


def plain(value: Any) -> Any:
    """Convert numpy scalars/arrays, tuples and nested results into JSON-ready Python values.

    Non-finite floats become ``None`` so the output is valid strict JSON.
    """
    return _plain(value, _numpy_types())  # looked up once for the whole value, not at each of its elements


def _plain(value: Any, numpy: tuple[Any, Any, Any, Any]) -> Any:
    array, boolean, integer, floating = numpy
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name), numpy) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _plain(v, numpy) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, numpy) for v in value]
    if isinstance(value, array):
        return [_plain(v, numpy) for v in value.tolist()]
    if isinstance(value, (bool, boolean)):
        return bool(value)
    if isinstance(value, (int, integer)):
        return int(value)
    if isinstance(value, (float, floating)):
        f = float(value)
        return f if math.isfinite(f) else None
    return value


class JsonResult:
    """Mixin for frozen result dataclasses: ``to_json()`` gives a dict of plain floats/ints/strings."""

    def to_json(self) -> dict[str, Any]:
        return plain(self)
