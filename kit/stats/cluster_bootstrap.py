"""Bootstrap over clusters (episodes or problems): resample whole clusters with replacement.

Statistics that are ratios of sums over clusters (rates, means) are computed from per-cluster
totals, so a replicate is just a weighted sum: replicate weights are multinomial counts of how often
each cluster was drawn. Percentile 95% intervals.
"""

from __future__ import annotations

import numpy as np

DEFAULT_SEED = 20261007
DEFAULT_REPLICATES = 2000


def cluster_weights(n_clusters: int, replicates: int, seed: int) -> np.ndarray:
    """(replicates x n_clusters) draw counts of a cluster bootstrap (each row sums to n_clusters)."""
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, n_clusters, size=(replicates, n_clusters))
    weights = np.zeros((replicates, n_clusters))
    np.add.at(weights, (np.repeat(np.arange(replicates), n_clusters), draws.ravel()), 1.0)
    return weights


def percentile_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of bootstrap replicates, ignoring undefined (NaN) replicates."""
    tail = 100 * (1 - level) / 2
    finite = np.asarray(values, dtype=float)
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return float("nan"), float("nan")
    lo, hi = np.percentile(finite, [tail, 100 - tail])
    return float(lo), float(hi)


def ratio_of_sums_replicates(numerators: np.ndarray, denominators: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Replicates of sum(num) / sum(den) for per-cluster columns; shape (replicates, ...)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (weights @ numerators) / (weights @ denominators)
