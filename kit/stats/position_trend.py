"""Exact permutation test of a trend in event positions: do events cluster early or late in a run?

Data are n 0/1 indicators in execution order (e.g. which episodes diverged) and an integer score per
position (by default the quartile of execution order, 1..4). The statistic is T = sum_i score_i * y_i.
Under the null every placement of the k events among the n positions is equally likely (all C(n, k)
subsets), which is the permutation null conditional on k. Its exact distribution is counted by dynamic
programming over the distinct score values: choosing i of the m positions that share score v adds i*v
to T in C(m, i) ways. Counts are exact integers; p-values are ratios of them.

Two-sided p is P(|T - E T| >= |t - E T|); "less" (events concentrated at low scores, i.e. early) and
"greater" are the one-sided variants. Shifting all scores by a constant shifts T by k times it and
leaves p unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from math import comb

import numpy as np

from kit.stats.inputs import StatsInputError, binary_vector, integer_scores
from kit.stats.result import JsonResult

ALTERNATIVES = ("two-sided", "less", "greater")


@dataclass(frozen=True)
class PositionTrendResult(JsonResult):
    """Observed statistic, its exact null mean and SD, exact p-values, and the events per score group."""

    statistic: int
    null_mean: float
    null_sd: float
    p: float  # for `alternative`
    p_two_sided: float
    p_less: float  # events concentrated at low scores (early in the run, for position quartiles)
    p_greater: float
    alternative: str
    n: int
    k: int
    groups: list[int]  # the distinct scores, ascending
    events_per_group: list[int]
    positions_per_group: list[int]


def quartile_scores(n: int, groups: int = 4) -> np.ndarray:
    """Score of each of n positions in execution order: the quarter (1..groups) its position falls in,
    position i (0-based) in group floor(groups * i / n) + 1 (80 positions: 20 per quartile)."""
    if n < 0 or groups < 1:
        raise StatsInputError(f"cannot split {n} positions into {groups} groups", "need n >= 0 and groups >= 1")
    return np.array([groups * i // n + 1 for i in range(n)], dtype=int)


def subset_sum_counts(scores, k: int) -> dict[int, int]:
    """For every value t, the number of k-subsets of positions whose scores sum to t (exact integers)."""
    s = integer_scores(scores, "position scores")
    if not 0 <= k <= s.size:
        raise StatsInputError(f"{k} events among {s.size} positions", "need 0 <= k <= n")
    values, sizes = np.unique(s, return_counts=True)
    # ways[j][t]: subsets of j positions among the groups seen so far with score sum t
    ways: list[dict[int, int]] = [{0: 1}] + [{} for _ in range(k)]
    for value, size in zip(values.tolist(), sizes.tolist()):
        new: list[dict[int, int]] = [{} for _ in range(k + 1)]
        for j, row in enumerate(ways):
            for total, count in row.items():
                for i in range(min(size, k - j) + 1):
                    key = total + i * value
                    new[j + i][key] = new[j + i].get(key, 0) + count * comb(size, i)
        ways = new
    return dict(sorted(ways[k].items()))


def position_trend_test(indicators, scores=None, alternative: str = "two-sided") -> PositionTrendResult:
    """Exact test that the events in ``indicators`` (0/1 in execution order) trend with ``scores``
    (default: quartiles of execution order, 1..4); the null places the k events uniformly at random."""
    y = binary_vector(indicators, "event indicators")
    s = quartile_scores(y.size) if scores is None else integer_scores(scores, "position scores")
    if s.shape != y.shape:
        raise StatsInputError(f"{s.size} scores for {y.size} positions", "give one score per position")
    if alternative not in ALTERNATIVES:
        raise StatsInputError(f"unknown alternative {alternative!r}", "use 'two-sided', 'less' or 'greater'")
    k = int(y.sum())
    counts = subset_sum_counts(s, k)
    total = comb(y.size, k)
    observed = int(np.dot(s, y))
    mean = Fraction(sum(t * c for t, c in counts.items()), total)
    variance = Fraction(sum((t - mean) ** 2 * c for t, c in counts.items()), total)
    distance = abs(observed - mean)
    p = {"two-sided": sum(c for t, c in counts.items() if abs(t - mean) >= distance),
         "less": sum(c for t, c in counts.items() if t <= observed),
         "greater": sum(c for t, c in counts.items() if t >= observed)}
    groups = sorted(set(s.tolist()))
    return PositionTrendResult(
        observed, float(mean), float(variance) ** 0.5, float(Fraction(p[alternative], total)),
        float(Fraction(p["two-sided"], total)), float(Fraction(p["less"], total)),
        float(Fraction(p["greater"], total)), alternative, int(y.size), k, groups,
        [int(y[s == g].sum()) for g in groups], [int((s == g).sum()) for g in groups])
