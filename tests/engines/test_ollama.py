"""The Ollama client against recorded Ollama response shapes (tests/fixtures/ollama/README.md says which
values are the documentation's and which were constructed). Ollama cannot run on the test machine, so
the network is replaced by httpx.MockTransport; everything else is the real client and provider."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from kit.engines.base import CompletionRequest
from kit.engines.ollama import OllamaEngine, normalize, same_model
from kit.errors import EngineError
from kit.launch.instance import OllamaProvider

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ollama"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / name).read_text())


class FakeOllama:
    """Routes requests to fixture bodies; `/api/ps` answers from a list of fixtures, one per poll."""

    def __init__(self, ps_sequence=("ps_empty.json",), chat="chat_logprobs.json"):
        self.ps_sequence = list(ps_sequence)
        self.chat = chat
        self.requests: list[tuple[str, str, dict | None]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.requests.append((request.method, request.url.path, body))
        path = request.url.path
        if path == "/api/ps":
            name = self.ps_sequence.pop(0) if len(self.ps_sequence) > 1 else self.ps_sequence[0]
            return httpx.Response(200, json=fixture(name))
        if path == "/api/generate":
            if body.get("keep_alive") == 0 and "prompt" not in body:
                return httpx.Response(200, json=fixture("generate_unload.json"))
            return httpx.Response(200, json=fixture("generate.json"))
        if path == "/api/chat":
            if body["model"] == "llama9":
                return httpx.Response(404, json=fixture("error_model_not_found.json"))
            return httpx.Response(200, json=fixture(self.chat))
        if path == "/api/show":
            return httpx.Response(200, json=fixture("show.json"))
        if path == "/api/version":
            return httpx.Response(200, json=fixture("version.json"))
        return httpx.Response(404, json={"error": "not found"})


class Clock:
    """A fake clock the unload poll advances through `sleep`."""

    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def engine(fake: FakeOllama, model: str = "llama3.2", clock: Clock | None = None) -> OllamaEngine:
    clock = clock or Clock()
    return OllamaEngine("http://ollama.test:11434", model, transport=httpx.MockTransport(fake),
                        sleep=clock.sleep, clock=clock)


def test_chat_normalizes_nanoseconds_and_logprobs_and_sends_greedy_options():
    fake = FakeOllama()
    client = engine(fake, "gpt-oss:20b")
    messages = [{"role": "user", "content": "Why is floating-point addition not associative?"}]
    completion = client.complete(CompletionRequest(messages=tuple(messages), max_tokens=4, seed=7, top_logprobs=2))
    method, path, body = fake.requests[-1]
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
    assert "logprobs" not in fake.requests[-1][2]
    generated = client.complete(CompletionRequest(prompt="<|user|>hi", max_tokens=16, seed=42, top_logprobs=0))
    _, path, body = fake.requests[-1]
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
    unload_request = fake.requests[0]
    assert unload_request == ("POST", "/api/generate", {"model": "llama3.2", "keep_alive": 0})
    assert [r[1] for r in fake.requests[1:]] == ["/api/ps"] * 3


def test_unload_not_confirmed_in_time_says_so():
    fake = FakeOllama(ps_sequence=["ps_loaded.json"])  # the roster keeps listing the model
    result = engine(fake).unload(timeout=2, poll=0.5)
    assert not result.confirmed
    assert result.seconds >= 2 and "still listed by /api/ps after 2 s" in result.detail
    assert result.to_json()["confirmed"] is False


def test_model_names_match_with_the_default_tag():
    entry = fixture("ps_loaded.json")["models"][0]
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
    completion = normalize(fixture("generate_unload.json"))
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
