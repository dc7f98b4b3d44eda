"""Episode-averaged group means and ratios with a paired episode bootstrap, against naive loops."""

import numpy as np
import pytest

from kit.stats import compare_episode_means, episode_mean_table, page_trend


def data(seed=0):
    rng = np.random.default_rng(seed)
    rows = []
    for e in range(25):
        for g, scale in (("F16", 0.03), ("Q8_0", 0.1), ("Q3_K_M", 0.15)):
            for _ in range(rng.integers(5, 40)):
                rows.append((e, g, abs(rng.normal(0, scale))))
    ep = np.array([r[0] for r in rows])
    gr = np.array([r[1] for r in rows])
    v = np.array([r[2] for r in rows])
    return v, ep, gr


def test_table_matches_naive_episode_means():
    v, ep, gr = data()
    table, labels, episodes = episode_mean_table(v, ep, gr, groups=["F16", "Q8_0", "Q3_K_M"])
    assert labels == ["F16", "Q8_0", "Q3_K_M"] and list(episodes) == list(range(25))
    for e in (0, 7, 24):
        for j, g in enumerate(labels):
            assert table[e, j] == pytest.approx(v[(ep == e) & (gr == g)].mean())
    assert page_trend(table).p < 1e-6


def test_comparison_ratio_and_interval():
    v, ep, gr = data(1)
    res = compare_episode_means(v, ep, gr, reference="F16", groups=["F16", "Q8_0", "Q3_K_M"], replicates=500)
    by = {g.group: g for g in res.groups}
    naive = {g: np.mean([v[(ep == e) & (gr == g)].mean() for e in range(25)]) for g in by}
    for g, s in by.items():
        assert s.mean == pytest.approx(naive[g])
        assert s.median == pytest.approx(np.median(v[gr == g]))
        assert s.ci_lo <= s.mean <= s.ci_hi
    assert by["F16"].ratio_to_reference == 1.0 and by["F16"].ratio_lo == pytest.approx(1.0)
    assert by["Q3_K_M"].ratio_to_reference == pytest.approx(naive["Q3_K_M"] / naive["F16"])
    assert 3 < by["Q3_K_M"].ratio_lo < by["Q3_K_M"].ratio_to_reference < by["Q3_K_M"].ratio_hi < 8
