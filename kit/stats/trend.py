"""Page's trend test across ordered formats on per-episode summaries (episodes are the blocks).

A thin wrapper over ``scipy.stats.page_trend_test``: rows are episodes, columns formats in their
predicted increasing order (e.g. per-episode share of near-tie positions, or mean |delta margin|).
Episodes missing a value for some format are dropped, and their number reported.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import page_trend_test

from kit.stats.inputs import StatsInputError
from kit.stats.result import JsonResult


@dataclass(frozen=True)
class PageTrendResult(JsonResult):
    """Page's L statistic, its one-sided p for an increase across the columns, and the blocks used."""

    statistic: float
    p: float
    method: str
    n_blocks: int
    n_dropped: int
    n_formats: int


def page_trend(table, method: str = "auto") -> PageTrendResult:
    """Page's test for an increase across the columns of an (episodes x formats) table of summaries."""
    t = np.asarray(table, dtype=float)
    if t.ndim != 2 or t.shape[1] < 3:
        raise StatsInputError(f"Page's test needs an (episodes x formats) table with at least 3 formats, "
                              f"got shape {t.shape}", "pass one row per episode, one column per format")
    complete = np.all(np.isfinite(t), axis=1)
    kept = t[complete]
    if kept.shape[0] < 2:
        raise StatsInputError("fewer than 2 episodes have a value for every format",
                              "Page's test needs at least 2 complete episodes")
    res = page_trend_test(kept, method=method)
    return PageTrendResult(float(res.statistic), float(res.pvalue), str(res.method), int(kept.shape[0]),
                           int((~complete).sum()), int(t.shape[1]))
