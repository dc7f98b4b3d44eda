"""Engine answers are bounded (a size cap, a total deadline per request) and validated (an answer without
what a verdict needs is an InvalidAnswer naming the field), against a hostile llama-server on loopback
(tests/adversarial/hostile_engine.py) and recorded llama.cpp shapes."""

from __future__ import annotations

import copy
import json
import resource
import time
from pathlib import Path

import httpx
import pytest

from kit.engines.base import CompletionRequest
from kit.engines.bounds import DEADLINE_FLOOR_S, AnswerBounds, bounded
from kit.engines.http import parsed
from kit.engines.llamacpp import LlamaCppEngine, normalize
from kit.core.errors import EngineError, InvalidAnswer
from tests.adversarial.hostile_engine import HostileEngine

DRIP_S = 0.4  # the drips here: a byte every 0.4 s (each read returns well within the client's per-read timeout)

# a /completion answer of llama-server 7e4c0a9 (n_predict 2, n_probs 1), trimmed to the fields read
GOOD = {"content": "I'm", "tokens": [57, 5248], "stop_type": "limit",
        "timings": {"cache_n": 0, "prompt_n": 32, "prompt_ms": 174.8, "predicted_n": 2, "predicted_ms": 33.2},
        "completion_probabilities": [
            {"id": 57, "token": "I", "bytes": [73], "logprob": -2.28,
             "top_logprobs": [{"id": 57, "token": "I", "bytes": [73], "logprob": -2.28}]},
            {"id": 5248, "token": "'m", "bytes": [39, 109], "logprob": -0.15,
             "top_logprobs": [{"id": 5248, "token": "'m", "bytes": [39, 109], "logprob": -0.15}]}]}
REQUEST = CompletionRequest("hi", max_tokens=4, seed=42, cache_prompt=False, top_logprobs=1)


@pytest.fixture
def hostile(request):
    engine = HostileEngine(request.param, drip_s=DRIP_S)
    client = LlamaCppEngine(engine.url)
    yield client
    client.close()
    engine.stop()


def test_the_default_deadline_has_a_floor_and_grows_with_the_tokens_asked_for():
    assert AnswerBounds().deadline(None) == AnswerBounds().deadline(16) == DEADLINE_FLOOR_S
    assert AnswerBounds().deadline(4096) == 4096
    assert AnswerBounds(request_deadline=2.5).deadline(4096) == 2.5


def test_an_engine_transport_loads_one_tls_context_and_its_pool_verifies_with_it(monkeypatch):
    import ssl

    from kit.engines.bounds import DeadlineTransport

    made: list[ssl.SSLContext] = []
    create = ssl.create_default_context
    monkeypatch.setattr(ssl, "create_default_context", lambda *a, **k: made.append(create(*a, **k)) or made[-1])
    transport = DeadlineTransport()
    assert len(made) == 1  # a context loads every root certificate: about 20 ms of CPU each
    context = transport._pool._ssl_context  # the pool the transport sends with (httpx==0.28.1, pinned)
    assert context is made[0] and context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    transport.close()


@pytest.mark.parametrize("hostile", ["huge"], indirect=True)
def test_an_endless_body_stops_at_the_cap(hostile):
    peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with bounded(AnswerBounds(max_answer_bytes=4 << 20)), pytest.raises(EngineError, match="more than 4 MiB") as info:
        hostile.complete(REQUEST)
    assert not isinstance(info.value, InvalidAnswer)  # the engine failed: the run stops, resume redoes the pass
    assert time.monotonic() - started < 30
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak_before
    assert grown_kib < 200 * 1024, f"reading the capped answer grew the process by {grown_kib} KiB"


@pytest.mark.parametrize("hostile", ["drip", "drip-headers"], indirect=True)
def test_a_drip_ends_at_the_total_deadline_not_at_a_per_read_timeout(hostile):
    deadline = 1.5 * DRIP_S  # each single read returns within DRIP_S: a per-read timeout alone would wait forever
    started = time.monotonic()
    with bounded(AnswerBounds(request_deadline=deadline)), pytest.raises(EngineError, match=f"within {deadline:g} s"):
        hostile.complete(REQUEST)
    assert deadline <= time.monotonic() - started < deadline + 1.5


@pytest.mark.parametrize("hostile", ["markup-build"], indirect=True)
def test_a_good_answer_within_the_bounds_is_read_as_before(hostile):
    with bounded(AnswerBounds(max_answer_bytes=4096, request_deadline=5)):
        done = hostile.complete(REQUEST)
    assert done.outcome == "ok" and done.text == "t0t1t2t3" and done.token_ids == (100, 101, 102, 103)
    assert done.cached_tokens == 0 and len(done.logprobs) == 4


def _without(path: str) -> dict:
    body = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node = body
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    del node[last]
    return body


