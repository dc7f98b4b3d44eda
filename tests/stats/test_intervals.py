"""Wilson and zero-event intervals against values printed in the paper (Tables V and VII)."""

import math

import pytest

from kit.stats import (
    StatsInputError,
    rate_interval,
    wilson_interval,
    zero_event_upper_bound,
)

# Table VII: path divergence (%) with 95% Wilson CI; counts recovered as rate * n.
TABLE_VII = [
    (7, 200, 1.7, 7.0),
    (89, 200, 37.8, 51.4),
    (83, 200, 34.9, 48.4),
    (96, 200, 41.2, 54.9),
    (227, 500, 41.1, 49.8),
]

# Table V: (k of 80, printed lo, printed hi): the printed interval is the envelope of the block
# bootstrap and Wilson, so it must contain the Wilson interval.
TABLE_V = [
    (16, 11.2, 30.0), (44, 44.1, 65.4), (62, 67.2, 86.2), (54, 56.2, 78.8), (27, 24.3, 44.6),
    (48, 48.8, 71.2), (50, 50.0, 75.0), (25, 16.2, 47.5), (7, 2.5, 17.0), (8, 1.2, 20.0),
    (29, 26.2, 47.2), (49, 50.0, 71.2), (60, 64.5, 83.8), (56, 59.2, 78.9), (55, 57.9, 78.8),
    (73, 83.0, 96.2), (43, 41.2, 65.0),
]


@pytest.mark.parametrize("k,n,lo,hi", TABLE_VII)
def test_wilson_matches_table_vii(k, n, lo, hi):
    wlo, whi = wilson_interval(k, n)
    assert round(100 * wlo, 1) == lo
    assert round(100 * whi, 1) == hi


@pytest.mark.parametrize("k,lo,hi", TABLE_V)
def test_table_v_envelope_contains_wilson(k, lo, hi):
    wlo, whi = wilson_interval(k, 80)
    assert 100 * wlo >= lo - 0.05
    assert 100 * whi <= hi + 0.05


@pytest.mark.parametrize("k,lo,hi", [(44, 44.1, 65.4), (27, 24.3, 44.6), (56, 59.2, 78.9)])
def test_table_v_rows_where_wilson_is_the_envelope(k, lo, hi):
    wlo, whi = wilson_interval(k, 80)
    assert (round(100 * wlo, 1), round(100 * whi, 1)) == (lo, hi)


def test_wilson_against_closed_form_by_hand():
    # k=0: Wilson interval is [0, z^2 / (n + z^2)]
    z = 1.959964
    assert wilson_interval(0, 80) == (0.0, pytest.approx(z * z / (80 + z * z)))
    lo, hi = wilson_interval(40, 80)
    assert lo + hi == pytest.approx(1.0)


def test_zero_event_bound():
    assert zero_event_upper_bound(80) == pytest.approx(1 - 0.05 ** (1 / 80))
    # (1 - bound)^n == alpha: the probability of seeing zero events at the bound is 5%
    assert (1 - zero_event_upper_bound(200)) ** 200 == pytest.approx(0.05)
    assert zero_event_upper_bound(100) == pytest.approx(0.0295, abs=5e-5)


def test_rate_interval_rules():
    r = rate_interval(0, 80, zero_events="exact")
    assert (r.lo, r.hi, r.method) == (0.0, zero_event_upper_bound(80), "exact-zero-event")
    w = rate_interval(0, 80)
    assert w.method == "wilson" and w.hi > r.hi
    full = rate_interval(80, 80, zero_events="exact")
    assert full.lo == pytest.approx(0.05 ** (1 / 80)) and full.hi == 1.0
    mid = rate_interval(29, 80)
    assert mid.to_json() == {"rate": 29 / 80, "lo": mid.lo, "hi": mid.hi, "k": 29, "n": 80, "method": "wilson"}


@pytest.mark.parametrize("k,n", [(-1, 10), (11, 10), (0, 0)])
def test_invalid_counts_raise(k, n):
    with pytest.raises(StatsInputError):
        wilson_interval(k, n)


def test_rate_interval_rejects_unknown_rule():
    with pytest.raises(StatsInputError):
        rate_interval(1, 10, zero_events="jeffreys")
    assert math.isclose(rate_interval(1, 10).rate, 0.1)
