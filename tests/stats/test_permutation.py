"""Exact within-episode permutation trend test against full enumeration of all permutations."""

import itertools

import numpy as np
import pytest

from kit.stats import StatsInputError, permutation_trend_test, sweep_permutation_test


def enumerate_null(table, ranks):
    """Statistic for every one of the (F!)^E joint permutations (brute force, vectorised outer sums)."""
    perms = np.array(list(itertools.permutations(range(table.shape[1]))))
    values = np.zeros(1)
    for row in table:
        per_episode = np.array([float(np.dot(ranks, row[p])) for p in perms])
        values = np.add.outer(values, per_episode).ravel()
    return values


def brute_p(table, ranks, alternative):
    null = enumerate_null(table, np.asarray(ranks, dtype=float))
    obs = float(np.sum(table @ np.asarray(ranks)))
    mean = null.mean()
    if alternative == "greater":
        return np.mean(null >= obs - 1e-9)
    if alternative == "less":
        return np.mean(null <= obs + 1e-9)
    return np.mean(np.abs(null - mean) >= abs(obs - mean) - 1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_grid_p_matches_enumeration(seed, alternative):
    rng = np.random.default_rng(seed)
    table = (rng.random((4, 4)) < np.array([0.2, 0.4, 0.6, 0.8])).astype(int)  # 24^4 = 331,776 permutations
    res = permutation_trend_test(table, alternative=alternative)
    assert res.p == pytest.approx(brute_p(table, np.arange(4), alternative), rel=1e-9)


def test_counts_and_unequal_ranks_match_enumeration():
    table = np.array([[0, 2, 3], [1, 1, 3], [0, 0, 2], [2, 0, 1], [3, 3, 3]])
    ranks = np.array([1, 2, 4])
    res = permutation_trend_test(table, ranks)
    assert res.statistic == int(np.sum(table @ ranks))
    assert res.p == pytest.approx(brute_p(table, ranks, "two-sided"), rel=1e-9)
    null = enumerate_null(table, ranks)
    assert res.null_mean == pytest.approx(null.mean()) and res.null_sd == pytest.approx(null.std())
    assert res.n_informative == 4


def test_sweep_uses_one_shared_permutation_per_episode():
    rng = np.random.default_rng(5)
    cube = (rng.random((3, 3, 4)) < np.array([0.2, 0.4, 0.6, 0.8])).astype(int)
    perms = list(itertools.permutations(range(4)))
    ranks = np.arange(4)
    # enumerate directly on the cube: one permutation per episode, applied to every history
    values = np.zeros(1)
    for e in range(3):
        per_episode = np.array([sum(float(cube[h, e, list(p)] @ ranks) for h in range(3)) for p in perms])
        values = np.add.outer(values, per_episode).ravel()
    obs = float(np.einsum("hef,f->", cube, ranks))
    expected = np.mean(np.abs(values - values.mean()) >= abs(obs - values.mean()) - 1e-9)
    assert sweep_permutation_test(cube).p == pytest.approx(expected, rel=1e-9)


def test_rank_shift_leaves_p_unchanged():
    table = np.random.default_rng(3).integers(0, 2, (30, 4))
    assert permutation_trend_test(table, [0, 1, 2, 3]).p == pytest.approx(
        permutation_trend_test(table, [1, 2, 3, 4]).p, rel=1e-12)


def test_strong_trend_small_p_and_bad_input():
    table = np.tile([0, 0, 1, 1], (40, 1))
    assert permutation_trend_test(table).p < 1e-10
    with pytest.raises(StatsInputError):
        permutation_trend_test(np.array([[0.5, 1, 0, 1]]))
    with pytest.raises(StatsInputError):
        permutation_trend_test(np.ones((3, 4)), ranks=[0, 1, 2])
