"""The vLLM 0.11.0 client against vLLM-shaped responses served by httpx.MockTransport.

vLLM needs a GPU and cannot run on the test machine, so the server is replaced by the shared fake
engine's `VllmReplay` (tests/fake_engine/vllm.py), which answers with the fixtures in tests/fixtures/vllm/ (see the README there for their sources and for
the fact that their values are illustrative). Everything on the client side runs for real.
"""

from __future__ import annotations

import json
import math

import httpx
import orjson
import pytest

from kit.engines.base import CompletionRequest, Engine
from kit.engines.vllm import VllmEngine, normalize_completion, parse_cache_counters
from kit.core.errors import EngineError
from tests.fake_engine.core import recorded
from tests.fake_engine.vllm import VllmReplay

def fixture_json(name: str) -> dict:
    return recorded("vllm", name)


def fixture_text(name: str) -> str:
    return recorded("vllm", name)


def engine_for(server: VllmReplay, **kwargs) -> VllmEngine:
    return VllmEngine("http://127.0.0.1:8000/", transport=server.transport(), **kwargs)


REQUEST = CompletionRequest(prompt="<|im_start|>system\n...", max_tokens=8, seed=42, top_logprobs=5)


def test_is_an_engine_and_states_its_capabilities():
    engine = engine_for(VllmReplay(), dev_mode=False)
    assert isinstance(engine, Engine)
    caps = engine.capabilities
    assert caps.per_request_cache_bypass is False
    assert caps.reset_endpoint is False
    assert caps.token_ids is False
    assert engine_for(VllmReplay(), dev_mode=True).capabilities.reset_endpoint is True


def test_request_body_has_protocol_settings_and_served_model():
    server = VllmReplay(completions=[(200, fixture_json("completion_logprobs_null_cached.json"))])
    engine = engine_for(server, use_metrics=False)
    done = engine.complete(CompletionRequest(prompt="P", max_tokens=1024, seed=42, top_logprobs=5, stop=("####",)))
    (body,) = server.posted("/v1/completions")
    assert (done.sent.endpoint, done.sent.body) == ("/v1/completions", body)  # what was sent, as sent
    assert body == {
        "model": "Qwen/Qwen2.5-7B-Instruct",
        "prompt": "P",
        "max_tokens": 1024,
        "temperature": 0.0,
        "seed": 42,
        "logprobs": 5,
        "stop": ["####"],
    }
    assert "cache_prompt" not in body  # vLLM has no per-request switch; it would be ignored


def test_completion_normalized_with_string_tokens_and_no_ids():
    body = fixture_json("completion_logprobs_null_cached.json")
    done = normalize_completion(body)
    assert done.text == "Janet's ducks lay 16"
    assert done.tokens == ("Jan", "et", "'s", " ducks", " lay", " ", "1", "6")
    assert "".join(done.tokens) == done.text
    assert done.token_ids is None
    assert done.finish_reason == "length"
    assert done.prompt_tokens == 64 and done.decode_tokens == 8
    assert done.prefill_ms is None and done.decode_ms is None
    assert len(done.logprobs) == 8
    first = done.logprobs[0]
    assert first["token"] == "Jan" and first["logprob"] == pytest.approx(-0.0003159)
    assert [t["token"] for t in first["top"]] == ["Jan", "To", "First", "Let", "Step"]
    assert all(a["logprob"] >= b["logprob"] for a, b in zip(first["top"], first["top"][1:]))
    assert done.raw is body
    assert done.outcome == "ok"


def test_null_cached_tokens_is_unknown_not_zero():
    done = normalize_completion(fixture_json("completion_logprobs_null_cached.json"))
    assert done.cached_tokens is None
    assert done.prefill_tokens is None


def test_cached_tokens_and_token_ids_when_present():
    done = normalize_completion(fixture_json("completion_cached_tokens.json"))
    assert done.cached_tokens == 48
    assert done.prefill_tokens == 16
    assert done.token_ids == (18315, 295, 594, 77778)
    assert len(done.token_ids) == len(done.tokens)


def test_top_logprobs_are_ranked_even_if_the_server_order_is_not():
    body = fixture_json("completion_logprobs_null_cached.json")
    first_top = body["choices"][0]["logprobs"]["top_logprobs"][0]
    body["choices"][0]["logprobs"]["top_logprobs"][0] = dict(reversed(list(first_top.items())))
    done = normalize_completion(body)
    assert [t["token"] for t in done.logprobs[0]["top"]] == ["Jan", "To", "First", "Let", "Step"]


