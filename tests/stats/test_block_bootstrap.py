"""Circular block bootstrap: block length against arch, resampling against a naive loop, envelope rules."""

import math

import numpy as np
import pytest

from kit.stats import (
    block_sensitivity,
    choose_block_length,
    circular_block_bootstrap_rates,
    dependence_aware_interval,
    wilson_interval,
)
from kit.stats.block_bootstrap import block_length_floor


def persistent_series(n=80, seed=1, stay=0.9):
    """A 0/1 Markov chain with strong serial dependence."""
    rng = np.random.default_rng(seed)
    x = np.empty(n, dtype=int)
    x[0] = 1
    for i in range(1, n):
        x[i] = x[i - 1] if rng.random() < stay else 1 - x[i - 1]
    return x


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_block_length_is_max_of_floor_and_arch_estimate(seed):
    from arch.bootstrap import optimal_block_length  # noqa: PLC0415 - about 0.5 s: on use, not at collection

    x = persistent_series(seed=seed)
    pw = float(optimal_block_length(x.astype(float))["circular"].iloc[0])
    assert choose_block_length(x) == max(5, math.ceil(pw))
    assert choose_block_length(x, floor=1) == max(1, math.ceil(pw))


def test_floor_rule():
    assert [block_length_floor(n) for n in (8, 27, 64, 65, 80, 125, 126)] == [2, 3, 4, 5, 5, 5, 6]
    iid = np.random.default_rng(0).integers(0, 2, 80)
    assert choose_block_length(iid, floor=7) >= 7


def test_resampling_matches_naive_loop_with_same_draws():
    x = persistent_series(n=23, seed=4)
    block, reps, seed = 5, 50, 11
    fast = circular_block_bootstrap_rates(x, block, reps, seed)
    n = len(x)
    n_blocks = math.ceil(n / block)
    starts = np.random.default_rng(seed).integers(0, n, size=(reps, n_blocks))
    naive = []
    for row in starts:
        idx = [(s + i) % n for s in row for i in range(block)][:n]
        naive.append(x[idx].mean())
    np.testing.assert_allclose(fast, naive)


def test_interval_envelope_and_determinism():
    x = persistent_series(seed=5)
    a = dependence_aware_interval(x, replicates=2000)
    b = dependence_aware_interval(x, replicates=2000)
    assert a == b
    assert a.lo == min(a.cbb_lo, a.wilson_lo) and a.hi == max(a.cbb_hi, a.wilson_hi)
    assert (a.wilson_lo, a.wilson_hi) == wilson_interval(int(x.sum()), len(x))
    # strong positive dependence: the block bootstrap must be wider than Wilson here
    assert a.cbb_hi - a.cbb_lo > a.wilson_hi - a.wilson_lo
    assert a.block >= 5 and not a.degenerate
    c = dependence_aware_interval(x, replicates=2000, seed=1)
    assert c.cbb_lo != a.cbb_lo or c.cbb_hi != a.cbb_hi or c.seed != a.seed


@pytest.mark.parametrize("value", [0, 1])
def test_degenerate_series(value):
    x = np.full(80, value)
    r = dependence_aware_interval(x)
    assert r.degenerate and r.cbb_lo is None and r.block is None
    assert (r.lo, r.hi) == wilson_interval(80 * value, 80)
    assert r.k == 80 * value
    if value == 0:
        assert r.zero_event_upper == pytest.approx(1 - 0.05 ** (1 / 80))
    assert r.to_json()["cbb_lo"] is None


def test_sensitivity_blocks():
    x = persistent_series(seed=6)
    res = block_sensitivity(x, replicates=1000)
    assert sorted(res) == [1, 5, 10, 20]
    assert all(r.block == b for b, r in res.items())
    # with strong dependence, block 1 (iid) underestimates the spread relative to long blocks
    assert res[1].cbb_hi - res[1].cbb_lo < res[20].cbb_hi - res[20].cbb_lo


def test_iid_bootstrap_close_to_binomial_spread():
    x = np.random.default_rng(9).integers(0, 2, 400)
    rates = circular_block_bootstrap_rates(x, 1, 4000, 3)
    p = x.mean()
    assert rates.mean() == pytest.approx(p, abs=0.005)
    assert rates.std() == pytest.approx(math.sqrt(p * (1 - p) / 400), rel=0.1)


@pytest.mark.parametrize("indicators", [[1, 0], [0, 1, 0], [1, 0, 0, 1, 0, 1, 0]])
def test_a_series_too_short_for_arch_falls_back_to_the_floor(indicators):
    # arch's lag window needs 8 values; a two-episode CPU run must still get its interval
    result = dependence_aware_interval(indicators, replicates=200)
    assert result.politis_white is None and result.block == block_length_floor(len(indicators))
    assert result.lo <= result.rate <= result.hi
