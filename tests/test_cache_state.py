"""Cache-state classification: telemetry rules, calibration from labelled calls, and refusal to claim a
separation that overlapping timing classes do not show (synthetic distributions, no engine)."""

from __future__ import annotations

import math
import random

import pytest

from kit.record.cache_state import Calibration, calibrate, classify, from_telemetry, separation


def test_telemetry_names_the_three_states():
    assert from_telemetry(0, 116).state == "full_eval"
    assert from_telemetry(112, 116).state == "full_kv"  # 4 re-evaluated: within tolerance
    assert from_telemetry(39, 116).state == "partial"
    assert from_telemetry(61, 62, reuse_tolerance=0).state == "partial"
    assert from_telemetry(None, 116) is None and from_telemetry(3, None) is None
    label = from_telemetry(61, 62)
    assert label.confidence == 1.0 and label.source == "telemetry" and "61 of 62" in label.detail


def _draw(rng, median_ms, spread, n):
    return [median_ms * math.exp(rng.gauss(0, spread)) for _ in range(n)]


def test_well_separated_classes_are_each_their_own_class_and_classify_back():
    rng = random.Random(7)
    data = {"full_eval": _draw(rng, 216, 0.05, 8), "partial": _draw(rng, 35, 0.05, 8), "full_kv": _draw(rng, 17.5, 0.05, 8)}
    cal = calibrate([(s, ms) for s, values in data.items() for ms in values])
    assert cal.separated and cal.merged == ()
    assert [c.states for c in cal.classes] == [("full_eval",), ("partial",), ("full_kv",)]
    assert len(cal.boundaries) == 2
    assert max(data["partial"]) < cal.boundaries[0] < min(data["full_eval"])
    assert max(data["full_kv"]) < cal.boundaries[1] < min(data["partial"])
    for state, values in data.items():
        for ms in values:
            label = classify(cal, ms)
            assert label.state == state and label.source == "timing"
            assert label.confidence > 0.99
    # a time between two classes is assigned, but with a lower confidence than a typical one
    between = math.sqrt(35 * 17.5)
    assert classify(cal, between).confidence < classify(cal, 17.5).confidence


def test_overlapping_classes_are_merged_and_separation_is_not_claimed():
    rng = random.Random(11)
    eval_times = _draw(rng, 200, 0.15, 10)
    partial_times = _draw(rng, 180, 0.15, 10)  # overlaps full evaluation
    kv_times = _draw(rng, 17, 0.05, 10)
    assert max(partial_times) > min(eval_times)  # the synthetic classes really overlap
    cal = calibrate([("full_eval", t) for t in eval_times] + [("partial", t) for t in partial_times]
                    + [("full_kv", t) for t in kv_times])
    assert not cal.separated
    assert cal.merged == (("full_eval", "partial"),)
    assert [c.name for c in cal.classes] == ["full_eval+partial", "full_kv"]
    for t in eval_times + partial_times:
        assert classify(cal, t).state == "full_eval+partial"  # never one of the two alone
    assert classify(cal, 17).state == "full_kv"


def test_two_overlapping_arms_do_not_separate():
    rng = random.Random(3)
    pure, contaminated = _draw(rng, 30, 0.2, 10), _draw(rng, 33, 0.2, 10)
    result = separation(pure, contaminated)
    assert not result.separate and result.ratio <= 1
    clean = separation(_draw(rng, 17, 0.05, 10), _draw(rng, 33, 0.03, 10))
    assert clean.separate and clean.ratio > 1


def test_calibration_round_trips_through_json():
    cal = calibrate([("full_eval", 300.0), ("full_eval", 320.0), ("full_kv", 18.0), ("full_kv", 20.0)])
    again = Calibration.from_json(cal.to_json())
    assert again == cal
    assert classify(again, 19.0) == classify(cal, 19.0)


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError):
        calibrate([])
    with pytest.raises(ValueError):
        calibrate([("full_kv", 0.0)])
    with pytest.raises(ValueError):
        separation([], [1.0])
    cal = calibrate([("full_kv", 18.0)])
    assert classify(cal, None).state is None
