"""The public surface: __all__ is complete and results serialise to strict JSON."""

import json

import numpy as np

import kit.stats as stats
from kit.stats.result import plain


def test_all_names_exist_and_are_unique():
    assert len(stats.__all__) == len(set(stats.__all__))
    for name in stats.__all__:
        assert hasattr(stats, name), name


def test_plain_converts_numpy_and_non_finite():
    out = plain({"a": np.float64(1.5), "b": np.int64(2), "c": float("inf"), "d": (np.bool_(True), np.nan),
                 "e": np.array([1, 2])})
    assert out == {"a": 1.5, "b": 2, "c": None, "d": [True, None], "e": [1, 2]}
    assert type(out["b"]) is int
    json.dumps(out, allow_nan=False)


def test_results_are_frozen_and_json_ready():
    r = stats.exact_mcnemar(3, 9)
    try:
        r.p = 0.5
    except AttributeError:
        pass
    else:
        raise AssertionError("result should be frozen")
    series = np.random.default_rng(0).integers(0, 2, 80)
    result = stats.dependence_aware_interval(series, replicates=200)
    text = json.dumps(result.to_json(), allow_nan=False)
    assert json.loads(text)["block"] == result.block >= 5
