"""Random-intercept logit: AGHQ likelihood against numerical integration, slope recovery, LR test."""

import math

import numpy as np
import pytest
from scipy import integrate
from scipy.special import expit
from scipy.stats import norm

from kit.stats import fit_random_intercept_logit
from kit.stats.glmm import fit_grouped, group_clusters
from kit.stats.quadrature_likelihood import Quadrature, evaluate


def simulate(n_episodes, b0, b1, sd, seed, formats=4):
    rng = np.random.default_rng(seed)
    u = rng.normal(0, sd, n_episodes)
    ep = np.repeat(np.arange(n_episodes), formats)
    score = np.tile(np.arange(formats), n_episodes)
    p = 1 / (1 + np.exp(-(b0 + b1 * score + u[ep])))
    return ep, score, (rng.random(len(ep)) < p).astype(int)


def integrated_loglik(ep, score, y, b0, b1, sd):
    """Marginal log-likelihood by adaptive scipy quad (independent of the kit); identical clusters once."""
    clusters = {}
    for e in np.unique(ep):
        key = tuple(sorted(zip(score[ep == e].tolist(), y[ep == e].tolist())))
        clusters[key] = clusters.get(key, 0) + 1
    total = 0.0
    for key, count in clusters.items():
        xs = np.array([k[0] for k in key], dtype=float)
        ys = np.array([k[1] for k in key])

        def integrand(u):
            p = expit(b0 + b1 * xs + u)
            return np.prod(np.where(ys == 1, p, 1 - p)) * norm.pdf(u, 0, sd)

        val, _ = integrate.quad(integrand, -np.inf, np.inf, epsabs=0, epsrel=1e-12, limit=200)
        total += count * math.log(val)
    return total


@pytest.mark.parametrize("theta", [(-0.5, 0.8, 1.4), (1.0, -0.3, 0.3), (0.2, 1.5, 4.0), (-2.0, 0.5, 0.05)])
def test_aghq_likelihood_matches_numerical_integration(theta):
    ep, score, y = simulate(12, -0.4, 0.9, 1.2, seed=2)
    grouped = group_clusters(ep, score, y)
    b0, b1, sd = theta
    ll, _, _, _ = evaluate(grouped.patterns, grouped.counts[None], np.array([[b0, b1, math.log(sd)]]),
                           Quadrature.of_size(100), np.zeros((1, grouped.counts.size)))
    assert ll[0] == pytest.approx(integrated_loglik(ep, score, y, b0, b1, sd), rel=1e-9, abs=1e-9)


def test_gradient_and_hessian_match_finite_differences():
    ep, score, y = simulate(30, -0.4, 0.9, 1.2, seed=3)
    g = group_clusters(ep, score, y)
    quad = Quadrature.of_size(100)
    theta = np.array([[-0.3, 0.7, 0.2]])
    modes = np.zeros((1, g.counts.size))

    def f(t):
        return evaluate(g.patterns, g.counts[None], t[None], quad, modes)[0][0]

    _, grad, hess, _ = evaluate(g.patterns, g.counts[None], theta, quad, modes)
    h = 1e-5
    for i in range(3):
        step = np.zeros(3)
        step[i] = h
        assert grad[0, i] == pytest.approx((f(theta[0] + step) - f(theta[0] - step)) / (2 * h), rel=1e-5, abs=1e-6)
        num_col = (evaluate(g.patterns, g.counts[None], (theta[0] + step)[None], quad, modes)[1][0]
                   - evaluate(g.patterns, g.counts[None], (theta[0] - step)[None], quad, modes)[1][0]) / (2 * h)
        np.testing.assert_allclose(hess[0, :, i], num_col, rtol=1e-4, atol=1e-5)


def test_fit_is_the_maximum_of_the_integrated_likelihood():
    ep, score, y = simulate(40, -0.5, 0.8, 1.3, seed=4)
    fit = fit_random_intercept_logit(ep, score, y)
    best = integrated_loglik(ep, score, y, fit.b0, fit.b1, fit.sd)
    assert fit.log_lik == pytest.approx(best, abs=1e-7)
    for d in [(0.05, 0, 0), (0, 0.05, 0), (0, 0, 0.05), (0, -0.05, 0)]:
        assert best > integrated_loglik(ep, score, y, fit.b0 + d[0], fit.b1 + d[1], fit.sd + d[2])


