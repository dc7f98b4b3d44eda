"""The fake vLLM 0.11.0 server (tests/fake_engine/vllm.py) against the kit's own vLLM client and the
recorded response shapes in tests/fixtures/vllm/, so the fake cannot drift from them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kit.engines.base import CompletionRequest
from kit.engines.vllm import VllmEngine, parse_cache_counters
from tests.fake_engine.vllm_serve import MODEL, command, serve

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"
PROMPT = "<|im_start|>system\nYou are a helpful assistant. Answer briefly.<|im_end|>\n" * 4 + "Q: what is 2 + 2?"


def fixture(name: str):
    return json.loads((FIXTURES / name).read_text())


def shape(value, key: str | None = None):
    """Keys, nesting and nulls of a JSON value; a `top_logprobs` map becomes its size."""
    if isinstance(value, dict):
        if key == "top_logprobs":
            return ("map", len(value))
        return {k: shape(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return ["list", *sorted({json.dumps(shape(v, key), sort_keys=True) for v in value})]
    if value is None or isinstance(value, (bool, str)):
        return value if value is None else type(value).__name__
    return "number"


def request(max_tokens: int = 8, top: int = 1) -> CompletionRequest:
    return CompletionRequest(prompt=PROMPT, max_tokens=max_tokens, seed=7, top_logprobs=top)


def post(url: str, path: str, body: dict) -> httpx.Response:
    return httpx.post(url + path, json=body, timeout=10)


def test_kit_client_completes_and_reads_counters(tmp_path):
    with serve(tmp_path, "--enable-prompt-tokens-details", "--enable-prefix-caching") as url:
        engine = VllmEngine(url, prefix_caching=True, request_token_ids=True)
        try:
            completion = engine.complete(request())
            counters = engine.cache_counters()
        finally:
            engine.close()
        assert engine.model == MODEL
        assert completion.outcome == "ok" and completion.finish_reason == "length"
        assert len(completion.tokens) == 8 == len(completion.token_ids) == completion.decode_tokens
        assert completion.text == "".join(completion.tokens)
        assert completion.cached_tokens == 0 and completion.prompt_tokens > 16
        assert all(entry["top"][0]["token"] == entry["token"] for entry in completion.normalized().logprobs)
        assert counters.queries == completion.prompt_tokens and counters.hits == 0
        assert parse_cache_counters(httpx.get(url + "/metrics").text) == counters
        tokenized = post(url, "/tokenize", {"model": MODEL, "prompt": PROMPT, "add_special_tokens": False}).json()
        assert tokenized["count"] == len(tokenized["tokens"]) == completion.prompt_tokens
        assert tokenized["token_strs"] is None and tokenized["max_model_len"] == 16384


def test_repeat_hits_the_cache_and_changes_the_text(tmp_path):
    with serve(tmp_path, "--enable-prompt-tokens-details") as url:  # prefix caching on by default, as in 0.11
        engine = VllmEngine(url, prefix_caching=True, use_metrics=False)
        try:
            before = engine.cache_counters()
            cold = engine.complete(request())
            middle = engine.cache_counters()
            warm = engine.complete(request())
            after = engine.cache_counters()
        finally:
            engine.close()
    assert cold.cached_tokens is None and cold.raw["usage"]["prompt_tokens_details"] is None
    assert middle.hits - before.hits == 0 and middle.queries - before.queries == cold.prompt_tokens
    hits = after.hits - middle.hits
    assert after.queries - middle.queries == warm.prompt_tokens
    assert warm.cached_tokens == hits == warm.raw["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert hits > 0 and hits % 16 == 0 and hits < warm.prompt_tokens
    assert warm.text != cold.text and warm.tokens[0] != cold.tokens[0]


def test_whole_prompt_never_hits(tmp_path):
    prompt = "a " * 16  # 32 tokens: two full blocks, the last one always recomputed
    with serve(tmp_path, "--enable-prompt-tokens-details") as url:
        bodies = [post(url, "/v1/completions", {"model": MODEL, "prompt": prompt, "max_tokens": 4}).json()
                  for _ in range(2)]
    assert bodies[0]["usage"]["prompt_tokens"] == 32
    assert bodies[1]["usage"]["prompt_tokens_details"] == {"cached_tokens": 16}


def test_caching_off_never_moves(tmp_path):
    with serve(tmp_path, "--enable-prompt-tokens-details", "--no-enable-prefix-caching") as url:
        engine = VllmEngine(url, prefix_caching=False)
        try:
            before = engine.cache_counters()
            completions = [engine.complete(request()) for _ in range(3)]
            after = engine.cache_counters()
        finally:
            engine.close()
        metrics = httpx.get(url + "/metrics").text
    assert before == after and after.hits == after.queries == 0
    assert all(c.raw["usage"]["prompt_tokens_details"] is None for c in completions)
    assert len({c.text for c in completions}) == 1
    assert 'enable_prefix_caching="False"' in metrics


def test_bodies_have_the_recorded_shapes(tmp_path):
    with serve(tmp_path, "--enable-prompt-tokens-details", env={"VLLM_SERVER_DEV_MODE": "1"}) as url:
        base = {"model": MODEL, "prompt": PROMPT, "max_tokens": 8, "temperature": 0.0, "seed": 7}
        cold = post(url, "/v1/completions", {**base, "logprobs": 5}).json()
        warm = post(url, "/v1/completions", {**base, "logprobs": 1, "return_token_ids": True}).json()
        assert post(url, "/reset_prefix_cache", {}).status_code == 200
        again = post(url, "/v1/completions", {**base, "logprobs": 5}).json()
        assert shape(cold) == shape(again) == shape(fixture("completion_logprobs_null_cached.json"))
        assert shape(warm) == shape(fixture("completion_cached_tokens.json"))
        assert shape(httpx.get(url + "/v1/models").json()) == shape(fixture("models.json"))
        assert httpx.get(url + "/version").json() == fixture("version.json")
        health = httpx.get(url + "/health")
        assert health.status_code == 200 and health.content == b""
        families = {f.name: f for f in text_string_to_metric_families(httpx.get(url + "/metrics").text)}
    recorded = {f.name: f.type for f in text_string_to_metric_families((FIXTURES / "metrics_before.txt").read_text())}
    assert recorded.items() <= {name: f.type for name, f in families.items()}.items()
    config = families["vllm:cache_config_info"].samples[0].labels
    assert config["block_size"] == "16" and config["enable_prefix_caching"] == "True"
    assert config["gpu_memory_utilization"] == "0.9"


def test_errors_and_flags(tmp_path):
    bad = subprocess.run(command("--no-such-flag"), capture_output=True, text=True, timeout=10)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--no-such-flag" in bad.stderr
    flags = ("--max-model-len", "64", "--max-num-seqs", "1", "--seed", "42", "--served-model-name", "x",
             "--gpu-memory-utilization", "0.5")
    with serve(tmp_path, *flags, env={"FAKE_VLLM_NO_TOKEN_IDS": "1"}) as url:
        wrong = post(url, "/v1/completions", {"model": "gpt-4", "prompt": "hi", "max_tokens": 1})
        assert wrong.status_code == 404 and wrong.json() == fixture("error_model_not_found.json")
        overflow = post(url, "/v1/completions", {"model": MODEL, "prompt": "a " * 40, "max_tokens": 1})
        assert overflow.status_code == 400 and shape(overflow.json()) == shape(fixture("error_context_overflow.json"))
        assert overflow.json()["error"]["message"].startswith(
            "This model's maximum context length is 64 tokens. However, your request has 80 input tokens.")
        too_long = post(url, "/v1/completions", {"model": MODEL, "prompt": "a " * 10, "max_tokens": 50})
        assert too_long.status_code == 400 and too_long.json()["error"]["message"] == (
            "'max_tokens' or 'max_completion_tokens' is too large: 50. This model's maximum context length is "
            "64 tokens and your request has 20 input tokens (50 > 64 - 20).")
        no_ids = post(url, "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2, "return_token_ids": True})
        assert no_ids.json()["choices"][0]["token_ids"] is None
        assert post(url, "/reset_prefix_cache", {}).status_code == 404  # no VLLM_SERVER_DEV_MODE
        assert 'gpu_memory_utilization="0.5"' in httpx.get(url + "/metrics").text
        engine = VllmEngine(url, prefix_caching=True)
        try:
            refused = engine.complete(CompletionRequest(prompt="a " * 40, max_tokens=1, seed=7))
        finally:
            engine.close()
    assert refused.outcome == "context_overflow" and refused.prompt_tokens == 80


@pytest.mark.parametrize("stop", [["functions"], "functions"])
def test_stop_strings(tmp_path, stop):
    with serve(tmp_path) as url:
        choice = post(url, "/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 50, "stop": stop,
                                               "logprobs": 1}).json()["choices"][0]
    assert choice["text"] == "I cannot do that with the " and choice["finish_reason"] == "stop"
    assert choice["stop_reason"] == "functions" and choice["logprobs"]["tokens"][-1] == "functions"
