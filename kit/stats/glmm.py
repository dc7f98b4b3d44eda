"""Random-intercept logistic regression (GLMM) for a paired trend across formats.

logit P(y = 1) = b0 + b1 * score + u_episode,  u ~ Normal(0, sd^2), fitted by maximum likelihood
with adaptive Gauss–Hermite quadrature (100 nodes, centred at each cluster pattern's mode), as in
Section III-G of the paper. Reported: slope b1 with its Wald SE and 95% CI, the odds ratio per score
step exp(b1) with CI, the random-intercept SD, and the likelihood-ratio test of b1 = 0.

The numerical work is in :mod:`kit.stats.quadrature_likelihood`; this module groups the rows into
cluster patterns and packages the result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kit.stats.glmm_maximise import maximise_staged
from kit.stats.inputs import StatsInputError, binary_vector, same_length
from kit.stats.intervals import Z95, odds_ratio
from kit.stats.quadrature_likelihood import LOG_SD_MIN, Patterns
from kit.stats.result import JsonResult

DEFAULT_NODES = 100


@dataclass(frozen=True)
class GroupedClusters:
    """Cluster patterns with the number of clusters showing each pattern."""

    patterns: Patterns
    counts: np.ndarray
    n_obs: int
    n_clusters: int


def group_clusters(cluster, score, y) -> GroupedClusters:
    """Group rows by cluster and collapse clusters with identical (score, y) rows into patterns."""
    y = binary_vector(y, "y")
    score = np.asarray(score, dtype=float)
    cluster = np.asarray(cluster)
    same_length(cluster=cluster, score=score, y=y)
    if len(y) == 0:
        raise StatsInputError("no rows to fit", "pass at least one episode with outcomes")
    if not np.all(np.isfinite(score)):
        raise StatsInputError("score contains NaN or infinite values", "give every row a numeric score")
    if y.min() == y.max():
        raise StatsInputError(f"every outcome is {int(y[0])}, so the trend model cannot be fitted",
                              "report the count instead of a slope")
    if np.ptp(score) == 0:
        raise StatsInputError("all rows have the same score, so the slope is not identified",
                              "include at least two formats")
    _, cid = np.unique(cluster, return_inverse=True)
    order = np.lexsort((y, score, cid))
    cid, sc, yy = cid[order], score[order], y[order]
    bounds = np.flatnonzero(np.diff(cid)) + 1
    keys: dict[tuple, int] = {}
    rows: list[tuple] = []
    for xs, ys in zip(np.split(sc, bounds), np.split(yy, bounds)):
        key = tuple(zip(xs.tolist(), ys.tolist()))
        keys[key] = keys.get(key, 0) + 1
        if keys[key] == 1:
            rows.append(key)
    width = max(len(r) for r in rows)
    x = np.zeros((len(rows), width))
    yv = np.zeros((len(rows), width))
    mask = np.zeros((len(rows), width))
    for i, r in enumerate(rows):
        x[i, : len(r)] = [v[0] for v in r]
        yv[i, : len(r)] = [v[1] for v in r]
        mask[i, : len(r)] = 1.0
    counts = np.array([keys[r] for r in rows], dtype=float)
    return GroupedClusters(Patterns(x, yv, mask), counts, len(y), len(bounds) + 1)


@dataclass(frozen=True)
class GlmmFit(JsonResult):
    """Result of a random-intercept logistic fit of y on score."""

    b0: float
    b1: float
    se_b1: float
    b1_lo: float
    b1_hi: float
    odds_ratio: float
    or_lo: float
    or_hi: float
    sd: float
    sd_at_boundary: bool
    log_lik: float
    lr_stat: float | None
    lr_p: float | None
    n_obs: int
    n_clusters: int
    n_patterns: int
    nodes: int
    converged: bool


def start_values(grouped: GroupedClusters) -> np.ndarray:
    """Starting point: b0 at the logit of the overall rate, b1 = 0, sd = 1."""
    pats = grouped.patterns
    events = np.sum(grouped.counts * np.sum(pats.y * pats.mask, axis=1))
    trials = np.sum(grouped.counts * np.sum(pats.mask, axis=1))
    rate = min(max(events / trials, 1e-3), 1 - 1e-3)
    return np.array([math.log(rate / (1 - rate)), 0.0, 0.0])


def slope_standard_error(hess: np.ndarray, at_boundary: bool) -> float:
    """Wald SE of b1 from the observed information; at the sd boundary only (b0, b1) are used."""
    info = -hess[:2, :2] if at_boundary else -hess
    try:
        cov = np.linalg.inv(info)
    except np.linalg.LinAlgError:
        return float("nan")
    return float(math.sqrt(cov[1, 1])) if cov[1, 1] > 0 else float("nan")


def fit_grouped(grouped: GroupedClusters, nodes: int = DEFAULT_NODES, lr_test: bool = True) -> GlmmFit:
    """Fit the model to already grouped clusters (see :func:`group_clusters`)."""
    counts = grouped.counts[None, :]
    start = start_values(grouped)[None, :]
    theta, ll, hess, conv, _ = maximise_staged(grouped.patterns, counts, start, nodes, np.array([True, True, True]))
    theta, ll, hess = theta[0], float(ll[0]), hess[0]
    at_boundary = bool(theta[2] <= LOG_SD_MIN + 1e-9)
    se = slope_standard_error(hess, at_boundary)
    lr_stat = lr_p = None
    converged = bool(conv[0])
    if lr_test:
        null_start = theta.copy()[None, :]
        null_start[0, 1] = 0.0
        null_free = np.array([True, False, True])
        _, ll0, _, conv0, _ = maximise_staged(grouped.patterns, counts, null_start, nodes, null_free)
        lr_stat = max(0.0, 2.0 * (ll - float(ll0[0])))
        from scipy.stats import chi2  # noqa: PLC0415 - here only: the refits (lr_test=False) run without scipy.stats

        lr_p = float(chi2.sf(lr_stat, 1))
        converged = converged and bool(conv0[0])
    b1 = float(theta[1])
    lo, hi = b1 - Z95 * se, b1 + Z95 * se
    return GlmmFit(
        b0=float(theta[0]), b1=b1, se_b1=se, b1_lo=lo, b1_hi=hi, odds_ratio=odds_ratio(b1),
        or_lo=odds_ratio(lo) if math.isfinite(lo) else float("nan"),
        or_hi=odds_ratio(hi) if math.isfinite(hi) else float("nan"),
        sd=0.0 if at_boundary else float(math.exp(theta[2])), sd_at_boundary=at_boundary, log_lik=ll,
        lr_stat=lr_stat, lr_p=lr_p, n_obs=grouped.n_obs, n_clusters=grouped.n_clusters,
        n_patterns=int(grouped.counts.size), nodes=nodes, converged=converged)


def fit_random_intercept_logit(episode, score, y, nodes: int = DEFAULT_NODES, lr_test: bool = True) -> GlmmFit:
    """Random-intercept logistic regression of 0/1 ``y`` on ``score``, clustered by ``episode``.

    E.g. one row per (episode, format) with score F16=0, Q8_0=1, Q4_K_M=2, Q3_K_M=3 and y = path
    divergence. Returns b1 (log odds ratio per score step) with Wald CI, the LR test and the SD.
    """
    return fit_grouped(group_clusters(episode, score, y), nodes=nodes, lr_test=lr_test)


def fit_slopes_batch(patterns: Patterns, counts: np.ndarray, start: np.ndarray,
                     nodes: int = DEFAULT_NODES) -> tuple[np.ndarray, np.ndarray]:
    """Fit many datasets that share ``patterns`` (counts (B, P)); return slopes b1 (B,) and converged (B,).

    Used by bootstraps: resampling clusters changes only how often each pattern occurs.
    """
    counts = np.atleast_2d(np.asarray(counts, dtype=float))
    start = np.broadcast_to(np.asarray(start, dtype=float), (counts.shape[0], 3))
    theta, _, _, conv, _ = maximise_staged(patterns, counts, start, nodes, np.array([True, True, True]),
                                           final_evaluation=False)
    return theta[:, 1], conv
