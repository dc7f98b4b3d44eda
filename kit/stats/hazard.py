"""Flip hazard by top-2 logit margin: share of positions whose token flips on the cache-hit path,
binned by the recompute path's top-two margin, with an episode-cluster bootstrap interval.

Bins follow the paper's fine binning (Section IV-D): [0,.01) [.01,.03) [.03,.1) [.1,.3) [.3,1) [1,3) [3,inf).
Positions are clustered in episodes, so the interval resamples whole episodes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kit.stats.cluster_bootstrap import (
    DEFAULT_REPLICATES,
    DEFAULT_SEED,
    cluster_weights,
    percentile_interval,
    ratio_of_sums_replicates,
)
from kit.stats.inputs import StatsInputError, binary_vector, same_length
from kit.stats.result import JsonResult

MARGIN_EDGES = (0.0, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, float("inf"))


@dataclass(frozen=True)
class HazardBin(JsonResult):
    """One margin bin [lo, hi): positions, flips, flip share and its episode-bootstrap 95% interval."""

    lo: float
    hi: float
    positions: int
    flips: int
    hazard: float
    ci_lo: float
    ci_hi: float


@dataclass(frozen=True)
class FlipHazard(JsonResult):
    """Flip hazard in each margin bin, with the bootstrap settings used (an infinite edge is JSON null)."""

    bins: tuple[HazardBin, ...]
    n_episodes: int
    replicates: int
    seed: int


def per_cluster_bin_totals(cluster_index: np.ndarray, bin_index: np.ndarray, values: np.ndarray,
                           n_clusters: int, n_bins: int) -> np.ndarray:
    """(clusters x bins) sums of ``values``."""
    totals = np.zeros((n_clusters, n_bins))
    np.add.at(totals, (cluster_index, bin_index), values)
    return totals


def flip_hazard_by_margin(margin, flipped, episode, edges=MARGIN_EDGES, replicates: int = DEFAULT_REPLICATES,
                          seed: int = DEFAULT_SEED) -> FlipHazard:
    """Flip share per margin bin with an episode-cluster bootstrap 95% interval.

    ``margin``: recompute-path top-two logit margin at each position (>= 0); ``flipped``: 1 if the
    cache-hit path emitted a different token there; ``episode``: the position's episode id.
    A bin's upper edge is exclusive; ``inf`` as the last edge keeps every large margin.
    """
    m = np.asarray(margin, dtype=float)
    f = binary_vector(flipped, "flipped")
    ep = np.asarray(episode)
    same_length(margin=m, flipped=f, episode=ep)
    if np.any(np.isnan(m)) or np.any(m < 0):
        raise StatsInputError("margins must be non-negative numbers", "pass top-1 minus top-2 logit (>= 0)")
    edges = np.asarray(edges, dtype=float)
    if np.any(np.diff(edges) <= 0):
        raise StatsInputError("margin bin edges must increase", "pass sorted, distinct edges")
    inside = ((m >= edges[0]) & (m < edges[-1])) | (np.isinf(edges[-1]) & np.isinf(m))
    n_bins = len(edges) - 1
    bin_index = np.clip(np.searchsorted(edges, m, side="right") - 1, 0, n_bins - 1)
    _, cid = np.unique(ep, return_inverse=True)
    n_clusters = int(cid.max()) + 1 if cid.size else 0
    keep = inside
    positions = per_cluster_bin_totals(cid[keep], bin_index[keep], np.ones(keep.sum()), n_clusters, n_bins)
    flips = per_cluster_bin_totals(cid[keep], bin_index[keep], f[keep].astype(float), n_clusters, n_bins)
    weights = cluster_weights(n_clusters, replicates, seed)
    reps = ratio_of_sums_replicates(flips, positions, weights)
    bins = []
    for b in range(n_bins):
        n_pos, n_flip = int(positions[:, b].sum()), int(flips[:, b].sum())
        lo, hi = percentile_interval(reps[:, b]) if n_pos else (float("nan"), float("nan"))
        bins.append(HazardBin(float(edges[b]), float(edges[b + 1]), n_pos, n_flip,
                              n_flip / n_pos if n_pos else float("nan"), lo, hi))
    return FlipHazard(tuple(bins), n_clusters, replicates, seed)
