"""The agent loop on recorded-style model outputs.

The engine here is `ScriptedEngine` (see bfcl_fakes.py): a stand-in that replays scripted model
texts. Everything else is real: BFCL's decoder, environments and checker run in the worker.
"""

from __future__ import annotations

import sys

import pytest
from bfcl_fakes import CONTEXT_OVERFLOW, ScriptedEngine, char_count_tokens

from kit.workloads.bfcl import render_chatml, render_qwen25, run_episode, score_episode
from kit.workloads.bfcl.agent import MAXIMUM_STEP_LIMIT, max_new_tokens


def episode(first_80, n):
    return first_80[n]


def run(engine, worker, ep, *, pass_id="p", ctx=16384, **kw):
    seen = []
    result = run_episode(engine, worker, ep, render_chatml, ctx, pass_id,
                         count_tokens=char_count_tokens, seed=42,
                         on_request=lambda info, req, comp: seen.append((info, req, comp)), **kw)
    return result, seen


def test_prose_ends_each_turn_after_one_request(bfcl_worker, first_80):
    ep = episode(first_80, 1)
    engine = ScriptedEngine(["Sure, I can help with that."] * len(ep.turns))
    result, seen = run(engine, bfcl_worker, ep)
    assert result.outcome == "completed"
    assert result.n_requests == len(ep.turns) == len(seen)
    assert [info.action for info, _, _ in seen] == ["end_turn"] * len(ep.turns)
    assert all(info.decode_error for info, _, _ in seen)
    # Every request re-sends the whole transcript: each prompt extends the previous one.
    prompts = [r.prompt for r in engine.requests]
    assert all(b.startswith(a) for a, b in zip(prompts, prompts[1:], strict=False))
    assert prompts[0].startswith("<|im_start|>system\nYou are an expert in composing functions.")
    score = score_episode(bfcl_worker, result)
    assert not score.valid and score.error_type == "multi_turn:empty_turn_model_response"


def test_fenced_calls_execute_and_results_come_back_as_tool_messages(bfcl_worker, first_80):
    ep = episode(first_80, 0)  # GorillaFileSystem + TwitterAPI, starts in /workspace
    script = ["```\n[cd(folder='document')]\n```", "[ls()]", "[]"] + ["Done."] * (len(ep.turns) - 1)
    engine = ScriptedEngine(script)
    result, seen = run(engine, bfcl_worker, ep)
    assert [info.action for info, _, _ in seen[:3]] == ["execute", "execute", "end_turn"]
    assert seen[0][0].calls == ("cd(folder='document')",)
    assert "final_report.pdf" in seen[1][0].tool_results[0]  # state carried from the cd step
    assert [info.step_index for info, _, _ in seen[:3]] == [0, 1, 2]
    assert [info.request_index for info, _, _ in seen] == list(range(len(script)))
    tool_msgs = [m for m in result.messages if m["role"] == "tool"]
    assert [m["name"] for m in tool_msgs] == ["cd(folder='document')", "ls()"]
    assert "<|im_start|>tool\n" + tool_msgs[1]["content"] in engine.requests[2].prompt
    assert result.turns[0].step_texts == script[:3]
    assert result.turns[0].decoded == [("cd(folder='document')",), ("ls()",), ()]


def test_fence_with_language_tag_does_not_decode(bfcl_worker):
    # BFCL strips backticks and newlines only, so "python" stays in front of the list.
    assert bfcl_worker.decode("```python\n[ls()]\n```").calls is None
    assert bfcl_worker.decode("```\n[ls()]\n```").calls == ("ls()",)
    assert bfcl_worker.decode("ls(a=True)").calls == ("ls(a=True)",)
    empty = bfcl_worker.decode("[]")
    assert empty.calls == () and empty.ends_turn


def test_state_is_isolated_per_pass_and_reset_after_release(bfcl_worker, first_80):
    ep = episode(first_80, 0)
    script = ["[cd(folder='document')]", "[]"] + ["Done."] * (len(ep.turns) - 1)
    _, seen_a = run(ScriptedEngine(script), bfcl_worker, ep, pass_id="a")
    _, seen_b = run(ScriptedEngine(script), bfcl_worker, ep, pass_id="a")  # same pass id, rerun
    _, seen_c = run(ScriptedEngine(script), bfcl_worker, ep, pass_id="c")
    assert seen_a[0][0].tool_results == seen_b[0][0].tool_results == seen_c[0][0].tool_results
    assert "document" in seen_a[0][0].tool_results[0]


