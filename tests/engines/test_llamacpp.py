"""The llama.cpp client against the real embedded llama-server."""

import pytest

from kit.core.digests import sha256_text
from kit.engines.base import CompletionRequest
from kit.engines.llamacpp import normalize, request_body

pytestmark = pytest.mark.engine


def test_cache_prompt_false_recomputes_and_true_hits(llama_engine):
    prompt = llama_engine.apply_template([{"role": "user", "content": "Count from one to five."}])
    assert prompt.rstrip().endswith("assistant")
    request = CompletionRequest(prompt, max_tokens=8, seed=7, cache_prompt=False, top_logprobs=3)
    cold = llama_engine.complete(request)
    assert cold.sent.endpoint == "/completion" and cold.sent.body == request_body(request)
    assert cold.sent.body["seed"] == 7 and cold.sent.prompt_sha256 == sha256_text(prompt)
    assert cold.sent.started.endswith("+00:00") and 0 < cold.sent.wall_seconds < 60
    warm = llama_engine.complete(CompletionRequest(prompt, max_tokens=8, seed=42, cache_prompt=True, top_logprobs=3))
    assert cold.cached_tokens == 0 and cold.prefill_tokens == cold.prompt_tokens
    assert warm.cached_tokens > 0 and warm.cached_tokens + warm.prefill_tokens == cold.prompt_tokens
    assert cold.prompt_tokens == len(llama_engine.tokenize(prompt))
    for completion in (cold, warm):
        assert completion.outcome == "ok" and completion.finish_reason in ("stop", "length")
        assert 1 <= len(completion.token_ids) <= 8
        assert len(completion.logprobs) <= len(completion.token_ids)
        assert all(len(entry["top"]) == 3 and entry["logprob"] <= 0 for entry in completion.logprobs)
        assert completion.prefill_ms > 0 and completion.decode_tokens == len(completion.token_ids)


def test_a_prompt_longer_than_the_context_is_a_recorded_outcome(llama_engine):
    prompt = "word " * 20000  # beyond the 16k context of the shared test server
    result = llama_engine.complete(CompletionRequest(prompt, max_tokens=4, seed=42, cache_prompt=False))
    assert result.outcome == "context_overflow"
    assert result.token_ids == () and result.raw["error"]["type"] == "exceed_context_size_error"


def test_info_reports_the_pinned_build(llama_engine):
    info = llama_engine.info()
    assert info["build_info"] == "b1-7e4c0a9" and info["total_slots"] == 1


def test_merged_utf8_entries_keep_every_emitted_id():
    # Shape recorded from llama-server 7e4c0a9: three emitted ids, the first two halves of one character
    # reported as a single probability entry.
    body = {"content": "é!", "tokens": [131, 102, 0], "stop_type": "limit",
            "timings": {"cache_n": 4, "prompt_n": 1, "prompt_ms": 2.0, "predicted_n": 3, "predicted_ms": 9.0},
            "completion_probabilities": [
                {"id": 102, "token": "é", "bytes": [195, 169], "logprob": -0.5, "top_logprobs": []},
                {"id": 0, "token": "!", "bytes": [33], "logprob": -0.1, "top_logprobs": []}]}
    completion = normalize(body)
    assert completion.token_ids == (131, 102, 0) and completion.tokens == ("é", "!")
    assert completion.cached_tokens == 4 and completion.prompt_tokens == 5 and completion.finish_reason == "length"
