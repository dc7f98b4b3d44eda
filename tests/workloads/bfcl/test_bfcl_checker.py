"""BFCL's own checker, driven through the worker, on the first 80 multi_turn_base episodes."""

from __future__ import annotations

import re

KEYWORD_CALL = re.compile(r"\w+\((\s*\w+\s*=.*)?\)")


def test_first_80_are_ascending_ids(first_80):
    assert [e.id for e in first_80] == [f"multi_turn_base_{i}" for i in range(80)]
    assert all(len(e.turns) == len(e.ground_truth) for e in first_80)


def test_ground_truth_as_model_scores_valid_for_all_80(bfcl_worker, first_80):
    failures = []
    for ep in first_80:
        # One step per turn holding all reference calls of the turn.
        score = bfcl_worker.check(ep.id, [[list(turn)] if turn else [] for turn in ep.ground_truth])
        if not score.valid:
            failures.append((ep.id, score.error_type))
    assert failures == []


def test_ground_truth_one_call_per_step_also_valid(bfcl_worker, first_80):
    for ep in first_80[:10]:
        score = bfcl_worker.check(ep.id, [[[c] for c in turn] for turn in ep.ground_truth])
        assert score.valid, (ep.id, score.error_type, score.error_message)


def test_broken_call_sequence_scores_invalid(bfcl_worker, first_80):
    verdicts = []
    for ep in first_80:
        turns = [[list(t)] if t else [] for t in ep.ground_truth]
        first = next(i for i, t in enumerate(ep.ground_truth) if t)
        turns[first] = [turns[first][0][:-1]] if len(turns[first][0]) > 1 else []
        verdicts.append(bfcl_worker.check(ep.id, turns).valid)
    assert not any(verdicts)


def test_turn_count_mismatch_is_force_terminated(bfcl_worker, first_80):
    ep = first_80[0]
    score = bfcl_worker.check(ep.id, [[list(t)] for t in ep.ground_truth[:-1]])
    assert not score.valid
    assert score.error_type == "multi_turn:force_terminated"


def test_scoring_the_same_episode_twice_gives_the_same_verdict(bfcl_worker, first_80):
    ep = first_80[3]
    turns = [[list(t)] for t in ep.ground_truth]
    assert bfcl_worker.check(ep.id, turns).valid
    assert bfcl_worker.check(ep.id, turns).valid  # scoring state is not carried over


def test_score_redecodes_step_texts_and_drops_prose(bfcl_worker, first_80):
    keyword_only = [e for e in first_80
                    if all(KEYWORD_CALL.fullmatch(c) for t in e.ground_truth for c in t)]
    assert len(keyword_only) >= 20
    for ep in keyword_only[:20]:
        turns = [["[" + ", ".join(t) + "]", "All done for this turn."] for t in ep.ground_truth]
        score = bfcl_worker.score(ep.id, turns)
        assert score.valid, (ep.id, score.error_type, score.error_message)
        # The prose steps are dropped; each turn keeps one step with the reference calls
        # (re-serialized by BFCL's decoder, so compare the called names).
        names = [[[c.split("(")[0] for c in step] for step in turn] for turn in score.decoded]
        assert names == [[[c.split("(")[0] for c in t]] if t else [] for t in ep.ground_truth]


def test_score_of_prose_only_is_invalid(bfcl_worker, first_80):
    ep = first_80[1]
    score = bfcl_worker.score(ep.id, [["I cannot do that."] for _ in ep.ground_truth])
    assert not score.valid
    assert score.error_type == "multi_turn:empty_turn_model_response"


def test_episodes_by_id_keep_the_given_order(bfcl_worker):
    ids = ["multi_turn_base_12", "multi_turn_base_3", "multi_turn_base_150"]
    assert [e.id for e in bfcl_worker.load_episodes(ids=ids)] == ids
    assert [e.id for e in bfcl_worker.load_episodes(count=3)] == [
        "multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_2"]
