"""Two-way bootstrap for the replicated sweep: episodes and histories resampled independently.

Data are a (histories x episodes x formats) 0/1 cube of path divergence; every history ran every
episode under every format, so formats are paired on episode and history. Each replicate draws H
histories and E episodes with replacement, independently (the crossed-factor design the paper cites),
and recomputes on the sub-cube:

* the divergence rate per format and the paired difference from a reference format;
* the rate slope: least-squares slope of the format rates on the format scores (points per step);
* optionally the random-intercept logistic slope b1, refitted in every drawn history and averaged
  over the drawn histories (with multiplicity) — the paper's 2,000-refit interval for the odds ratio.

A single-history grid is the case H = 1 (pass ``table[None]``): resampling the one history changes
nothing, so this is then the bootstrap that resamples episodes jointly across the formats (the
paper's "13.8 points per step" for the production-default grid; use ``glmm=False`` there since the
grid's GLMM interval is the Wald one from :func:`kit.stats.fit_random_intercept_logit`).

Percentile 95% intervals. Replicates whose GLMM fit failed to converge are left out of the slope
interval and counted. Random draws: ``numpy.random.default_rng(seed)``, histories first
(replicates x H), then episodes (replicates x E).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kit.stats.cluster_bootstrap import percentile_interval
from kit.stats.glmm import fit_grouped, fit_slopes_batch, group_clusters
from kit.stats.inputs import StatsInputError
from kit.stats.intervals import odds_ratio
from kit.stats.quadrature_likelihood import LOG_SD_MIN, Patterns
from kit.stats.result import JsonResult

DEFAULT_SEED = 20261007
DEFAULT_REPLICATES = 2000
BATCH = 256


@dataclass(frozen=True)
class FormatRate(JsonResult):
    """One format: pooled rate with CI, between-history spread, and the paired difference from the reference."""

    label: str
    score: float
    rate: float
    lo: float
    hi: float
    history_sd: float
    history_min: float
    history_max: float
    diff: float
    diff_lo: float
    diff_hi: float
    histories_above_reference: int


@dataclass(frozen=True)
class TwoWayBootstrap(JsonResult):
    """Rates per format, rate slope per step, and the history-averaged GLMM slope with two-way intervals."""

    formats: tuple[FormatRate, ...]
    reference: str
    rate_slope: float
    rate_slope_lo: float
    rate_slope_hi: float
    b1_mean: float | None
    b1_lo: float | None
    b1_hi: float | None
    odds_ratio: float | None
    or_lo: float | None
    or_hi: float | None
    b1_per_history: tuple[float, ...]
    n_histories: int
    n_episodes: int
    replicates: int
    failed_fits: int
    seed: int


def least_squares_slope(rates: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Slope of rates (..., F) on scores (F,) by ordinary least squares."""
    sc = scores - scores.mean()
    return (rates - rates.mean(axis=-1, keepdims=True)) @ sc / np.dot(sc, sc)


def _history_patterns(rows: np.ndarray, scores: np.ndarray) -> tuple[Patterns, np.ndarray]:
    """The distinct per-episode outcome rows (episodes x formats) of one history, and each episode's pattern id."""
    distinct, pid = np.unique(rows, axis=0, return_inverse=True)
    patterns = Patterns(np.tile(scores, (distinct.shape[0], 1)).astype(float), distinct.astype(float),
                        np.ones(distinct.shape))
    return patterns, pid.ravel()


def history_refits(rows: np.ndarray, scores: np.ndarray, weights: np.ndarray, nodes: int):
    """One history's GLMM slope, and its refits under episode weights (n, E): slopes (n,), converged (n,).

    A refit sees only this history's episode patterns, reweighted by the replicate's episode draw; refits
    are batched and start from the history's full-data estimate.
    """
    e = rows.shape[0]
    fit = fit_grouped(group_clusters(np.repeat(np.arange(e), len(scores)), np.tile(scores, e), rows.ravel()),
                      nodes=nodes, lr_test=False)
    start = np.array([fit.b0, fit.b1, LOG_SD_MIN if fit.sd_at_boundary else math.log(fit.sd)])
    patterns, pid = _history_patterns(rows, scores)
    onehot = np.zeros((e, patterns.x.shape[0]))
    onehot[np.arange(e), pid] = 1.0
    slopes, converged = np.empty(weights.shape[0]), np.empty(weights.shape[0], dtype=bool)
    for i in range(0, weights.shape[0], BATCH):
        chunk = slice(i, i + BATCH)
        slopes[chunk], converged[chunk] = fit_slopes_batch(patterns, weights[chunk] @ onehot, start, nodes=nodes)
    return fit.b1, slopes, converged