def test_slope_recovery_on_simulated_data():
    true_b1 = 0.8
    estimates, covered = [], 0
    for seed in range(6):
        ep, score, y = simulate(300, -0.6, true_b1, 1.4, seed=100 + seed)
        fit = fit_random_intercept_logit(ep, score, y, lr_test=False)
        estimates.append(fit.b1)
        covered += fit.b1_lo <= true_b1 <= fit.b1_hi
        assert fit.converged and 0.9 < fit.sd < 2.0
    assert np.mean(estimates) == pytest.approx(true_b1, abs=0.1)
    assert covered >= 4


def test_lr_test_and_wald_agree_in_direction():
    ep, score, y = simulate(80, -0.6, 0.8, 1.4, seed=7)
    fit = fit_random_intercept_logit(ep, score, y)
    assert fit.lr_p < 1e-4 and fit.b1_lo > 0
    # LR and Wald statistics are asymptotically equal; on 80 clusters they should be close
    assert fit.lr_stat == pytest.approx((fit.b1 / fit.se_b1) ** 2, rel=0.3)
    assert fit.odds_ratio == pytest.approx(math.exp(fit.b1))
    assert fit.or_lo == pytest.approx(math.exp(fit.b1 - 1.959964 * fit.se_b1))
    null = simulate(80, -0.2, 0.0, 1.0, seed=8)
    flat = fit_random_intercept_logit(*null)
    assert flat.lr_p > 0.001
    assert flat.lr_stat == pytest.approx((flat.b1 / flat.se_b1) ** 2, rel=0.3, abs=0.5)


def test_no_cluster_effect_reduces_to_ordinary_logistic():
    import statsmodels.api as sm

    ep, score, y = simulate(200, -0.3, 0.5, 1e-9, seed=9)
    fit = fit_random_intercept_logit(ep, score, y, lr_test=False)
    plain = sm.Logit(y, sm.add_constant(score.astype(float))).fit(disp=0)
    assert fit.sd < 0.3
    assert fit.b1 == pytest.approx(plain.params[1], abs=0.02)


def test_grouping_is_invariant_to_row_and_label_order():
    ep, score, y = simulate(50, -0.5, 0.8, 1.3, seed=10)
    perm = np.random.default_rng(0).permutation(len(y))
    a = fit_random_intercept_logit(ep, score, y)
    b = fit_random_intercept_logit(1000 - ep[perm], score[perm], y[perm])
    assert a.b1 == pytest.approx(b.b1, abs=1e-9) and a.sd == pytest.approx(b.sd, abs=1e-9)
    g = group_clusters(ep, score, y)
    assert g.counts.sum() == 50 and g.n_obs == 200 and g.counts.size <= 16


def test_more_nodes_change_nothing():
    ep, score, y = simulate(60, -0.5, 0.8, 1.3, seed=11)
    g = group_clusters(ep, score, y)
    assert fit_grouped(g, nodes=100).b1 == pytest.approx(fit_grouped(g, nodes=40).b1, abs=1e-8)


@pytest.mark.parametrize("y,score", [([0, 0, 0, 0], [0, 1, 0, 1]), ([1, 0, 1, 0], [2, 2, 2, 2])])
def test_unidentified_data_rejected_with_fix(y, score):
    from kit.stats import StatsInputError

    with pytest.raises(StatsInputError) as info:
        fit_random_intercept_logit([0, 0, 1, 1], score, y)
    assert "; " in str(info.value)  # "what went wrong; how to fix it"


