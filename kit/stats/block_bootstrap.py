"""Dependence-aware interval for a single-pass rate: circular block bootstrap of 0/1 episode indicators.

Episodes in one pass run in sequence against one server, so their divergence indicators may be
serially dependent. Following Section III-G of the paper (and REFERENCE.md §4):

* the indicators are resampled in execution order with the circular block bootstrap (blocks wrap
  around the end), 10,000 replicates, seed 20261007, percentile 95% interval;
* the block length is ``max(floor, ceil(b_PW))`` where ``b_PW`` is the Politis–White automatic
  estimate for the circular bootstrap (with the Patton–Politis–White correction) as computed by
  ``arch.bootstrap.optimal_block_length`` (column ``"circular"``);
* the reported interval is the envelope ``[min(cbb_lo, wilson_lo), max(cbb_hi, wilson_hi)]``, so
  allowing for dependence can widen the Wilson interval but never narrow it.

On the floor: REFERENCE.md gives ``ceil(n ** (1/3))`` (5 for n = 80), the paper's text says
"floored at five episodes". The two agree for 65 <= n <= 125. The default here is the REFERENCE
rule (``floor=None``); pass ``floor=5`` for the paper's literal wording.

An all-0 or all-1 series makes the bootstrap degenerate (every replicate equals the observed rate);
the result then carries ``degenerate=True``, the count, and the Wilson interval as the reported one
(the paper's Fig. 1 convention), plus the exact zero-event bound for reference.

The random generator is ``numpy.random.default_rng(seed)``; replicate values therefore differ from
any other implementation's stream, but are fixed for a given seed here.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

from kit.stats.inputs import StatsInputError, binary_vector
from kit.stats.intervals import wilson_interval, zero_event_upper_bound
from kit.stats.result import JsonResult

DEFAULT_SEED = 20261007
DEFAULT_REPLICATES = 10_000
SENSITIVITY_BLOCKS = (1, 5, 10, 20)


def block_length_floor(n: int) -> int:
    """The REFERENCE.md floor on the block length: ceil(n^(1/3))."""
    # round first so that exact cubes (e.g. 125) are not pushed up by floating error
    return int(math.ceil(round(n ** (1.0 / 3.0), 9)))


def politis_white_circular(indicators) -> float:
    """Politis–White automatic block length for the circular bootstrap (``arch``), NaN if undefined.

    The estimate is undefined for a constant series (zero variance), which ``arch`` reports as NaN, and
    for a series too short for its lag window (fewer than 8 values), where ``arch`` raises ValueError;
    the block length then falls back to the floor.
    """
    from kit.core.paths import confine_library_caches  # noqa: PLC0415

    confine_library_caches()  # arch imports matplotlib
    from arch.bootstrap import optimal_block_length  # noqa: PLC0415

    x = np.asarray(indicators, dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            table = optimal_block_length(x)
        except ValueError:
            return math.nan
    return float(table["circular"].iloc[0])


def choose_block_length(indicators, floor: int | None = None) -> int:
    """Block length ``max(floor, ceil(Politis–White circular estimate))``; floor defaults to ceil(n^(1/3))."""
    x = np.asarray(indicators, dtype=float)
    lower = block_length_floor(len(x)) if floor is None else int(floor)
    estimate = politis_white_circular(x)
    if not math.isfinite(estimate):
        return lower
    return max(lower, int(math.ceil(estimate)))


def circular_block_bootstrap_rates(indicators, block: int, replicates: int = DEFAULT_REPLICATES,
                                   seed: int = DEFAULT_SEED) -> np.ndarray:
    """Replicate means of a circular block bootstrap of ``indicators`` with blocks of ``block``.

    Each replicate concatenates ceil(n / block) blocks whose starts are uniform over the n positions
    (indices wrap around the end) and keeps the first n values.
    """
    x = np.asarray(indicators, dtype=float)
    n = len(x)
    if n == 0:
        raise StatsInputError("cannot bootstrap an empty series", "pass at least one episode indicator")
    if block < 1:
        raise StatsInputError(f"block length must be at least 1, got {block}", "use a positive block length")
    block = min(int(block), n)
    n_blocks = -(-n // block)
    last = n - (n_blocks - 1) * block
    doubled = np.concatenate([x, x, [0.0]])
    csum = np.concatenate([[0.0], np.cumsum(doubled)])
    starts_all = np.arange(n)
    full_sum = csum[starts_all + block] - csum[starts_all]
    last_sum = csum[starts_all + last] - csum[starts_all]
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, n, size=(replicates, n_blocks))
    totals = full_sum[starts[:, :-1]].sum(axis=1) + last_sum[starts[:, -1]]
    return totals / n


@dataclass(frozen=True)
class DependenceAwareInterval(JsonResult):
    """A single-pass rate with Wilson, circular-block-bootstrap and reported (envelope) 95% intervals."""

    rate: float
    k: int
    n: int
    lo: float
    hi: float
    wilson_lo: float
    wilson_hi: float
    cbb_lo: float | None
    cbb_hi: float | None
    block: int | None
    politis_white: float | None
    degenerate: bool
    zero_event_upper: float | None
    replicates: int
    seed: int


def dependence_aware_interval(indicators, replicates: int = DEFAULT_REPLICATES, seed: int = DEFAULT_SEED,
                              floor: int | None = None, block: int | None = None) -> DependenceAwareInterval:
    """Rate of a 0/1 series in execution order with the envelope of Wilson and circular-block-bootstrap CIs.

    ``block`` forces a block length (used for sensitivity checks); otherwise it is chosen by
    :func:`choose_block_length` with ``floor``.
    """
    x = binary_vector(indicators, "indicators")
    n = len(x)
    if n == 0:
        raise StatsInputError("no episode indicators given", "pass one 0/1 value per episode")
    k = int(x.sum())
    wlo, whi = wilson_interval(k, n)
    if k in (0, n):
        return DependenceAwareInterval(
            rate=k / n, k=k, n=n, lo=wlo, hi=whi, wilson_lo=wlo, wilson_hi=whi, cbb_lo=None, cbb_hi=None,
            block=None, politis_white=None, degenerate=True,
            zero_event_upper=zero_event_upper_bound(n) if k == 0 else None,
            replicates=replicates, seed=seed)
    pw = politis_white_circular(x)
    chosen = int(block) if block is not None else choose_block_length(x, floor)
    rates = circular_block_bootstrap_rates(x, chosen, replicates, seed)
    clo, chi = (float(v) for v in np.percentile(rates, [2.5, 97.5]))
    return DependenceAwareInterval(
        rate=k / n, k=k, n=n, lo=min(clo, wlo), hi=max(chi, whi), wilson_lo=wlo, wilson_hi=whi,
        cbb_lo=clo, cbb_hi=chi, block=chosen, politis_white=pw if math.isfinite(pw) else None,
        degenerate=False, zero_event_upper=None, replicates=replicates, seed=seed)


def block_sensitivity(indicators, blocks=SENSITIVITY_BLOCKS, replicates: int = DEFAULT_REPLICATES,
                      seed: int = DEFAULT_SEED) -> dict[int, DependenceAwareInterval]:
    """The dependence-aware interval recomputed at fixed block lengths (paper: 1, 5, 10 and 20)."""
    return {int(b): dependence_aware_interval(indicators, replicates, seed, block=int(b)) for b in blocks}
