"""The base for statistics results: a frozen dataclass that turns itself into plain JSON values."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np


def plain(value: Any) -> Any:
    """Convert numpy scalars/arrays, tuples and nested results into JSON-ready Python values.

    Non-finite floats become ``None`` so the output is valid strict JSON.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        f = float(value)
        return f if math.isfinite(f) else None
    return value


class JsonResult:
    """Mixin for frozen result dataclasses: ``to_json()`` gives a dict of plain floats/ints/strings."""

    def to_json(self) -> dict[str, Any]:
        return plain(self)
