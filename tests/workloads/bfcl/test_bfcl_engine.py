"""One BFCL episode against the real llama-server (SmolLM2-135M on the CPU)."""

from __future__ import annotations

import pytest

from kit.engines.llamacpp import LlamaCppEngine
from kit.workloads.bfcl import Score, render_chatml, run_episode, score_episode
from kit.workloads.bfcl.agent import opening_messages


@pytest.mark.engine
def test_real_engine_runs_the_shortest_episode(llama_server_url, bfcl_worker, first_80):
    engine = LlamaCppEngine(llama_server_url)

    def first_prompt(ep):
        return render_chatml(opening_messages(bfcl_worker.system_prompt(ep.id), ep.turns[0]))

    episode = min(first_80, key=lambda ep: len(first_prompt(ep)))
    records = []
    result = run_episode(
        engine, bfcl_worker, episode, render_chatml, 16384, "engine-test",
        count_tokens=lambda text: len(engine.tokenize(text)), seed=42, top_logprobs=1, cache_prompt=True,
        max_tokens_cap=24, max_requests=12,
        on_request=lambda info, req, comp: records.append((info, req, comp)),
    )
    engine.close()

    assert result.outcome in ("completed", "force_quit", "request_cap")
    assert result.n_requests == len(records) >= 1
    for info, request, completion in records:
        assert completion.outcome == "ok"
        assert request.max_tokens == 24
        # The injected tokenizer (/tokenize) agrees with what the server evaluated.
        assert completion.prompt_tokens == info.prompt_tokens
        assert completion.token_ids and len(completion.token_ids) <= 24
    first = records[0][2]
    assert 4000 < records[0][0].prompt_tokens < 16384 - 26
    # Later requests re-send the transcript, so the server reuses the cached prefix.
    for _, _, completion in records[1:]:
        assert completion.cached_tokens and completion.cached_tokens >= first.prompt_tokens
    texts = [t for turn in result.turns for t in turn.step_texts]
    assert texts == [c.text for _, _, c in records]

    score = score_episode(bfcl_worker, result)
    assert isinstance(score, Score)
    if result.outcome == "completed":
        assert score.n_turns == len(episode.turns)
