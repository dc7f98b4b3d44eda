"""Exact position trend test (events over quartiles of execution order) against full enumeration of
every placement of the k events among the n positions."""

import itertools
from math import comb

import numpy as np
import pytest

from kit.stats import StatsInputError, position_trend_test, quartile_scores, subset_sum_counts


def brute(indicators, scores):
    """The statistic for every one of the C(n, k) placements of the k events."""
    n, k = len(indicators), int(sum(indicators))
    return np.array([sum(scores[i] for i in chosen) for chosen in itertools.combinations(range(n), k)])


def brute_p(indicators, scores, alternative):
    null = brute(indicators, scores)
    observed = float(np.dot(scores, indicators))
    mean = null.mean()
    if alternative == "less":
        return np.mean(null <= observed + 1e-9)
    if alternative == "greater":
        return np.mean(null >= observed - 1e-9)
    return np.mean(np.abs(null - mean) >= abs(observed - mean) - 1e-9)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("alternative", ["two-sided", "less", "greater"])
def test_p_matches_enumeration_of_every_placement(seed, alternative):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(6, 15))
    indicators = (rng.random(n) < np.linspace(0.8, 0.1, n)).astype(int)
    scores = quartile_scores(n)
    result = position_trend_test(indicators, alternative=alternative)
    assert result.p == pytest.approx(brute_p(indicators, scores, alternative), rel=1e-12)
    null = brute(indicators, scores)
    assert result.null_mean == pytest.approx(null.mean())
    assert result.null_sd == pytest.approx(null.std())


def test_null_counts_match_enumeration_with_uneven_scores():
    scores = [0, 3, 3, 1, 7, 2, 2, 2, 5, 0, 1]
    for k in range(len(scores) + 1):
        counts = subset_sum_counts(scores, k)
        values, freq = np.unique(brute([1] * k + [0] * (len(scores) - k), scores), return_counts=True)
        assert counts == dict(zip(values.tolist(), freq.tolist()))
        assert sum(counts.values()) == comb(len(scores), k)


def test_quartiles_split_positions_in_execution_order():
    assert quartile_scores(80).tolist() == [1] * 20 + [2] * 20 + [3] * 20 + [4] * 20
    assert quartile_scores(10).tolist() == [1, 1, 1, 2, 2, 3, 3, 3, 4, 4]
    assert quartile_scores(1).tolist() == [1]


def test_the_papers_split_is_an_early_concentration():
    # seed 000: 16, 6, 6, 3 divergent episodes per quartile of 80 (the paper reports p = 0.0002)
    indicators = [1] * 16 + [0] * 4 + [1] * 6 + [0] * 14 + [1] * 6 + [0] * 14 + [1] * 3 + [0] * 17
    result = position_trend_test(indicators)
    assert result.events_per_group == [16, 6, 6, 3] and result.positions_per_group == [20] * 4
    assert (result.n, result.k, result.statistic, result.null_mean) == (80, 31, 58, 77.5)
    assert result.p_less < result.p_two_sided < 0.0002 < result.p_greater
    # where the events sit inside a quartile does not matter to the quartile statistic
    shuffled = [0] * 4 + [1] * 16 + indicators[20:]
    assert position_trend_test(shuffled).p == result.p


def test_no_events_or_all_events_give_p_one():
    assert position_trend_test([0, 0, 0, 0]).p == 1.0
    assert position_trend_test([1, 1, 1]).p == 1.0
    assert position_trend_test([1]).p == 1.0


def test_bad_input_is_refused_with_a_reason():
    with pytest.raises(StatsInputError, match="0/1"):
        position_trend_test([0, 2, 1])
    with pytest.raises(StatsInputError, match="one score per position"):
        position_trend_test([0, 1, 1], scores=[1, 2])
    with pytest.raises(StatsInputError, match="alternative"):
        position_trend_test([0, 1], alternative="up")
