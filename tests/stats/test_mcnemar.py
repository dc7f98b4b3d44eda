"""Exact McNemar against the paper's Table VII p-values and a direct binomial sum."""

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


def test_the_binomial_cdf_is_scipy_stats_own_to_the_last_bit():
    """exact_mcnemar computes binom.cdf without importing scipy.stats; its p must stay the very float
    scipy.stats gives (findings and run results are compared byte for byte), for every k and n it takes."""
    from scipy.stats import binom

    from kit.stats.mcnemar import binom_cdf_half

    for n in [*range(1, 301), *range(301, 2001, 37)]:
        for k in range(0, n + 1):
            assert binom_cdf_half(k, n) == float(binom.cdf(k, n, 0.5)), (k, n)
