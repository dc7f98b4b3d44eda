"""Stated durations: the arithmetic of the reset and BFCL estimates at a given measured speed."""

from __future__ import annotations

import pytest

from kit.protocols import kinds
from kit.protocols.bfcl_passes import drive
from kit.protocols.reset import protocol as reset
from kit.protocols.estimate import Speed

SPEED = Speed(prefill_tokens_per_s=200.0, decode_tokens_per_s=40.0, prompt_tokens=100, startup_seconds=3.0)


def test_reset_estimate_recomputes_cold_prompts_and_reuses_warm_ones():
    protocol, _, _ = kinds.load("reset", {"max_tokens": 80})
    guess = reset.estimate(protocol, SPEED, items=10, sessions=3)
    cold, warm = 100 / 200 + 80 / 40, 8 / 200 + 80 / 40
    assert guess.seconds == pytest.approx(3 * (3.0 + 10 * (2 * cold + 2 * warm)), abs=0.1)
    assert "3 sessions x 10 items x 4 phases" in guess.basis


def test_bfcl_estimate_counts_a_server_start_only_for_passes_with_their_own_server():
    protocol, _, _ = kinds.load("grid-cpu")
    shared = drive.estimate(protocol.workload, ["on", "off"], SPEED, episodes=2, fresh_server_per_pass=False)
    fresh = drive.estimate(protocol.workload, ["on", "off"], SPEED, episodes=2, fresh_server_per_pass=True)
    per_episode = 4 * ((200 / 200 + 64 / 40) + (100 / 200 + 64 / 40))
    assert shared.seconds == pytest.approx(2 * per_episode, abs=0.1)
    assert fresh.seconds == pytest.approx(shared.seconds + 2 * 3.0, abs=0.1)
