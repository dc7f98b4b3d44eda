"""Exact McNemar test on discordant pairs: p = min(1, 2 * BinomCDF(min(b, c); b + c, 1/2))."""

from __future__ import annotations

from dataclasses import dataclass

from kit.stats.inputs import StatsInputError, binary_vector, same_length
from kit.stats.result import JsonResult


@dataclass(frozen=True)
class McNemarResult(JsonResult):
    """Discordant counts b (first condition only) and c (second only) with the exact two-sided p."""

    b: int
    c: int
    p: float


def _lower_tail(k: int, n: int) -> int:
    """sum of C(n, i) for i = 0..k, exactly (integers: each term from the last, C(n, i+1) = C(n, i)(n-i)/(i+1))."""
    term = total = 1
    for i in range(k):
        term = term * (n - i) // (i + 1)
        total += term
    return total


def binom_cdf_half(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2): the exact sum of C(n, i) over 2**n, rounded once to the nearest float
    (Python's int / int is correctly rounded). Pure Python: no scipy (scipy.stats alone costs about 2 s, and a
    run's final table needs only this). scipy.stats.binom.cdf agrees to a few units in the last place."""
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    return _lower_tail(k, n) / (1 << n)


def exact_mcnemar(b: int, c: int) -> McNemarResult:
    """Exact McNemar test from the two discordant counts; p = 1 when there are none."""
    if b < 0 or c < 0:
        raise StatsInputError(f"discordant counts must be non-negative, got b={b}, c={c}",
                              "count the pairs that changed in each direction")
    n = b + c
    p = 1.0 if n == 0 else min(1.0, _lower_tail(min(b, c), n) / (1 << (n - 1)))  # 2 * the lower tail, exactly
    return McNemarResult(int(b), int(c), p)


def paired_mcnemar(first, second) -> McNemarResult:
    """Exact McNemar test on paired 0/1 outcomes (e.g. correct on recompute vs correct on cache hit).

    b counts items correct under ``first`` only, c items correct under ``second`` only.
    """
    import numpy as np  # noqa: PLC0415 - exact_mcnemar, a run's, needs none (a tenth of a second to import)

    a = binary_vector(first, "first")
    s = binary_vector(second, "second")
    same_length(first=a, second=s)
    return exact_mcnemar(int(np.sum((a == 1) & (s == 0))), int(np.sum((a == 0) & (s == 1))))
