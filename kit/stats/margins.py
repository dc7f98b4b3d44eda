"""Per-episode summaries of position-level values compared across groups (formats), with an
episode bootstrap: e.g. mean |delta margin| between paths, or the share of near-tie positions.

Each group's value is the mean over episodes of the per-episode mean ("averaged over episodes").
Ratios to a reference group resample episodes jointly across groups (paired by episode).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kit.stats.cluster_bootstrap import (
    DEFAULT_REPLICATES,
    DEFAULT_SEED,
    cluster_weights,
    percentile_interval,
)
from kit.stats.inputs import StatsInputError, same_length
from kit.stats.result import JsonResult


@dataclass(frozen=True)
class GroupSummary(JsonResult):
    """One group's episode-averaged mean with CI, position-level median, and ratio to the reference."""

    group: str
    n_positions: int
    n_episodes: int
    median: float
    mean: float
    ci_lo: float
    ci_hi: float
    ratio_to_reference: float
    ratio_lo: float
    ratio_hi: float


@dataclass(frozen=True)
class GroupComparison(JsonResult):
    """Episode-averaged means for each group relative to a reference group."""

    reference: str
    groups: tuple[GroupSummary, ...]
    replicates: int
    seed: int


def episode_mean_table(values, episode, group, groups=None) -> tuple[np.ndarray, list, np.ndarray]:
    """(episodes x groups) table of per-episode means (NaN where an episode has no position in a group).

    Returns the table, the group labels (columns, in ``groups`` order if given) and the episode ids.
    The table is what :func:`kit.stats.trend.page_trend` takes.
    """
    v = np.asarray(values, dtype=float)
    ep = np.asarray(episode)
    gr = np.asarray(group).astype(str)
    same_length(values=v, episode=ep, group=gr)
    if np.any(~np.isfinite(v)):
        raise StatsInputError("values contain NaN or infinite entries", "drop positions without a value")
    labels = [str(g) for g in groups] if groups is not None else sorted(set(gr.tolist()))
    col = {g: i for i, g in enumerate(labels)}
    unknown = set(gr.tolist()) - set(labels)
    if unknown:
        raise StatsInputError(f"groups {sorted(unknown)} are not in the group order", "list every group")
    episodes, eid = np.unique(ep, return_inverse=True)
    gid = np.array([col[g] for g in gr], dtype=int)
    sums = np.zeros((len(episodes), len(labels)))
    counts = np.zeros_like(sums)
    np.add.at(sums, (eid, gid), v)
    np.add.at(counts, (eid, gid), 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts, labels, episodes


def compare_episode_means(values, episode, group, reference: str, groups=None,
                          replicates: int = DEFAULT_REPLICATES, seed: int = DEFAULT_SEED) -> GroupComparison:
    """Episode-averaged mean of ``values`` per group, with episode-bootstrap CIs and ratios to ``reference``.

    For mean |delta margin| pass ``np.abs(delta)``; for the near-tie share pass ``margin < 0.1``.
    """
    table, labels, _ = episode_mean_table(values, episode, group, groups)
    if str(reference) not in labels:
        raise StatsInputError(f"reference group {reference!r} has no positions", f"choose one of {labels}")
    ref = labels.index(str(reference))
    present = np.isfinite(table)
    filled = np.where(present, table, 0.0)
    weights = cluster_weights(table.shape[0], replicates, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        rep_means = (weights @ filled) / (weights @ present)
    point = np.nanmean(table, axis=0)
    v = np.asarray(values, dtype=float)
    gr = np.asarray(group).astype(str)
    summaries = []
    for j, label in enumerate(labels):
        in_group = v[gr == label]
        lo, hi = percentile_interval(rep_means[:, j])
        rlo, rhi = percentile_interval(rep_means[:, j] / rep_means[:, ref])
        summaries.append(GroupSummary(label, int(in_group.size), int(present[:, j].sum()),
                                      float(np.median(in_group)) if in_group.size else float("nan"),
                                      float(point[j]), lo, hi, float(point[j] / point[ref]), rlo, rhi))
    return GroupComparison(str(reference), tuple(summaries), replicates, seed)
