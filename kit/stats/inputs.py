"""Checks on the arrays handed to the statistics functions, with errors that say how to fix the input."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kit.core.errors import KitError

if TYPE_CHECKING:
    import numpy as np


class StatsInputError(KitError):
    """The data given to a statistics function cannot be analysed as asked."""


def binary_vector(values, name: str) -> np.ndarray:
    """Return ``values`` as a 1-D int array of 0/1, or raise StatsInputError."""
    import numpy as np  # noqa: PLC0415 - StatsInputError alone (kit.stats.mcnemar) needs none
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise StatsInputError(f"{name} must be one-dimensional, got shape {arr.shape}",
                              "pass one 0/1 value per episode or row")
    if arr.size and not np.isin(arr, (0, 1, True, False)).all():
        raise StatsInputError(f"{name} must contain only 0/1 values",
                              "convert the outcome to 0 (no event) / 1 (event)")
    return arr.astype(np.int64)


def same_length(**arrays: np.ndarray) -> int:
    """Check that all named 1-D arrays have the same length; return it."""
    lengths = {name: len(a) for name, a in arrays.items()}
    if len(set(lengths.values())) > 1:
        raise StatsInputError(f"input arrays differ in length: {lengths}",
                              "pass one entry per row in every array")
    return next(iter(lengths.values())) if lengths else 0


def integer_scores(values, name: str) -> np.ndarray:
    """Return ``values`` as an int array, refusing non-integer entries (needed for exact convolution)."""
    import numpy as np  # noqa: PLC0415 - StatsInputError alone (kit.stats.mcnemar) needs none
    arr = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(arr)) or not np.allclose(arr, np.round(arr)):
        raise StatsInputError(f"{name} must be integers for the exact test",
                              "code formats as integer ranks, e.g. F16=0, Q8_0=1, Q4_K_M=2, Q3_K_M=3")
    return np.round(arr).astype(np.int64)