def test_fast_and_stable_logistic_forms_agree(monkeypatch):
    import kit.stats.quadrature_likelihood as ql

    ep, score, y = simulate(20, -0.5, 0.8, 1.3, seed=12)
    g = group_clusters(ep, score, y)
    args = (g.patterns, g.counts[None], np.array([[-0.5, 0.8, 0.3]]), Quadrature.of_size(100),
            np.zeros((1, g.counts.size)))
    fast = evaluate(*args)
    monkeypatch.setattr(ql, "SAFE_ETA", -1.0)  # force the overflow-safe path
    stable = evaluate(*args)
    for a, b in zip(fast[:3], stable[:3]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


def test_pattern_grouped_likelihood_equals_the_per_episode_one():
    """Fitting on pattern counts is only a shortcut: every episode as its own pattern gives the same values."""
    from kit.stats.quadrature_likelihood import Patterns

    ep, score, y = simulate(40, -0.4, 0.9, 1.2, seed=13)
    grouped = group_clusters(ep, score, y)
    assert grouped.counts.size < 40  # identical response patterns were merged
    rows = np.lexsort((score, ep))
    x, yy = score[rows].reshape(40, 4).astype(float), y[rows].reshape(40, 4).astype(float)
    per_episode = Patterns(x, yy, np.ones_like(x))
    quad = Quadrature.of_size(100)
    for theta in ([-0.3, 0.7, 0.2], [1.0, -0.4, -2.0], [0.0, 1.2, 1.5]):
        t = np.array([theta])
        a = evaluate(grouped.patterns, grouped.counts[None], t, quad, np.zeros((1, grouped.counts.size)))
        b = evaluate(per_episode, np.ones((1, 40)), t, quad, np.zeros((1, 40)))
        for got, want in zip(a[:3], b[:3]):
            np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("y", [
    np.tile([0, 0, 1, 1], 20),  # complete separation: every episode diverges exactly at the two lowest formats
    np.tile([0, 0, 1, 1], 20) | np.repeat(np.arange(20) % 2, 4) * np.tile([0, 1, 0, 0], 20),  # quasi-complete
])
def test_separated_data_fit_without_overflow(y):
    import warnings

    from kit.stats import fit_conditional_logit, sweep_bootstrap

    ep, score = np.repeat(np.arange(20), 4), np.tile(np.arange(4), 20)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no overflow warning either
        fit = fit_random_intercept_logit(ep, score, y)
        clogit = fit_conditional_logit(ep, score, y)
        boot = sweep_bootstrap(np.stack([y.reshape(20, 4)] * 3), replicates=20)
    # the slope runs off towards +infinity; its odds ratio and upper bound saturate instead of raising
    assert fit.b1 > 10 and fit.odds_ratio > 1e4 and fit.or_hi == math.inf and fit.lr_p < 1e-10
    assert clogit.b1 > 10 and clogit.or_hi == math.inf
    assert boot.b1_mean > 10 and boot.or_hi > 1e4
    json_ready = fit.to_json()
    assert json_ready["or_hi"] is None  # non-finite values become null in JSON


def test_refits_from_a_far_start_reach_the_same_maximum():
    """Bootstrap refits start at another data set's estimate: from the sd boundary, or from far above it."""
    from kit.stats.glmm import fit_slopes_batch
    from kit.stats.glmm_maximise import maximise_staged
    from kit.stats.quadrature_likelihood import LOG_SD_MIN

    for sd, seed in ((1.4, 14), (1e-9, 15), (0.3, 16)):
        g = group_clusters(*simulate(60, -0.5, 0.8, sd, seed=seed))
        reference = fit_grouped(g, lr_test=False)
        starts = np.array([[0.0, 0.0, LOG_SD_MIN], [-2.0, 2.0, 3.0], [reference.b0, reference.b1, 0.0]])
        counts = np.repeat(g.counts[None], 3, axis=0)
        b1, ok = fit_slopes_batch(g.patterns, counts, starts)
        assert ok.all() and b1 == pytest.approx([reference.b1] * 3, abs=1e-8)
        full = maximise_staged(g.patterns, counts, starts, 100, np.array([True] * 3))
        skipped = maximise_staged(g.patterns, counts, starts, 100, np.array([True] * 3), final_evaluation=False)
        np.testing.assert_allclose(full[0], skipped[0], atol=1e-9)
        assert (reference.sd == 0.0) == (sd < 1e-3)
