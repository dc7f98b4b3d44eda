"""Exact McNemar test on discordant pairs: p = min(1, 2 * BinomCDF(min(b, c); b + c, 1/2))."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kit.stats.inputs import StatsInputError, binary_vector, same_length
from kit.stats.result import JsonResult


@dataclass(frozen=True)
class McNemarResult(JsonResult):
    """Discordant counts b (first condition only) and c (second only) with the exact two-sided p."""

    b: int
    c: int
    p: float


def binom_cdf_half(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2), exactly as scipy.stats.binom.cdf computes it (its Boost kernel,
    scipy.special's `_binom_cdf`, for 0 <= k < n) without importing scipy.stats (about 2 s: a run's final
    table needs only this). Where this scipy has no such kernel, binom.cdf itself."""
    try:
        from scipy.special._ufuncs import _binom_cdf  # noqa: PLC0415 - private, checked in tests
    except ImportError:  # pragma: no cover - another scipy
        from scipy.stats import binom  # noqa: PLC0415

        return float(binom.cdf(k, n, 0.5))
    return float(_binom_cdf(float(k), n, 0.5)) if 0 <= k < n else (1.0 if k >= n else 0.0)


def exact_mcnemar(b: int, c: int) -> McNemarResult:
    """Exact McNemar test from the two discordant counts; p = 1 when there are none."""
    if b < 0 or c < 0:
        raise StatsInputError(f"discordant counts must be non-negative, got b={b}, c={c}",
                              "count the pairs that changed in each direction")
    n = b + c
    p = 1.0 if n == 0 else min(1.0, 2.0 * binom_cdf_half(min(b, c), n))
    return McNemarResult(int(b), int(c), p)


def paired_mcnemar(first, second) -> McNemarResult:
    """Exact McNemar test on paired 0/1 outcomes (e.g. correct on recompute vs correct on cache hit).

    b counts items correct under ``first`` only, c items correct under ``second`` only.
    """
    a = binary_vector(first, "first")
    s = binary_vector(second, "second")
    same_length(first=a, second=s)
    return exact_mcnemar(int(np.sum((a == 1) & (s == 0))), int(np.sum((a == 0) & (s == 1))))