def test_more_than_20_calling_steps_force_quits(bfcl_worker, first_80):
    ep = episode(first_80, 0)
    engine = ScriptedEngine(["[pwd()]"] * (MAXIMUM_STEP_LIMIT + 1))
    result, seen = run(engine, bfcl_worker, ep)
    assert result.outcome == "force_quit"
    assert result.n_requests == MAXIMUM_STEP_LIMIT + 1
    assert seen[-1][0].action == "force_quit"
    assert len(result.turns) == 1
    score = score_episode(bfcl_worker, result)
    assert not score.valid and score.error_type == "multi_turn:force_terminated"


def test_exactly_20_calling_steps_do_not_force_quit(bfcl_worker, first_80):
    ep = episode(first_80, 0)
    script = ["[pwd()]"] * MAXIMUM_STEP_LIMIT + ["[]"] + ["Done."] * (len(ep.turns) - 1)
    result, _ = run(ScriptedEngine(script), bfcl_worker, ep)
    assert result.outcome == "completed"
    assert len(result.turns) == len(ep.turns)


def test_context_overflow_ends_the_episode(bfcl_worker, first_80):
    ep = episode(first_80, 2)
    engine = ScriptedEngine(["[pwd()]", CONTEXT_OVERFLOW, "never sent"])
    result, seen = run(engine, bfcl_worker, ep)
    assert result.outcome == "context_overflow"
    assert result.n_requests == 2 and len(engine.requests) == 2
    assert seen[-1][0].action == "context_overflow"
    assert result.turns[0].step_texts == ["[pwd()]"]
    score = score_episode(bfcl_worker, result)
    assert not score.valid and score.error_type == "multi_turn:inference_error"


def test_max_tokens_follow_the_remaining_context(bfcl_worker, first_80):
    ep = episode(first_80, 1)
    engine = ScriptedEngine(["no"] * len(ep.turns))
    _, seen = run(engine, bfcl_worker, ep, ctx=16384)
    for info, req, _ in seen:
        assert info.prompt_tokens == char_count_tokens(req.prompt)
        assert req.max_tokens == min(4096, 16384 - info.prompt_tokens - 2)
    assert max_new_tokens(100, 16384) == 4096
    assert max_new_tokens(16000, 16384) == 382
    assert max_new_tokens(16383, 16384) == 1000  # BFCL's request when nothing is left
    assert max_new_tokens(100, 16384, cap=32) == 32


def test_request_options_are_passed_through(bfcl_worker, first_80):
    ep = episode(first_80, 1)
    engine = ScriptedEngine(["no"] * len(ep.turns))
    run_episode(engine, bfcl_worker, ep, render_qwen25, 16384, "p", count_tokens=char_count_tokens,
                seed=7, top_logprobs=5, cache_prompt=False)
    assert {(r.top_logprobs, r.cache_prompt, r.temperature, r.seed) for r in engine.requests} == {
        (5, False, 0.0, 7)}  # the caller's seed reaches every request


def test_ground_truth_replayed_through_the_loop_scores_valid(bfcl_worker, first_80):
    for ep in (first_80[1], first_80[2], first_80[4]):
        script = []
        for turn in ep.ground_truth:
            script += ["[" + ", ".join(turn) + "]", "I have completed the request."]
        result, _ = run(ScriptedEngine(script), bfcl_worker, ep)
        assert result.outcome == "completed"
        assert score_episode(bfcl_worker, result).valid, ep.id


def test_request_cap_stops_early(bfcl_worker, first_80):
    ep = episode(first_80, 0)
    result, seen = run(ScriptedEngine(["[pwd()]"] * 5), bfcl_worker, ep, max_requests=3)
    assert result.outcome == "request_cap" and result.n_requests == 3 == len(seen)


def test_main_process_never_imports_bfcl(bfcl_worker):
    bfcl_worker.hello()
    assert not any(name == "bfcl_eval" or name.startswith("bfcl_eval.") for name in sys.modules)


@pytest.mark.parametrize("bad", ["[ls(", "[1, 2]"])
def test_undecodable_text_ends_the_turn(bfcl_worker, bad):
    d = bfcl_worker.decode(bad)
    assert d.ends_turn and d.calls is None and d.error
