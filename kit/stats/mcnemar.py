"""Exact McNemar test on discordant pairs: p = min(1, 2 * BinomCDF(min(b, c); b + c, 1/2))."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import binom

from kit.stats.inputs import StatsInputError, binary_vector, same_length
from kit.stats.result import JsonResult


@dataclass(frozen=True)
class McNemarResult(JsonResult):
    """Discordant counts b (first condition only) and c (second only) with the exact two-sided p."""

    b: int
    c: int
    p: float


def exact_mcnemar(b: int, c: int) -> McNemarResult:
    """Exact McNemar test from the two discordant counts; p = 1 when there are none."""
    if b < 0 or c < 0:
        raise StatsInputError(f"discordant counts must be non-negative, got b={b}, c={c}",
                              "count the pairs that changed in each direction")
    n = b + c
    p = 1.0 if n == 0 else min(1.0, 2.0 * float(binom.cdf(min(b, c), n, 0.5)))
    return McNemarResult(int(b), int(c), p)


def paired_mcnemar(first, second) -> McNemarResult:
    """Exact McNemar test on paired 0/1 outcomes (e.g. correct on recompute vs correct on cache hit).

    b counts items correct under ``first`` only, c items correct under ``second`` only.
    """
    a = binary_vector(first, "first")
    s = binary_vector(second, "second")
    same_length(first=a, second=s)
    return exact_mcnemar(int(np.sum((a == 1) & (s == 0))), int(np.sum((a == 0) & (s == 1))))
