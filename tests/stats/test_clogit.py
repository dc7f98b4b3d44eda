"""Conditional logit: exact conditional likelihood against brute-force enumeration and statsmodels."""

import itertools
import math

import numpy as np
import pytest
from scipy.optimize import minimize_scalar

from kit.stats import StatsInputError, fit_conditional_logit
from kit.stats.clogit import conditional_loglik, informative_strata


def brute_force_loglik(stratum, score, y, b):
    """log prod over strata of exp(b x.y) / sum over all same-size assignments of exp(b x.s)."""
    total = 0.0
    for s in np.unique(stratum):
        xs, ys = score[stratum == s], y[stratum == s]
        k = int(ys.sum())
        denominator = sum(math.exp(b * sum(xs[list(c)])) for c in itertools.combinations(range(len(xs)), k))
        total += b * float(xs @ ys) - math.log(denominator)
    return total


def tiny_data():
    stratum = np.array([0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 3, 3, 4, 4, 4, 4])
    score = np.array([0, 1, 2, 3, 0, 1, 2, 3, 0, 1.5, 3, 0, 1, 2, 3, 3, 0, 1, 2, 3])
    y = np.array([0, 1, 0, 1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1, 1, 1, 1])
    return stratum, score, y


@pytest.mark.parametrize("b", [-1.0, 0.0, 0.4, 2.5])
def test_loglik_matches_enumeration(b):
    stratum, score, y = tiny_data()
    strata, total = informative_strata(stratum, score, y)
    assert total == 5 and len(strata) == 4  # stratum 4 is all ones
    assert conditional_loglik(strata, b)[0] == pytest.approx(brute_force_loglik(stratum, score, y, b), rel=1e-12)


@pytest.mark.filterwarnings("ignore:Dropped")
def test_fit_maximises_enumerated_likelihood_and_matches_statsmodels():
    from statsmodels.discrete.conditional_models import ConditionalLogit

    rng = np.random.default_rng(1)
    stratum = np.repeat(np.arange(40), 4)
    score = np.tile(np.arange(4.0), 40)
    u = rng.normal(0, 1.5, 40)
    y = (rng.random(160) < 1 / (1 + np.exp(-(-0.5 + 0.7 * score + u[stratum])))).astype(int)
    fit = fit_conditional_logit(stratum, score, y)
    best = minimize_scalar(lambda b: -brute_force_loglik(stratum, score, y, b), bounds=(-5, 5),
                           method="bounded", options={"xatol": 1e-9})
    assert fit.b1 == pytest.approx(best.x, abs=1e-5)
    assert fit.log_lik == pytest.approx(-best.fun, abs=1e-8)
    sm = ConditionalLogit(y, score[:, None], groups=stratum).fit(disp=0)
    assert fit.b1 == pytest.approx(sm.params[0], abs=1e-5)
    assert fit.se_b1 == pytest.approx(sm.bse[0], rel=1e-4)
    changes = sum(0 < y[stratum == s].sum() < 4 for s in range(40))
    assert fit.n_informative == changes and fit.n_strata == 40
    assert fit.or_lo == pytest.approx(math.exp(fit.b1 - 1.959964 * fit.se_b1))


def test_no_informative_stratum_raises():
    with pytest.raises(StatsInputError):
        fit_conditional_logit([0, 0, 1, 1], [0, 1, 0, 1], [1, 1, 0, 0])
