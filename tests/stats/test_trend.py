"""Page's trend test wrapper against a hand computation of L and its normal approximation."""

import math

import numpy as np
import pytest
from scipy.stats import norm, rankdata

from kit.stats import StatsInputError, page_trend


def test_statistic_and_asymptotic_p_by_hand():
    rng = np.random.default_rng(0)
    n, k = 30, 4
    table = rng.normal(size=(n, k)) + np.array([0.0, 0.2, 0.4, 0.6])
    res = page_trend(table, method="asymptotic")
    ranks = rankdata(table, axis=1)
    L = float(np.sum(ranks.sum(axis=0) * np.arange(1, k + 1)))
    mean = n * k * (k + 1) ** 2 / 4
    var = n * k**2 * (k + 1) * (k**2 - 1) / 144
    assert res.statistic == pytest.approx(L)
    assert res.p == pytest.approx(norm.sf((L - mean) / math.sqrt(var)), rel=1e-6)
    assert res.n_blocks == n and res.n_dropped == 0


def test_incomplete_episodes_dropped_and_direction():
    table = np.tile([0.1, 0.2, 0.3, 0.4], (12, 1)) + np.random.default_rng(1).normal(0, 0.01, (12, 4))
    table[3, 2] = np.nan
    up = page_trend(table)
    down = page_trend(table[:, ::-1])
    assert up.n_dropped == 1 and up.n_blocks == 11
    assert up.p < 0.001 < down.p


def test_too_few_formats():
    with pytest.raises(StatsInputError):
        page_trend(np.ones((5, 2)))
