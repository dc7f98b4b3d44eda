"""The Ollama client against recorded Ollama response shapes (tests/fixtures/ollama/README.md says which
values are the documentation's and which were constructed). Ollama cannot run on the test machine, so
the network is the shared fake engine's Ollama (tests/fake_engine/ollama.py) through httpx.MockTransport;
everything else is the real client and provider."""

from __future__ import annotations


import httpx
import pytest

from kit.engines.base import CompletionRequest
from kit.engines.ollama import OllamaEngine, normalize, same_model
from kit.core.errors import EngineError
from kit.launch.instance import OllamaProvider
from tests.fake_engine.clock import Clock
from tests.fake_engine.core import recorded
from tests.fake_engine.ollama import Ollama as FakeOllama

def engine(fake: FakeOllama, model: str = "llama3.2", clock: Clock | None = None) -> OllamaEngine:
    clock = clock or Clock()
    return OllamaEngine("http://ollama.test:11434", model, transport=fake.transport(),
                        sleep=clock.sleep, clock=clock)


def test_chat_normalizes_nanoseconds_and_logprobs_and_sends_greedy_options():
    fake = FakeOllama()
    client = engine(fake, "gpt-oss:20b")
    messages = [{"role": "user", "content": "Why is floating-point addition not associative?"}]
    completion = client.complete(CompletionRequest(messages=tuple(messages), max_tokens=4, seed=7, top_logprobs=2))
    method, path, body = fake.calls()[-1]
    assert (method, path) == ("POST", "/api/chat")
    assert body == {"model": "gpt-oss:20b", "messages": messages, "stream": False,
                    "options": {"temperature": 0.0, "seed": 7, "num_predict": 4},
                    "logprobs": True, "top_logprobs": 2}
    assert (completion.sent.endpoint, completion.sent.body) == ("/api/chat", body)  # what was sent, as sent
    assert completion.text == "Floating-point addition rounds"
    assert completion.prefill_ms == pytest.approx(216.004)
    assert completion.decode_ms == pytest.approx(88.13)
    assert completion.prompt_tokens == 116 and completion.decode_tokens == 4
    assert completion.cached_tokens is None and completion.prefill_tokens is None  # Ollama cannot say
    assert completion.token_ids is None
    assert completion.tokens == ("Float", "ing", "-point", " addition rounds")
    assert "".join(completion.tokens) == completion.text
    assert completion.logprobs[3]["top"][1]["token"] == " numbers"
    assert completion.finish_reason == "length"


def test_chat_without_logprobs_and_generate_raw():
    fake = FakeOllama(chat="chat_no_logprobs.json")
    client = engine(fake)
    completion = client.complete(CompletionRequest(messages=({"role": "user", "content": "Hello!"},), max_tokens=8,
                                                   seed=42, top_logprobs=0))
    assert completion.logprobs == () and completion.text == "Hello! How are you today?"
    assert completion.prefill_ms == pytest.approx(383.809)
    assert "logprobs" not in fake.calls()[-1][2]
    generated = client.complete(CompletionRequest(prompt="<|user|>hi", max_tokens=16, seed=42, top_logprobs=0))
    _, path, body = fake.calls()[-1]
    assert path == "/api/generate" and body["raw"] is True and body["options"]["num_predict"] == 16
    assert generated.sent.endpoint == "/api/generate" and generated.sent.body == body
    assert generated.text.startswith("The sky is blue") and generated.decode_ms == pytest.approx(4709.213)
    with pytest.raises(EngineError, match="cannot skip its prompt cache"):
        client.complete(CompletionRequest(prompt="x", max_tokens=1, seed=42, cache_prompt=False))


def test_unload_confirmed_when_ps_stops_listing_the_model():
    fake = FakeOllama(ps_sequence=["ps_loaded.json", "ps_loaded.json", "ps_empty.json"])
    clock = Clock()
    result = engine(fake, clock=clock).unload(timeout=10, poll=0.5)
    assert result.confirmed and result.polls == 3 and result.seconds == pytest.approx(1.0)
    unload_request = fake.calls()[0]
    assert unload_request == ("POST", "/api/generate", {"model": "llama3.2", "keep_alive": 0})
    assert [r[1] for r in fake.calls()[1:]] == ["/api/ps"] * 3


def test_unload_not_confirmed_in_time_says_so():
    fake = FakeOllama(ps_sequence=["ps_loaded.json"])  # the roster keeps listing the model
    result = engine(fake).unload(timeout=2, poll=0.5)
    assert not result.confirmed
    assert result.seconds >= 2 and "still listed by /api/ps after 2 s" in result.detail
    assert result.to_json()["confirmed"] is False


def test_model_names_match_with_the_default_tag():
    entry = recorded("ollama", "ps_loaded.json")["models"][0]
    assert same_model(entry, "llama3.2") and same_model(entry, "llama3.2:latest")
    assert not same_model(entry, "llama3.1") and not same_model(entry, "llama3.2:1b")


def test_info_records_version_template_and_parameters():
    info = engine(FakeOllama()).info()
    assert info["version"] == "0.12.11"
    assert info["template"].startswith("{{ if .System }}") and len(info["template_sha256"]) == 64
    assert "num_keep" in info["parameters"] and info["details"]["quantization_level"] == "Q4_0"
    assert info["capabilities"]["cached_token_telemetry"] is False


def test_missing_model_and_dead_server_are_clear_errors():
    with pytest.raises(EngineError, match="HTTP 404.*not found.*ollama pull llama9"):
        engine(FakeOllama(), "llama9").complete(CompletionRequest(messages=({"role": "user", "content": "x"},),
                                                                  max_tokens=1, seed=42))

    def refuse(request):
        raise httpx.ConnectError("connection refused", request=request)

    dead = OllamaEngine("http://ollama.test:11434", "llama3.2", transport=httpx.MockTransport(refuse))
    with pytest.raises(EngineError, match="ollama serve"):
        dead.version()


def test_normalize_of_the_unload_answer_is_an_empty_completion():
    completion = normalize(recorded("ollama", "generate_unload.json"))
    assert completion.text == "" and completion.finish_reason == "unload" and completion.prefill_ms is None


def test_provider_sessions_start_from_a_confirmed_unload(tmp_path):
    fake = FakeOllama(ps_sequence=["ps_loaded.json", "ps_empty.json"])
    provider = OllamaProvider("http://ollama.test:11434", "llama3.2",
                              make_engine=lambda url, model: engine(fake, model))
    with provider.session("c1", tmp_path) as live:
        assert live.launch["reload"]["confirmed"] is True
        assert live.launch["version"] == "0.12.11"
    stuck = FakeOllama(ps_sequence=["ps_loaded.json"])
    provider = OllamaProvider("http://ollama.test:11434", "llama3.2", unload_timeout=1,
                              make_engine=lambda url, model: engine(stuck, model))
    with provider.session("c2", tmp_path) as live:
        assert live.launch["reload"]["confirmed"] is False
        assert "still listed" in live.launch["reload"]["detail"]
