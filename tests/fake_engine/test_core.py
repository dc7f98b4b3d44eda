"""The shared fake engine answers the same through both of its doors: httpx.MockTransport in this process,
and the loopback HTTP server a client reaches over a real socket."""

from __future__ import annotations

from types import SimpleNamespace

import httpx
import pytest

from kit.engines.base import CompletionRequest
from kit.engines.llamacpp import LlamaCppEngine
from kit.engines.ollama import OllamaEngine
from kit.engines.openai_compat import OpenAICompatEngine
from kit.engines.vllm import VllmEngine
from kit.core.errors import EngineError
from tests.fake_engine.clock import Clock
from tests.fake_engine.llamacpp import Failure, LlamaCpp
from tests.fake_engine.ollama import Ollama
from tests.fake_engine.openai import OpenAIChat
from tests.fake_engine.vllm import VllmModel

PROMPT = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" * 4 + "Q: what is 2 + 2?"


def _vllm_answers(engine: VllmEngine) -> list[tuple]:
    try:
        done = [engine.complete(CompletionRequest(prompt=PROMPT, max_tokens=6, seed=7, top_logprobs=2))
                for _ in range(2)]
        counters = engine.cache_counters()
    finally:
        engine.close()
    return [(c.text, c.tokens, c.token_ids, c.cached_tokens, c.prompt_tokens, c.finish_reason) for c in done] + \
        [(counters.queries, counters.hits)]


def test_vllm_model_answers_alike_through_the_transport_and_the_loopback_server():
    options = {"prefix_caching": True, "request_token_ids": True}
    in_process = _vllm_answers(VllmEngine("http://vllm.test:8000", transport=VllmModel().transport(), **options))
    with VllmModel().serve() as url:
        over_socket = _vllm_answers(VllmEngine(url, **options))
    assert in_process == over_socket
    (cold, warm, (queries, hits)) = in_process
    assert cold[3] == 0 and warm[3] == hits > 0 and cold[0] != warm[0]  # the second request hit the cache
    assert queries == cold[4] + warm[4]


def test_a_crashed_llama_server_gives_no_response_through_either_door():
    container = SimpleNamespace(name="kit-run-s1", states=[], log_bytes=b"")
    request = CompletionRequest(prompt="one two three", max_tokens=3, seed=1, top_logprobs=1)
    fake = LlamaCpp(container, Failure("s1", after=1))
    with fake.serve() as url:
        engine = LlamaCppEngine(url)
        try:
            first = engine.complete(request)
            with pytest.raises((EngineError, httpx.TransportError)):
                engine.complete(request)
        finally:
            engine.close()
    assert first.outcome == "ok" and first.text == "The answer is 4."
    assert container.states == [{"Status": "exited", "ExitCode": 139}] and b"illegal memory access" in container.log_bytes
    assert fake.paths().count("/completion") == 2


def test_ollama_answers_alike_through_the_transport_and_the_loopback_server():
    messages = ({"role": "user", "content": "Why is floating-point addition not associative?"},)
    request = CompletionRequest(messages=messages, max_tokens=4, seed=7, top_logprobs=2)
    clock = Clock()
    in_process = OllamaEngine("http://ollama.test:11434", "llama3.2", transport=Ollama().transport(),
                              sleep=clock.sleep, clock=clock).complete(request)
    fake = Ollama()
    with fake.serve() as url:
        over_socket = OllamaEngine(url, "llama3.2", sleep=clock.sleep, clock=clock).complete(request)
    assert (in_process.text, in_process.tokens, in_process.prefill_ms) == \
        (over_socket.text, over_socket.tokens, over_socket.prefill_ms)
    assert in_process.text and fake.calls()[-1][:2] == ("POST", "/api/chat")


def test_an_openai_chat_server_answers_alike_through_the_transport_and_the_loopback_server():
    messages = ({"role": "user", "content": "Why is floating-point addition not associative?"},)
    request = CompletionRequest(messages=messages, max_tokens=2, seed=7, top_logprobs=0)
    timings = {"cache_n": 61, "prompt_n": 3, "prompt_ms": 18.2, "predicted_ms": 25.0}
    in_process = OpenAICompatEngine("http://chat.test:8000/v1", transport=OpenAIChat(timings=timings).transport())
    fake = OpenAIChat(timings=timings)
    with fake.serve() as url:
        over_socket = OpenAICompatEngine(url + "/v1")
        answers = [engine.complete(request) for engine in (in_process, over_socket)]
    assert {(a.text, a.cached_tokens, a.prefill_tokens, a.prefill_ms) for a in answers} == {("Floating-point", 61, 3, 18.2)}
    assert [path for _, path, _ in fake.calls()] == ["/v1/models", "/v1/chat/completions"]
    assert fake.posted("/v1/chat/completions")[0]["messages"] == list(messages)