def test_metrics_delta_gives_cached_tokens_when_usage_is_null():
    server = VllmReplay(
        completions=[(200, fixture_json("completion_logprobs_null_cached.json"))] * 2,
        metrics=[
            fixture_text("metrics_before.txt"),
            fixture_text("metrics_after_cold.txt"),
            fixture_text("metrics_after_cold.txt"),
            fixture_text("metrics_after_warm.txt"),
        ],
    )
    engine = engine_for(server)
    cold = engine.complete(REQUEST)
    assert cold.cached_tokens == 0  # measured: +64 queries, +0 hits
    assert cold.prefill_tokens == 64
    assert engine.last_cache_telemetry.source == "metrics"
    warm = engine.complete(REQUEST)
    assert warm.cached_tokens == 48
    assert warm.prefill_tokens == 16
    assert engine.last_cache_telemetry.hits_delta == 48 and engine.last_cache_telemetry.queries_delta == 64
    paths = [r.url.path for r in server.requests if r.url.path != "/v1/models"]
    assert paths == ["/metrics", "/v1/completions", "/metrics"] * 2  # counters read around each request


def test_usage_cached_tokens_wins_over_metrics():
    server = VllmReplay(
        completions=[(200, fixture_json("completion_cached_tokens.json"))],
        metrics=[fixture_text("metrics_before.txt"), fixture_text("metrics_after_cold.txt")],
    )
    engine = engine_for(server)
    done = engine.complete(REQUEST)
    assert done.cached_tokens == 48
    assert engine.last_cache_telemetry.source == "usage"
    # both measures are kept; here /metrics moved +64 queries and +0 hits around it: a disagreement, flagged
    assert done.cache_measures == {"usage": 48, "metrics_hits": 0.0, "metrics_queries": 64.0, "source": "usage",
                                   "disagree": True}


def test_measures_that_agree_are_both_recorded():
    server = VllmReplay(
        completions=[(200, fixture_json("completion_cached_tokens.json"))],
        metrics=[fixture_text("metrics_after_cold.txt"), fixture_text("metrics_after_warm.txt")],
    )
    done = engine_for(server).complete(REQUEST)
    assert done.cache_measures == {"usage": 48, "metrics_hits": 48.0, "metrics_queries": 64.0, "source": "usage",
                                   "disagree": False}


def test_delta_not_matching_the_prompt_stays_unknown():
    # Another request ran in between: queries moved by 128, not by this request's 64 tokens.
    after = fixture_text("metrics_after_warm.txt")
    server = VllmReplay(
        completions=[(200, fixture_json("completion_logprobs_null_cached.json"))],
        metrics=[fixture_text("metrics_before.txt"), after],
    )
    engine = engine_for(server)
    done = engine.complete(REQUEST)
    assert done.cached_tokens is None
    assert engine.last_cache_telemetry.queries_delta == 128


def test_caching_off_server_counters_do_not_move_so_cached_is_unknown():
    server = VllmReplay(
        completions=[(200, fixture_json("completion_logprobs_null_cached.json"))],
        metrics=[fixture_text("metrics_caching_off.txt")],
    )
    done = engine_for(server, prefix_caching=False).complete(REQUEST)
    assert done.cached_tokens is None


def test_missing_metrics_endpoint_leaves_cached_unknown():
    server = VllmReplay(completions=[(200, fixture_json("completion_logprobs_null_cached.json"))], metrics=[])
    assert engine_for(server).complete(REQUEST).cached_tokens is None


def test_parse_cache_counters_reads_the_fixture_and_ignores_lookalikes():
    counters = parse_cache_counters(fixture_text("metrics_after_warm.txt"))
    assert (counters.queries, counters.hits) == (1344.0, 688.0)
    assert parse_cache_counters("# TYPE x counter\nx_total 1\n") is None


def test_parse_cache_counters_sums_engines():
    text = (
        'vllm:prefix_cache_hits_total{engine="0",model_name="m"} 10.0\n'
        'vllm:prefix_cache_hits_total{engine="1",model_name="m"} 5.0\n'
        'vllm:prefix_cache_queries_total{engine="0",model_name="m"} 30.0\n'
        'vllm:prefix_cache_queries_total{engine="1",model_name="m"} 20.0\n'
    )
    counters = parse_cache_counters(text)
    assert (counters.hits, counters.queries) == (15.0, 50.0)


