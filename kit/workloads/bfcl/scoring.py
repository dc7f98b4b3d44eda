"""Scoring an episode the way BFCL's evaluator scores a multi-turn result.

BFCL reads each turn's raw step texts, re-decodes them, drops steps that fail to decode or
decode to nothing, treats a turn-count mismatch as force-termination (invalid), and otherwise
runs `multi_turn_checker`; all of that happens in the worker. An episode the engine could not
finish (context overflow) is what BFCL records as an inference error: invalid, never checked.
"""

from __future__ import annotations

from typing import Protocol

from kit.workloads.bfcl.agent import EpisodeResult
from kit.workloads.bfcl.client import Score


class ScoringWorker(Protocol):
    def score(self, episode_id: str, turns: list[list[str]]) -> Score: ...


def score_episode(worker: ScoringWorker, result: EpisodeResult) -> Score:
    """BFCL's verdict on one episode result."""
    if result.outcome == "context_overflow":
        return Score(valid=False, error_type="multi_turn:inference_error",
                     error_message="the engine refused a prompt as longer than its context",
                     decoded=[], n_turns=len(result.turns), n_truth_turns=0)
    if result.outcome == "request_cap":
        return Score(valid=False, error_type="kit:request_cap",
                     error_message=f"stopped after {result.n_requests} requests (smoke-test cap)",
                     decoded=[], n_turns=len(result.turns), n_truth_turns=0)
    return worker.score(result.episode_id, result.turn_texts())