def _glmm_replicates(cube, scores, hist_draws, ep_weights, nodes, mapper=None):
    """Average GLMM slope over the drawn histories for every replicate; NaN where a fit failed."""
    h = cube.shape[0]
    replicates = hist_draws.shape[0]
    drawn = [np.flatnonzero((hist_draws == k).any(axis=1)) for k in range(h)]
    jobs = [(cube[k], scores, ep_weights[drawn[k]], nodes) for k in range(h)]
    results = list((mapper or _serial_map)(history_refits, jobs))
    slopes = np.full((replicates, h), np.nan)
    failed = 0
    for k, (_, b1, ok) in enumerate(results):
        slopes[drawn[k], k] = np.where(ok, b1, np.nan)
        failed += int((~ok).sum())
    averaged = np.array([np.mean(slopes[r, hist_draws[r]]) for r in range(replicates)])
    return np.array([b for b, _, _ in results]), averaged, failed


def _serial_map(fn, items):
    return [fn(*item) for item in items]


def sweep_bootstrap(cube, scores=None, labels=None, reference: int = 0, replicates: int = DEFAULT_REPLICATES,
                     seed: int = DEFAULT_SEED, glmm: bool = True, nodes: int = 100, mapper=None) -> TwoWayBootstrap:
    """Two-way (episodes x histories) bootstrap of per-format rates, differences, rate slope and GLMM slope.

    ``cube[h, e, f]``: 1 if episode e diverged under format f in history h. ``scores`` default to
    0..F-1 (F16, Q8_0, Q4_K_M, Q3_K_M); ``reference`` is the column index of the reference format.
    ``mapper(fn, [args, ...])`` runs the per-history GLMM refits (:func:`history_refits`; default: one
    after the other here) and may spread them over processes: the result does not depend on it.
    """
    y = np.asarray(cube)
    if y.ndim != 3 or min(y.shape) == 0:
        raise StatsInputError(f"expected a non-empty (histories x episodes x formats) cube, got shape {y.shape}",
                              "stack one (episodes x formats) 0/1 table per history")
    if not np.isin(y, (0, 1)).all():
        raise StatsInputError("the divergence cube must hold only 0/1", "mark each episode 1 if it diverged")
    y = y.astype(float)
    h, e, f = y.shape
    sc = np.arange(f, dtype=float) if scores is None else np.asarray(scores, dtype=float)
    names = [str(v) for v in (labels if labels is not None else range(f))]
    if sc.shape != (f,) or len(names) != f or not 0 <= reference < f:
        raise StatsInputError("scores, labels and reference must match the format axis",
                              f"give {f} scores and labels and a reference index below {f}")
    rng = np.random.default_rng(seed)
    hist_draws = rng.integers(0, h, size=(replicates, h))
    ep_draws = rng.integers(0, e, size=(replicates, e))
    hist_w = np.zeros((replicates, h))
    ep_w = np.zeros((replicates, e))
    np.add.at(hist_w, (np.repeat(np.arange(replicates), h), hist_draws.ravel()), 1.0)
    np.add.at(ep_w, (np.repeat(np.arange(replicates), e), ep_draws.ravel()), 1.0)
    rep_rates = np.einsum("rh,hef,re->rf", hist_w, y, ep_w) / (h * e)
    rates = y.mean(axis=(0, 1))
    per_history = y.mean(axis=1)  # (H, F)
    formats = []
    for j in range(f):
        lo, hi = percentile_interval(rep_rates[:, j])
        dlo, dhi = percentile_interval(rep_rates[:, j] - rep_rates[:, reference])
        formats.append(FormatRate(
            names[j], float(sc[j]), float(rates[j]), lo, hi,
            float(per_history[:, j].std(ddof=1)) if h > 1 else float("nan"),
            float(per_history[:, j].min()), float(per_history[:, j].max()),
            float(rates[j] - rates[reference]), dlo, dhi,
            int(np.sum(per_history[:, j] > per_history[:, reference]))))
    slope_lo, slope_hi = percentile_interval(least_squares_slope(rep_rates, sc))
    b1_mean = b1_lo = b1_hi = None
    b1_hist: tuple[float, ...] = ()
    failed = 0
    if glmm:
        per_hist_b1, averaged, failed = _glmm_replicates(y, sc, hist_draws, ep_w, nodes, mapper)
        b1_hist = tuple(float(b) for b in per_hist_b1)
        b1_mean = float(per_hist_b1.mean())
        b1_lo, b1_hi = percentile_interval(averaged)
    return TwoWayBootstrap(
        formats=tuple(formats), reference=names[reference],
        rate_slope=float(least_squares_slope(rates, sc)), rate_slope_lo=slope_lo, rate_slope_hi=slope_hi,
        b1_mean=b1_mean, b1_lo=b1_lo, b1_hi=b1_hi,
        odds_ratio=None if b1_mean is None else odds_ratio(b1_mean),
        or_lo=None if b1_lo is None else odds_ratio(b1_lo), or_hi=None if b1_hi is None else odds_ratio(b1_hi),
        b1_per_history=b1_hist, n_histories=h, n_episodes=e, replicates=replicates, failed_fits=failed, seed=seed)
