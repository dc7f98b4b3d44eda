"""Binomial rate intervals: the Wilson score interval and the exact zero-event upper bound.

The paper (Section III-G) reports Wilson 95% intervals with z = 1.959964; when no event occurs
it can also give the exact one-sided bound 1 - 0.05^(1/n) (the "rule of three" made exact).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kit.stats.inputs import StatsInputError
from kit.stats.result import JsonResult

Z95 = 1.959964
"""Two-sided 95% normal quantile, as the paper rounds it."""


def odds_ratio(log_odds: float) -> float:
    """exp of a log odds ratio (or of an interval end); +inf past the float range, where math.exp
    raises OverflowError (a separated fit's slope and Wald bounds can be that large); NaN stays NaN."""
    return float("inf") if log_odds > 709.0 else math.exp(log_odds)


def _check_counts(k: int, n: int) -> None:
    if n <= 0 or k < 0 or k > n:
        raise StatsInputError(f"invalid binomial counts k={k}, n={n}",
                              "need 0 <= k <= n and n >= 1")


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval (lo, hi) for k events in n trials."""
    _check_counts(k, n)
    p = k / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def zero_event_upper_bound(n: int, alpha: float = 0.05) -> float:
    """Exact one-sided (1 - alpha) upper bound on the rate when 0 of n trials had the event: 1 - alpha^(1/n)."""
    _check_counts(0, n)
    return 1.0 - alpha ** (1.0 / n)


@dataclass(frozen=True)
class RateInterval(JsonResult):
    """A rate k/n with its 95% interval and the rule that produced the interval."""

    rate: float
    lo: float
    hi: float
    k: int
    n: int
    method: str


def rate_interval(k: int, n: int, zero_events: str = "wilson") -> RateInterval:
    """Rate with a 95% interval.

    ``zero_events`` chooses the interval for k == 0 (and, mirrored, k == n): ``"wilson"`` keeps the
    Wilson interval (what the paper's tables and figures show), ``"exact"`` uses the exact bound
    [0, 1 - 0.05^(1/n)] (respectively [0.05^(1/n), 1]).
    """
    _check_counts(k, n)
    if zero_events not in ("wilson", "exact"):
        raise StatsInputError(f"unknown zero_events rule {zero_events!r}", "use 'wilson' or 'exact'")
    if zero_events == "exact" and k == 0:
        return RateInterval(0.0, 0.0, zero_event_upper_bound(n), k, n, "exact-zero-event")
    if zero_events == "exact" and k == n:
        return RateInterval(1.0, 1.0 - zero_event_upper_bound(n), 1.0, k, n, "exact-all-events")
    lo, hi = wilson_interval(k, n)
    return RateInterval(k / n, lo, hi, k, n, "wilson")