@pytest.mark.parametrize("body, field", [
    (_without("content"), "`content`"),
    (_without("tokens"), "`tokens`"),
    (_without("timings"), "`timings`"),
    (_without("timings.prompt_n"), "`timings.prompt_n`"),
    (_without("completion_probabilities.1.logprob"), "`completion_probabilities[1].logprob`"),
    (_without("completion_probabilities.0.top_logprobs.0.token"), "`completion_probabilities[0].top_logprobs[0].token`"),
    ({**GOOD, "content": 5}, "`content` is wrong"),
    ({**GOOD, "tokens": ["57", 5248]}, "`tokens[0]` is wrong"),
    ({**GOOD, "tokens": [57, True]}, "`tokens[1]` is wrong"),
    ({**GOOD, "timings": {**GOOD["timings"], "cache_n": "0"}}, "`timings.cache_n` is wrong"),
    ({**GOOD, "timings": {**GOOD["timings"], "cache_n": -1}}, "`timings.cache_n` is wrong"),
    ([], "not a JSON object (list)"),
    ("ok", "not a JSON object (str)"),
])
def test_an_answer_without_what_a_verdict_needs_is_an_invalid_answer_naming_the_field(body, field):
    with pytest.raises(InvalidAnswer, match="POST /completion") as info:
        normalize(body, logprobs_asked=True)
    assert field in info.value.line() and "\n" not in info.value.line()


def test_probability_entries_asked_for_must_be_there():
    assert normalize(_without("completion_probabilities")).logprobs == ()  # not asked for: none
    with pytest.raises(InvalidAnswer, match="without `completion_probabilities`, which n_probs asked for"):
        normalize(_without("completion_probabilities"), logprobs_asked=True)


@pytest.mark.parametrize("content, why", [
    (b"", "an empty body"),
    (json.dumps(GOOD).encode()[:70], "not JSON"),
    (json.dumps(GOOD).replace("174.8", "NaN").encode(), "not JSON"),
    (json.dumps(GOOD).replace("174.8", "1e999").encode(), "not JSON"),
])
def test_a_body_that_is_not_json_is_an_invalid_answer(content, why):
    with pytest.raises(InvalidAnswer, match=why):
        parsed(httpx.Response(200, content=content), who="llama-server", what="POST /completion", fix="check it")


def test_props_of_the_wrong_shape_are_an_invalid_answer_not_a_traceback():
    def props(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"build_info": ["b1"], "total_slots": "1"})

    engine = LlamaCppEngine("http://llama.test", transport=httpx.MockTransport(props))
    with pytest.raises(InvalidAnswer, match="GET /props with an answer whose `build_info` is wrong"):
        engine.info()


def _fixture(engine: str, name: str) -> dict:
    return json.loads((Path(__file__).resolve().parents[1] / "fixtures" / engine / name).read_text())


def _vllm(edit) -> dict:
    body = _fixture("vllm", "completion_cached_tokens.json")
    edit(body)
    return body


@pytest.mark.parametrize("body, field", [
    (_vllm(lambda b: b["choices"][0].pop("text")), "`choices[0].text`"),
    (_vllm(lambda b: b.pop("usage")), "`usage`"),
    (_vllm(lambda b: b.update(choices=[])), "`choices` is wrong"),
    (_vllm(lambda b: b["choices"][0].update(logprobs=None)), "without `choices[0].logprobs`"),
    (_vllm(lambda b: b["choices"][0]["logprobs"].update(tokens="Janet")), "`choices[0].logprobs.tokens` is wrong"),
    (_vllm(lambda b: b["usage"].update(prompt_tokens="64")), "`usage.prompt_tokens` is wrong"),
])
def test_vllm_answers_without_what_a_verdict_needs_are_invalid(body, field):
    from kit.engines.vllm import normalize_completion

    with pytest.raises(InvalidAnswer, match="POST /v1/completions") as info:
        normalize_completion(body, logprobs_asked=True)
    assert field in info.value.line()


def test_ollama_and_chat_answers_without_their_text_are_invalid():
    from kit.engines import ollama
    from kit.engines.openai_compat import normalize_chat

    chat = _fixture("ollama", "chat_logprobs.json")
    assert ollama.normalize(chat).text == "Floating-point addition rounds"
    del chat["message"]["content"]
    with pytest.raises(InvalidAnswer, match="POST /api/chat with an answer without `message.content`"):
        ollama.normalize(chat)
    generate = _fixture("ollama", "generate.json")
    with pytest.raises(InvalidAnswer, match="`prompt_eval_duration` is wrong"):
        ollama.normalize({**generate, "prompt_eval_duration": "fast"})
    with pytest.raises(InvalidAnswer, match="POST /v1/chat/completions with an answer whose `choices` is wrong"):
        normalize_chat({"choices": []})
    with pytest.raises(InvalidAnswer, match=r"`choices\[0\].message.content` is wrong"):
        normalize_chat({"choices": [{"message": {"content": 7}}]})
