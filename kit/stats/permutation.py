"""Exact within-episode permutation trend test, null distribution by convolution over episodes.

Data are an (episodes x formats) table of divergence counts: 0/1 in the grid (one pass per format),
or, in the replicated sweep, each episode's divergences summed over histories. Formats have integer
ranks r_f (F16=0, Q8_0=1, Q4_K_M=2, Q3_K_M=3). The statistic is T = sum_e sum_f r_f * c[e, f], the
sum of format ranks over all observed divergences.

Under the null the format labels are exchangeable within each episode: every one of the F!
permutations of an episode's row is equally likely, independently across episodes. The exact null
of T is the convolution of the per-episode distributions (each from all F! permutations). In the
sweep one permutation per episode is shared by all histories; since T is linear in the counts this is
the same test applied to the counts summed over histories (see :func:`sweep_permutation_test`).
Shifting the ranks by a constant (0..3 vs 1..4) shifts T by a constant and leaves p unchanged.

Two-sided p is P(|T - E T| >= |t - E T|) under the exact null (with a small tolerance for ties);
one-sided variants are available.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from kit.stats.inputs import StatsInputError, integer_scores
from kit.stats.result import JsonResult

MAX_FORMATS = 8


@dataclass(frozen=True)
class PermutationTrendResult(JsonResult):
    """Observed statistic, its exact null mean and SD, and the exact p-value."""

    statistic: int
    null_mean: float
    null_sd: float
    p: float
    alternative: str
    n_episodes: int
    n_informative: int


def episode_null(counts_row: np.ndarray, ranks: np.ndarray) -> tuple[int, np.ndarray]:
    """Exact null of sum_f ranks[f] * counts_row[perm(f)] over all F! permutations: (lowest value, pmf)."""
    perms = np.array(list(itertools.permutations(range(len(ranks)))))
    values = counts_row[perms] @ ranks
    pmf = np.bincount(values - values.min(), minlength=1).astype(float) / len(perms)
    return values.min(), pmf


def null_distribution(table: np.ndarray, ranks: np.ndarray) -> tuple[int, np.ndarray]:
    """Exact null of T for an (episodes x formats) count table: (offset, pmf) with pmf[i] = P(T = offset + i)."""
    offset = 0
    pmf = np.ones(1)
    for row in table:
        low, episode_pmf = episode_null(row, ranks)
        offset += int(low)
        if episode_pmf.size > 1:  # an episode with equal counts in all formats only shifts T
            pmf = np.convolve(pmf, episode_pmf)
    return offset, pmf


def _check_table(table, ranks) -> tuple[np.ndarray, np.ndarray]:
    t = np.asarray(table)
    if t.ndim != 2:
        raise StatsInputError(f"expected an (episodes x formats) table, got shape {t.shape}",
                              "pass one row per episode and one column per format")
    if not np.all(np.isfinite(t)) or np.any(t < 0):
        raise StatsInputError("the divergence table has missing or negative entries",
                              "every episode needs a non-negative count for every format")
    t = integer_scores(t, "divergence counts")
    r = integer_scores(ranks, "format ranks")
    if r.shape != (t.shape[1],):
        raise StatsInputError(f"{len(r)} ranks for {t.shape[1]} formats", "give one rank per format column")
    if t.shape[1] > MAX_FORMATS:
        raise StatsInputError(f"{t.shape[1]} formats is too many for exact enumeration",
                              f"use at most {MAX_FORMATS} formats")
    return t, r


def permutation_trend_test(table, ranks=None, alternative: str = "two-sided") -> PermutationTrendResult:
    """Exact within-episode permutation test of a trend over ordered formats (grid version).

    ``table[e, f]`` is the divergence indicator (or count) of episode e under format f; ``ranks``
    default to 0..F-1 in column order. ``alternative``: "two-sided", "greater" (divergence rises with
    rank) or "less".
    """
    t, r = _check_table(table, np.arange(np.asarray(table).shape[-1]) if ranks is None else ranks)
    if alternative not in ("two-sided", "greater", "less"):
        raise StatsInputError(f"unknown alternative {alternative!r}", "use 'two-sided', 'greater' or 'less'")
    observed = int(np.sum(t @ r))
    offset, pmf = null_distribution(t, r)
    support = offset + np.arange(pmf.size)
    mean = float(np.dot(support, pmf))
    sd = float(np.sqrt(max(0.0, np.dot((support - mean) ** 2, pmf))))
    eps = 1e-9 * max(1.0, abs(mean))
    if alternative == "greater":
        p = float(pmf[support >= observed - eps].sum())
    elif alternative == "less":
        p = float(pmf[support <= observed + eps].sum())
    else:
        p = float(pmf[np.abs(support - mean) >= abs(observed - mean) - eps].sum())
    informative = int(np.sum(np.ptp(t, axis=1) > 0))
    return PermutationTrendResult(observed, mean, sd, min(1.0, p), alternative, int(t.shape[0]), informative)


def sweep_permutation_test(cube, ranks=None, alternative: str = "two-sided") -> PermutationTrendResult:
    """Sweep version: ``cube[h, e, f]`` over histories; one shared format permutation per episode.

    The episode stays the unit: its counts are summed over histories and formats are permuted within
    the episode, never treating an episode's histories as independent.
    """
    c = np.asarray(cube)
    if c.ndim != 3:
        raise StatsInputError(f"expected a (histories x episodes x formats) array, got shape {c.shape}",
                              "stack one (episodes x formats) table per history")
    return permutation_trend_test(c.sum(axis=0), ranks, alternative)
