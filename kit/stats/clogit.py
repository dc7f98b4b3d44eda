"""Conditional logistic regression stratified by episode, by exact conditional maximum likelihood.

Within a stratum (episode) with rows j, scores x_j and k = sum_j y_j events, the conditional
probability of the observed outcome given k is

    exp(b * sum_j x_j y_j) / sum over all size-k subsets S of exp(b * sum_{j in S} x_j).

The denominator is the elementary symmetric polynomial e_k(z) of z_j = exp(b x_j); it and its first
two derivatives in b are built row by row (e_k <- e_k + z e_{k-1}). Strata with k = 0, k = n, or a
constant score carry no information about b and drop out; their number is reported. The slope b
is found by Newton's method on this one-parameter concave likelihood; the Wald interval uses the
observed conditional information.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kit.stats.inputs import StatsInputError, binary_vector, same_length
from kit.stats.intervals import Z95, odds_ratio
from kit.stats.result import JsonResult


@dataclass(frozen=True)
class ConditionalLogitFit(JsonResult):
    """Conditional-likelihood slope per score step, odds ratio with Wald CI, informative strata."""

    b1: float
    se_b1: float
    b1_lo: float
    b1_hi: float
    odds_ratio: float
    or_lo: float
    or_hi: float
    log_lik: float
    n_informative: int
    n_strata: int
    converged: bool


def stratum_terms(x: np.ndarray, k: int, b: float) -> tuple[float, float, float]:
    """log e_k(exp(b x)) and its first and second derivatives in b, for one stratum.

    Scores are centred within the stratum first (which shifts the log by a constant k*b*mean,
    added back) so that exp(b x) stays in range.
    """
    centre = float(np.mean(x))
    xc = x - centre
    e0 = np.zeros(k + 1)
    e1 = np.zeros(k + 1)
    e2 = np.zeros(k + 1)
    e0[0] = 1.0
    for xj in xc:
        z = math.exp(b * xj)
        # update from high to low order so each row is used at most once per subset
        e2[1:] = e2[1:] + z * (xj * xj * e0[:-1] + 2 * xj * e1[:-1] + e2[:-1])
        e1[1:] = e1[1:] + z * (xj * e0[:-1] + e1[:-1])
        e0[1:] = e0[1:] + z * e0[:-1]
    d0, d1, d2 = e0[k], e1[k], e2[k]
    log_denominator = math.log(d0) + k * b * centre
    mean = d1 / d0 + k * centre
    var = d2 / d0 - (d1 / d0) ** 2
    return log_denominator, mean, var


def conditional_loglik(strata: list[tuple[np.ndarray, int, float]], b: float) -> tuple[float, float, float]:
    """Conditional log-likelihood, score and information at slope b for (scores, k, sum x*y) strata."""
    ll = score = info = 0.0
    for x, k, t in strata:
        log_den, mean, var = stratum_terms(x, k, b)
        ll += b * t - log_den
        score += t - mean
        info += var
    return ll, score, info


def informative_strata(stratum, score, y) -> tuple[list[tuple[np.ndarray, int, float]], int]:
    """Split rows into strata; keep those with mixed outcomes and varying score. Returns (kept, total)."""
    y = binary_vector(y, "y")
    x = np.asarray(score, dtype=float)
    stratum = np.asarray(stratum)
    same_length(stratum=stratum, score=x, y=y)
    _, sid = np.unique(stratum, return_inverse=True)
    order = np.argsort(sid, kind="stable")
    bounds = np.flatnonzero(np.diff(sid[order])) + 1
    kept = []
    groups = np.split(order, bounds) if len(order) else []
    for rows in groups:
        xs, ys = x[rows], y[rows]
        k = int(ys.sum())
        if 0 < k < len(rows) and np.ptp(xs) > 0:
            kept.append((xs, k, float(np.dot(xs, ys))))
    return kept, len(groups)


def fit_conditional_logit(stratum, score, y, max_iter: int = 100, tol: float = 1e-10) -> ConditionalLogitFit:
    """Conditional logistic regression of 0/1 ``y`` on ``score`` stratified by ``stratum`` (episode)."""
    strata, total = informative_strata(stratum, score, y)
    if not strata:
        raise StatsInputError("no stratum has both outcomes at different scores",
                              "the conditional model needs episodes whose status differs across formats")
    b, converged = 0.0, False
    ll, grad, info = conditional_loglik(strata, b)
    for _ in range(max_iter):
        step = grad / info if info > 0 else 0.0
        step = max(-2.0, min(2.0, step))
        for _ in range(50):
            new_ll, new_grad, new_info = conditional_loglik(strata, b + step)
            if new_ll >= ll - 1e-12 * max(1.0, abs(ll)):
                break
            step /= 2.0
        b, ll, grad, info = b + step, new_ll, new_grad, new_info
        if abs(step) < tol or abs(grad) < tol:
            converged = True
            break
    se = 1.0 / math.sqrt(info) if info > 0 else float("nan")
    lo, hi = b - Z95 * se, b + Z95 * se
    return ConditionalLogitFit(b1=b, se_b1=se, b1_lo=lo, b1_hi=hi, odds_ratio=odds_ratio(b),
                               or_lo=odds_ratio(lo), or_hi=odds_ratio(hi), log_lik=ll,
                               n_informative=len(strata), n_strata=total, converged=converged)
