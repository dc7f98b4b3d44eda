"""Mechanism inputs from top-k log-probabilities, on record files whose margins the test chose."""

from __future__ import annotations

import math

import pytest

from kit.analysis import mechanism
from kit.protocols.passes import load_pass
from kit.record.manifest import Manifest
from tests.analysis.records_builder import position, write_grid_like


def two_paths(tmp_path, depth_on=2, depth_off=2):
    # Episode "a": request 0 has the same prompt on both paths; the hit path keeps token 11 (margin
    # 2.0 -> 2.3) and flips at the second position (recompute margin 0.05). Its request 1 then has a
    # different prompt and must not be compared.
    # Episode "b": never flips; request 0 missed the cache (cached 0), request 1 hit it.
    off_a = [("p0", [position(11, 2.0, 12, depth_off), position(21, 0.05, 22, depth_off)], 0),
             ("p1", [position(31, 0.01, 32, depth_off)], 0)]
    on_a = [("p0", [position(11, 2.3, 12, depth_on), position(22, 0.02, 21, depth_on)], 40),
            ("p1-changed", [position(32, 1.0, 31, depth_on)], 45)]
    off_b = [("q0", [position(41, 0.5, 42, depth_off)], 0), ("q1", [position(51, 3.0, 52, depth_off)], 0)]
    on_b = [("q0", [position(41, 0.7, 42, depth_on)], 0), ("q1", [position(51, 2.5, 52, depth_on)], 60)]
    folder = tmp_path / "grid-toy"
    write_grid_like(folder, {
        "on1": {"arm": "on", "order": ["a", "b"], "episodes": {"a": on_a, "b": on_b}},
        "off1": {"arm": "off", "order": ["a", "b"], "episodes": {"a": off_a, "b": off_b}},
    }, depth=depth_on)
    if depth_off != depth_on:  # the off pass was written at another depth: fix its recorded n_probs
        import json
        path = folder / "records" / "off1.jsonl"
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        for record in lines:
            record["request"]["body"]["n_probs"] = depth_off
        path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    passes = Manifest.load(folder).run.passes
    return (load_pass(folder, "on1", passes["on1"], keep_logprobs=True),
            load_pass(folder, "off1", passes["off1"], keep_logprobs=True))


def test_margins_flips_and_delta_at_shared_prefix_positions(tmp_path):
    hit, recompute = two_paths(tmp_path)
    found = mechanism.pass_positions(hit, recompute)
    assert found.episode == ["a", "a", "b", "b"]
    assert found.margin == pytest.approx([2.0, 0.05, 0.5, 3.0])
    assert found.flipped == [0, 1, 0, 0]
    # |Δmargin| only where the token did not flip and the request hit the cache
    assert found.delta[0] == pytest.approx(0.3)
    assert math.isnan(found.delta[1])  # flipped
    assert math.isnan(found.delta[2])  # episode b request 0: cached_tokens 0
    assert found.delta[3] == pytest.approx(0.5)
    assert found.requests_compared == 3 and found.cache_hit_requests == 2 and found.depths == {2}


def test_unequal_or_shallow_top_k_is_refused(tmp_path):
    hit, recompute = two_paths(tmp_path / "x", depth_on=5, depth_off=2)
    with pytest.raises(mechanism.MechanismSkip, match="different top-k"):
        mechanism.pass_positions(hit, recompute)
    hit, recompute = two_paths(tmp_path / "y", depth_on=1, depth_off=1)
    with pytest.raises(mechanism.MechanismSkip, match="top-two margin needs top-2"):
        mechanism.pass_positions(hit, recompute)


def test_summary_counts_and_hazard_bins(tmp_path):
    hit, recompute = two_paths(tmp_path)
    found = mechanism.pass_positions(hit, recompute)
    summary = mechanism.summarize({"F16": found}, ["F16"], replicates=50, seed=1)
    per = summary["per_format"]["F16"]
    assert per["positions"] == 4 and per["flips"] == 1 and per["near_tie_positions"] == 1
    bins = {(b["lo"], b["hi"]): (b["positions"], b["flips"]) for b in per["hazard"]["bins"]}
    assert bins[(0.03, 0.1)] == (1, 1) and bins[(0.3, 1.0)] == (1, 0) and bins[(1.0, 3.0)] == (1, 0)
    assert bins[(3.0, None)] == (1, 0)
    assert per["delta_margin"]["n"] == 2 and per["delta_margin"]["median"] == pytest.approx(0.4)
    assert per["margin_at_flips"]["median"] == pytest.approx(0.05)
