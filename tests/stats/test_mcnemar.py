"""Exact McNemar against the paper's Table VII p-values and a direct binomial sum."""

import math
from fractions import Fraction
from math import comb

import numpy as np
import pytest

from kit.stats import StatsInputError, exact_mcnemar, paired_mcnemar


def binomial_two_sided(b, c):
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    return min(1.0, 2 * tail)


# Table VII: discordant pairs recovered from flips and the two correct counts
# (b = correct on recompute only, c = correct on cache hit only; b + c = flips, c - b = difference).
@pytest.mark.parametrize("b,c,printed", [(0, 0, 1.000), (3, 1, 0.625), (2, 2, 1.000), (0, 1, 1.000),
                                         (3, 9, 0.146), (1, 2, 1.000)])
def test_table_vii_p_values(b, c, printed):
    assert round(exact_mcnemar(b, c).p, 3) == printed


def test_pooled_flips_p_026():
    # 20 flips: 13 favour the cache-hit path, 7 recompute; the paper gives p = 0.26
    assert round(exact_mcnemar(7, 13).p, 2) == 0.26


@pytest.mark.parametrize("b,c", [(0, 5), (5, 0), (4, 11), (10, 10), (1, 30)])
def test_against_binomial_sum(b, c):
    assert exact_mcnemar(b, c).p == pytest.approx(binomial_two_sided(b, c))
    assert exact_mcnemar(b, c).p == exact_mcnemar(c, b).p


def test_paired_counts_discordant_pairs():
    first = np.array([1, 1, 0, 0, 1, 1, 0])
    second = np.array([1, 0, 1, 1, 0, 0, 0])
    res = paired_mcnemar(first, second)
    assert (res.b, res.c) == (3, 2)
    assert res.p == pytest.approx(binomial_two_sided(3, 2))


def test_negative_counts_rejected():
    with pytest.raises(StatsInputError):
        exact_mcnemar(-1, 2)


def test_the_binomial_cdf_is_the_exact_sum_rounded_once():
    """binom_cdf_half is sum C(n, i) / 2**n computed exactly and rounded once: the nearest float to the true value
    (checked against exact fractions), for every k and n it takes."""
    from kit.stats.mcnemar import binom_cdf_half

    for n in [*range(1, 121), *range(121, 1201, 107)]:
        assert binom_cdf_half(-1, n) == 0.0 and binom_cdf_half(n, n) == binom_cdf_half(n + 1, n) == 1.0
        below = 0
        for k in range(n):
            below += comb(n, k)
            exact, got = Fraction(below, 2**n), binom_cdf_half(k, n)
            assert abs(Fraction(got) - exact) <= Fraction(math.ulp(got)) / 2, (k, n)


def test_p_values_agree_with_scipy_stats_within_what_kit_verify_allows():
    """Earlier releases took scipy's binomial kernel (Boost, a few hundred units in the last place off at worst);
    every p this computes agrees with min(1, 2 binom.cdf) within kit verify's tolerance, so their bundles verify."""
    from scipy.stats import binom

    from kit.bundle.value_diff import ABS_TOL, REL_TOL

    for n in [*range(1, 301), *range(301, 2001, 97)]:
        cdf = binom.cdf(np.arange(n + 1), n, 0.5)
        for b in range(n // 2 + 1):
            earlier = min(1.0, 2.0 * float(cdf[b]))
            assert math.isclose(exact_mcnemar(b, n - b).p, earlier, rel_tol=REL_TOL, abs_tol=ABS_TOL), (b, n)


def test_a_large_count_is_still_quick():
    """The most discordant pairs a run can have (twice the item limit) take well under a second, in pure Python."""
    import time

    from kit.core.limits import ITEMS_MAX

    started = time.perf_counter()
    assert exact_mcnemar(ITEMS_MAX, ITEMS_MAX).p == 1.0
    assert exact_mcnemar(ITEMS_MAX - 300, ITEMS_MAX + 300).p < 0.01
    assert time.perf_counter() - started < 2.0