@pytest.mark.parametrize(
    "fixture, prompt_tokens", [("error_context_overflow.json", 17002), ("error_max_tokens_too_large.json", 13000)]
)
def test_context_overflow_is_an_outcome(fixture, prompt_tokens):
    body = fixture_json(fixture)
    server = VllmReplay(completions=[(400, body)], metrics=[fixture_text("metrics_before.txt")])
    done = engine_for(server).complete(REQUEST)
    assert done.outcome == "context_overflow"
    assert done.prompt_tokens == prompt_tokens
    assert done.tokens == () and done.logprobs == () and done.token_ids is None
    assert done.cached_tokens is None
    assert done.raw == body


def test_flat_pre_0_10_error_body_is_also_understood():
    flat = {"object": "error", "message": "This model's maximum context length is 16384 tokens. However, you "
            "requested 17408 tokens (16384 in the messages, 1024 in the completion).", "type": "BadRequestError",
            "param": None, "code": 400}  # fmt: skip
    done = engine_for(VllmReplay(completions=[(400, flat)]), use_metrics=False).complete(REQUEST)
    assert done.outcome == "context_overflow" and done.prompt_tokens == 16384


def test_other_errors_raise_with_the_servers_message():
    server = VllmReplay(completions=[(404, fixture_json("error_model_not_found.json"))])
    with pytest.raises(EngineError, match="does not exist"):
        engine_for(server, use_metrics=False, model="gpt-4").complete(REQUEST)
    bad = VllmReplay(completions=[(400, {"error": {"message": "temperature must be non-negative", "code": 400}})])
    with pytest.raises(EngineError, match="HTTP 400: temperature"):
        engine_for(bad, use_metrics=False).complete(REQUEST)


def test_unreachable_server_is_an_engine_error():
    def refuse(request):
        raise httpx.ConnectError("connection refused", request=request)

    engine = VllmEngine("http://127.0.0.1:9", model="m", use_metrics=False, transport=httpx.MockTransport(refuse))
    with pytest.raises(EngineError, match="did not answer"):
        engine.complete(REQUEST)


def test_cache_arm_must_match_the_server():
    server = VllmReplay(completions=[(200, fixture_json("completion_logprobs_null_cached.json"))])
    on = engine_for(server, prefix_caching=True, use_metrics=False)
    with pytest.raises(EngineError, match="per server process"):
        on.complete(CompletionRequest(prompt="P", max_tokens=1, seed=42, cache_prompt=False))
    unknown = engine_for(server, use_metrics=False)
    with pytest.raises(EngineError, match="--no-enable-prefix-caching"):
        unknown.complete(CompletionRequest(prompt="P", max_tokens=1, seed=42, cache_prompt=False))
    off = engine_for(server, prefix_caching=False, use_metrics=False)
    assert off.complete(CompletionRequest(prompt="P", max_tokens=1, seed=42, cache_prompt=False)).outcome == "ok"
    assert server.posted("/v1/completions")  # the matching arm was sent


def test_token_ids_requested_only_when_asked():
    server = VllmReplay(completions=[(200, fixture_json("completion_cached_tokens.json"))])
    engine = engine_for(server, request_token_ids=True, use_metrics=False)
    assert engine.capabilities.token_ids is True
    done = engine.complete(REQUEST)
    assert server.posted("/v1/completions")[0]["return_token_ids"] is True
    assert done.token_ids == (18315, 295, 594, 77778)


def test_reset_cache_is_accepted_on_200_and_refused_naming_dev_mode_otherwise():
    server = VllmReplay(reset_status=200)
    reset = engine_for(server, dev_mode=True).reset_cache()
    assert reset.accepted and reset.method == "POST /reset_prefix_cache"
    assert [(r.method, r.url.path) for r in server.requests] == [("POST", "/reset_prefix_cache")]
    refused = engine_for(VllmReplay(reset_status=404), dev_mode=True).reset_cache()
    assert not refused.accepted and "HTTP 404" in refused.detail and "VLLM_SERVER_DEV_MODE=1" in refused.detail


def test_info_reports_version_model_and_settings():
    info = engine_for(VllmReplay(), prefix_caching=False).info()
    assert info["version"] == "0.11.0"
    assert info["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert info["models"]["data"][0]["max_model_len"] == 16384
    assert info["prefix_caching"] is False
    assert info["capabilities"]["per_request_cache_bypass"] is False


def test_missing_logprob_for_emitted_token_is_refused():
    body = fixture_json("completion_logprobs_null_cached.json")
    body["choices"][0]["logprobs"]["token_logprobs"][2] = None
    with pytest.raises(EngineError, match="no logprob"):
        normalize_completion(body)


def test_completion_is_json_serializable():
    done = normalize_completion(fixture_json("completion_cached_tokens.json"))
    written = json.loads(orjson.dumps(done.normalized()))  # as a record writes it
    assert math.isfinite(written["logprobs"][0]["logprob"])
