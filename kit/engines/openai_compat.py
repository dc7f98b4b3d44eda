"""Client for any OpenAI-compatible chat endpoint (`/v1/chat/completions`), normalized to `Completion`.

What such a server may or may not say, handled here:
- `usage.prompt_tokens_details.cached_tokens` is optional: absent or null means unknown, never 0.
- Prefill time is not part of the protocol; llama-server adds a `timings` object (`prompt_ms`,
  `cache_n`), which is used when present.
- `logprobs.content[i] = {token, logprob, bytes, top_logprobs}` when logprobs were asked for; no ids.
- There is no reload or cache reset in the protocol: `restartable` and `reset_endpoint` are False.
- Behind vLLM, `metrics` (a `VllmEngine`) fills in unknown cached tokens from `/metrics` deltas read
  around each request (vLLM reports `cached_tokens` only on a hit, and only with
  `--enable-prompt-tokens-details`).
"""

from __future__ import annotations

from typing import Any

import httpx

from kit.engines.base import (
    Capabilities,
    Completion,
    CompletionRequest,
    Sent,
    refuse_unsupported,
)
from kit.engines.http import client, json_or, post_timed, send
from kit.engines.openai_shapes import first_choice, logprob_entry, usage_cached_tokens
from kit.errors import EngineError
from kit.secret_urls import connection_parts

CHAT = "/v1/chat/completions"


def normalize_chat(body: dict[str, Any], sent: Sent | None = None) -> Completion:
    """Turn a `/v1/chat/completions` answer into a Completion (no network)."""
    choice = first_choice(body, "the server", "is this an OpenAI-compatible chat URL?")
    usage = body.get("usage") or {}
    cached = usage_cached_tokens(body)
    timings = body.get("timings") or {}
    if cached is None and isinstance(timings.get("cache_n"), int):
        cached = timings["cache_n"]
    prompt = usage.get("prompt_tokens")
    entries = tuple([logprob_entry(item) for item in ((choice.get("logprobs") or {}).get("content") or ())])
    return Completion(
        text=(choice.get("message") or {}).get("content") or "",
        token_ids=None,
        tokens=tuple([e["token"] for e in entries]),
        logprobs=entries,
        finish_reason=choice.get("finish_reason"),
        cached_tokens=cached if isinstance(cached, int) else None,
        prompt_tokens=prompt,
        prefill_tokens=(prompt - cached) if isinstance(prompt, int) and isinstance(cached, int) else None,
        prefill_ms=timings.get("prompt_ms"),
        decode_tokens=usage.get("completion_tokens"),
        decode_ms=timings.get("predicted_ms"),
        raw=body,
        sent=sent,
    )


RUNNING = "check the URL and that the server is running"


class OpenAICompatEngine:
    """A chat model behind an OpenAI-compatible URL (`base_url` without the `/v1`)."""

    name = "openai-compatible"

    def __init__(self, base_url: str, model: str | None = None, *, timeout: float = 600.0,
                 transport: httpx.BaseTransport | None = None, metrics: Any = None):
        connect, params, self.base_url = connection_parts(base_url, strip_suffix="/v1")  # base_url: as recorded
        self._model = model
        self._metrics = metrics
        self.capabilities = Capabilities(chat_messages=True)  # the protocol promises nothing else
        self._http = client(connect, timeout, transport, params)

    def _checked(self, response: httpx.Response, path: str) -> dict[str, Any]:
        if response.status_code != 200:
            raise EngineError(f"{self.base_url}{path} answered HTTP {response.status_code}: {response.text[:200]}",
                              "check the model name and the server log")
        return json_or(response, {})

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        return self._checked(send(self._http, method, path, body, who=self.base_url, fix=RUNNING), path)

    @property
    def model(self) -> str:
        if self._model is None:
            data = self._request("GET", "/v1/models").get("data") or []
            if not data:
                raise EngineError(f"{self.base_url} lists no model", "pass --model")
            self._model = str(data[0]["id"])
        return self._model

    def request_body(self, request: CompletionRequest) -> dict[str, Any]:
        """The exact JSON body `complete()` sends to /v1/chat/completions for a chat request."""
        body: dict[str, Any] = {"model": self.model, "messages": list(request.messages or ()),
                                "max_tokens": request.max_tokens, "temperature": request.temperature,
                                "seed": request.seed, "stream": False}
        if request.stop:
            body["stop"] = list(request.stop)
        if request.top_logprobs:
            body.update(logprobs=True, top_logprobs=request.top_logprobs)
        return body

    def complete(self, request: CompletionRequest) -> Completion:
        """One chat turn through the model's own template (the OpenAI protocol has no per-request cache
        switch: `cache_prompt` is not sent)."""
        refuse_unsupported(self, request)
        body = self.request_body(request)
        before = self._metrics.cache_counters() if self._metrics is not None else None
        response, sent = post_timed(self._http, CHAT, body, who=self.base_url, fix=RUNNING)
        completion = normalize_chat(self._checked(response, CHAT), sent)
        if before is not None and completion.cached_tokens is None:
            from kit.engines.vllm import _cache_telemetry, _with_cached  # noqa: PLC0415 - vLLM only

            completion = _with_cached(completion, _cache_telemetry(completion, before, self._metrics.cache_counters()))
        return completion

    def info(self) -> dict[str, Any]:
        return {"engine": self.name, "url": self.base_url, "model": self.model,
                "capabilities": self.capabilities.__dict__.copy()}

    def close(self) -> None:
        self._http.close()
