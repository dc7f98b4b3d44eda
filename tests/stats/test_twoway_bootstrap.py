"""Two-way bootstrap: point values against direct computation, replicates against naive resampling."""

import json

import numpy as np
import pytest

from kit.stats import fit_random_intercept_logit, sweep_bootstrap
from kit.stats.twoway_bootstrap import least_squares_slope


def cube(histories=3, episodes=40, seed=0):
    rng = np.random.default_rng(seed)
    u = rng.normal(0, 1.4, episodes)
    scores = np.arange(4)
    p = 1 / (1 + np.exp(-(-0.6 + 0.8 * scores + u[None, :, None])))
    return (rng.random((histories, episodes, 4)) < p).astype(int)


def test_point_values_and_glmm_average():
    y = cube()
    res = sweep_bootstrap(y, labels=["F16", "Q8_0", "Q4_K_M", "Q3_K_M"], replicates=30)
    rates = y.mean(axis=(0, 1))
    assert [f.rate for f in res.formats] == pytest.approx(rates)
    assert [f.diff for f in res.formats] == pytest.approx(rates - rates[0])
    assert res.rate_slope == pytest.approx(np.polyfit(np.arange(4), rates, 1)[0])
    ep = np.repeat(np.arange(40), 4)
    sc = np.tile(np.arange(4), 40)
    per_history = [fit_random_intercept_logit(ep, sc, y[h].ravel(), lr_test=False).b1 for h in range(3)]
    assert res.b1_per_history == pytest.approx(per_history, abs=1e-8)
    assert res.b1_mean == pytest.approx(np.mean(per_history), abs=1e-8)
    assert res.b1_lo < res.b1_mean < res.b1_hi and res.failed_fits == 0
    assert res.formats[2].histories_above_reference == int(np.sum(y[:, :, 2].mean(1) > y[:, :, 0].mean(1)))
    json.dumps(res.to_json())


def test_rate_replicates_match_naive_resampling():
    y = cube(seed=1)
    reps, seed = 200, 5
    res = sweep_bootstrap(y, replicates=reps, seed=seed, glmm=False)
    rng = np.random.default_rng(seed)
    hs = rng.integers(0, 3, size=(reps, 3))
    es = rng.integers(0, 40, size=(reps, 40))
    naive = np.array([y[hs[r]][:, es[r]].mean(axis=(0, 1)) for r in range(reps)])
    lo, hi = np.percentile(naive[:, 3], [2.5, 97.5])
    assert (res.formats[3].lo, res.formats[3].hi) == pytest.approx((lo, hi))
    dlo, dhi = np.percentile(naive[:, 3] - naive[:, 0], [2.5, 97.5])
    assert (res.formats[3].diff_lo, res.formats[3].diff_hi) == pytest.approx((dlo, dhi))
    slo, shi = np.percentile(least_squares_slope(naive, np.arange(4.0)), [2.5, 97.5])
    assert (res.rate_slope_lo, res.rate_slope_hi) == pytest.approx((slo, shi))
    assert res.b1_mean is None


def test_glmm_replicate_matches_refit_on_resampled_data():
    y = cube(histories=2, episodes=30, seed=2)
    reps, seed = 3, 9
    res = sweep_bootstrap(y, replicates=reps, seed=seed)
    rng = np.random.default_rng(seed)
    hs = rng.integers(0, 2, size=(reps, 2))
    es = rng.integers(0, 30, size=(reps, 30))
    averaged = []
    for r in range(reps):
        slopes = []
        for h in hs[r]:
            sub = y[h][es[r]]  # (episodes, formats), resampled episodes get distinct cluster ids
            ep = np.repeat(np.arange(30), 4)
            slopes.append(fit_random_intercept_logit(ep, np.tile(np.arange(4), 30), sub.ravel(), lr_test=False).b1)
        averaged.append(np.mean(slopes))
    assert (res.b1_lo, res.b1_hi) == pytest.approx(tuple(np.percentile(averaged, [2.5, 97.5])), abs=1e-6)


def test_seeded_and_single_history():
    y = cube(histories=1, seed=3)
    a = sweep_bootstrap(y, replicates=50, seed=1, glmm=False)
    b = sweep_bootstrap(y, replicates=50, seed=1, glmm=False)
    c = sweep_bootstrap(y, replicates=50, seed=2, glmm=False)
    assert a.to_json() == b.to_json() and a.to_json() != c.to_json()
    assert np.isnan(a.formats[0].history_sd) and a.to_json()["formats"][0]["history_sd"] is None


def test_refits_spread_over_processes_give_the_same_result():
    from concurrent.futures import ProcessPoolExecutor

    y = cube(histories=3, episodes=30, seed=4)
    with ProcessPoolExecutor(max_workers=2) as pool:
        spread = sweep_bootstrap(y, replicates=40, seed=3, mapper=lambda fn, jobs: pool.map(fn, *zip(*jobs)))
    assert spread.to_json() == sweep_bootstrap(y, replicates=40, seed=3).to_json()
