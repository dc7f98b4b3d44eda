"""llama-server (llama.cpp 7e4c0a9) as a fake engine, for where the real one cannot run: inside a fake
container (tests/launch/fake_docker.py), or a test that needs an answer the real one will not give.

It answers the endpoints the protocols call (`/props`, `/apply-template`, `/tokenize`, `/completion`)
with llama-server's response shapes, and fails on cue: `Failure` says in which session (container) and
after how many completions, and how — the container exits (its status turns `exited`, its log gains the
crash line, the request gets no response) or the server answers HTTP 500 while its container keeps running.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import httpx

from kit.engines.llamacpp import LlamaCppEngine
from tests.fake_engine.core import FakeEngine, recorded

CRASH_LINE = b"CUDA error: an illegal memory access was encountered\n"


@dataclass
class Failure:
    """Fail in the session labelled `session` once it has served `after` completions."""

    session: str
    after: int = 0
    how: Literal["exit", "http"] = "exit"


class LlamaCpp(FakeEngine):
    """llama-server's answers, for one fake container when `container` is given; `failure` applies when the
    container is its session's. A prompt seen before is answered as a cache hit of all its tokens but one."""

    def __init__(self, container: Any = None, failure: Failure | None = None, slot_save_path: bool = False,
                 host_cache: bool = False):
        """`slot_save_path`: started with `--slot-save-path` (the slot erase then empties the slot; without it,
        the erase answers the recorded 501, tests/fixtures/llamacpp_slots). `host_cache`: a host-memory prompt
        cache (`--cache-ram`) keeps the prompts the erase empties from the slot."""
        super().__init__()
        self.slot_save_path, self.host_cache = slot_save_path, host_cache
        self.container = container
        self.failure = failure if failure and container and container.name.endswith(f"-{failure.session}") else None
        self.completions = 0
        self.seen: set[str] = set()

    def answer(self, request: httpx.Request, path: str, body: Any) -> httpx.Response:
        body = body or {}
        if path == "/props":
            return httpx.Response(200, json={"build_info": "b1-7e4c0a9", "model_path": "/models/model.gguf",
                                             "total_slots": 1, "chat_template": "chatml",
                                             "default_generation_settings": {"n_ctx": 16384}})
        if path == "/apply-template":
            text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in body["messages"])
            return httpx.Response(200, json={"prompt": text + "<|im_start|>assistant\n"})
        if path == "/tokenize":
            return httpx.Response(200, json={"tokens": list(range(len(body["content"].split())))})
        if path == "/completion":
            return self._completion(request, body)
        if path == "/slots/0" and request.url.params.get("action") == "erase" and request.method == "POST":
            if not self.slot_save_path:
                return httpx.Response(501, json=recorded("llamacpp_slots", "erase_501.json"))
            if not self.host_cache:
                self.seen.clear()
            return httpx.Response(200, json=recorded("llamacpp_slots", "erase_200.json"))
        return httpx.Response(404, json={"error": {"message": f"no endpoint {path}"}})

    def _completion(self, request: httpx.Request, body: dict[str, Any]) -> httpx.Response:
        if self.failure and self.completions >= self.failure.after:
            if self.failure.how == "http":
                return httpx.Response(500, json={"error": {"message": "the slot's KV cache is corrupted"}})
            self.container.states = [{"Status": "exited", "ExitCode": 139}]
            self.container.log_bytes += CRASH_LINE
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.", request=request)
        self.completions += 1
        prompt_tokens = max(1, len(body["prompt"].split()))
        cached = prompt_tokens - 1 if body.get("cache_prompt", True) and body["prompt"] in self.seen else 0
        self.seen.add(body["prompt"])
        tokens = [11, 12, 13][: body.get("n_predict", 3)]
        probs = [{"id": t, "token": f"t{t}", "logprob": -0.1, "top_logprobs": [{"id": t, "token": f"t{t}",
                                                                                 "logprob": -0.1}]} for t in tokens]
        return httpx.Response(200, json={
            "content": "The answer is 4.", "tokens": tokens, "completion_probabilities": probs, "stop_type": "eos",
            "timings": {"prompt_n": prompt_tokens - cached, "cache_n": cached, "prompt_ms": 5.0,
                        "predicted_n": len(tokens), "predicted_ms": 3.0}})


def engine_factory(failure: Failure | None = None, made: list | None = None):
    """A DockerProvider `make_engine`: the real LlamaCppEngine, its network replaced by a LlamaCpp fake;
    each engine made is appended to `made` when given."""

    def make(running: Any) -> LlamaCppEngine:
        server = LlamaCpp(running.container, failure)
        engine = LlamaCppEngine(running.base_url, restartable=True, transport=server.transport())
        if made is not None:
            made.append(engine)
        return engine

    return make
