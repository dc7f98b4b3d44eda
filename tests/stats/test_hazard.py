"""Flip hazard by margin bin against a naive count, and its episode-cluster bootstrap."""

import numpy as np
import pytest

from kit.stats import MARGIN_EDGES, StatsInputError, flip_hazard_by_margin


def data(seed=0, episodes=30, per=200):
    rng = np.random.default_rng(seed)
    margin = rng.exponential(1.0, episodes * per)
    flipped = (rng.random(margin.size) < 0.5 * np.exp(-5 * margin)).astype(int)
    episode = np.repeat(np.arange(episodes), per)
    return margin, flipped, episode


def test_counts_match_naive_binning():
    margin, flipped, episode = data()
    margin[:3] = [0.01, 3.0, 0.0]  # edges belong to the bin above
    res = flip_hazard_by_margin(margin, flipped, episode, replicates=200)
    edges = list(MARGIN_EDGES)
    for i, b in enumerate(res.bins):
        inside = [j for j, m in enumerate(margin) if edges[i] <= m < edges[i + 1]]
        assert b.positions == len(inside)
        assert b.flips == int(sum(flipped[j] for j in inside))
        if b.positions:
            assert b.hazard == pytest.approx(b.flips / b.positions)
    assert sum(b.positions for b in res.bins) == margin.size
    assert res.n_episodes == 30


def test_bootstrap_interval_brackets_estimate_and_is_seeded():
    margin, flipped, episode = data(1)
    a = flip_hazard_by_margin(margin, flipped, episode, replicates=500, seed=3)
    b = flip_hazard_by_margin(margin, flipped, episode, replicates=500, seed=3)
    assert a == b
    low_bins = [x for x in a.bins if x.positions > 50]
    assert all(x.ci_lo <= x.hazard <= x.ci_hi for x in low_bins)
    assert a.bins[0].hazard > a.bins[-1].hazard
    json_bins = a.to_json()["bins"]
    assert json_bins[-1]["hi"] is None and json_bins[0]["lo"] == 0.0


def test_cluster_bootstrap_wider_than_position_level_when_episodes_differ():
    rng = np.random.default_rng(2)
    episode = np.repeat(np.arange(20), 100)
    margin = np.full(2000, 0.05)
    flipped = (rng.random(2000) < np.repeat(rng.choice([0.0, 0.6], 20), 100)).astype(int)
    res = flip_hazard_by_margin(margin, flipped, episode, replicates=1000)
    b = res.bins[2]
    p = b.hazard
    iid_half_width = 1.96 * np.sqrt(p * (1 - p) / 2000)
    assert (b.ci_hi - b.ci_lo) / 2 > 2 * iid_half_width


def test_bad_margins_rejected():
    with pytest.raises(StatsInputError):
        flip_hazard_by_margin([0.1, -1.0], [0, 1], [0, 0])
    with pytest.raises(StatsInputError):
        flip_hazard_by_margin([0.1, np.nan], [0, 1], [0, 0])
