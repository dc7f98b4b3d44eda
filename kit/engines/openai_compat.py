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

from kit.engines.base import Capabilities, Completion, TokenLogprob, TopLogprob
from kit.engines.openai_shapes import first_choice, usage_cached_tokens
from kit.errors import EngineError
from kit.secret_urls import connection_parts


def _entry(item: dict[str, Any]) -> TokenLogprob:
    top = tuple(TopLogprob(token=t.get("token", ""), logprob=t["logprob"]) for t in item.get("top_logprobs") or ())
    return TokenLogprob(token=item.get("token", ""), logprob=item["logprob"], top=top)


def normalize_chat(body: dict[str, Any]) -> Completion:
    """Turn a `/v1/chat/completions` answer into a Completion (no network)."""
    choice = first_choice(body, "the server", "is this an OpenAI-compatible chat URL?")
    usage = body.get("usage") or {}
    cached = usage_cached_tokens(body)
    timings = body.get("timings") or {}
    if cached is None and isinstance(timings.get("cache_n"), int):
        cached = timings["cache_n"]
    prompt = usage.get("prompt_tokens")
    entries = tuple(_entry(item) for item in ((choice.get("logprobs") or {}).get("content") or ()))
    return Completion(
        text=(choice.get("message") or {}).get("content") or "",
        token_ids=None,
        tokens=tuple(e.token for e in entries),
        logprobs=entries,
        finish_reason=choice.get("finish_reason"),
        cached_tokens=cached if isinstance(cached, int) else None,
        prompt_tokens=prompt,
        prefill_tokens=(prompt - cached) if isinstance(prompt, int) and isinstance(cached, int) else None,
        prefill_ms=timings.get("prompt_ms"),
        decode_tokens=usage.get("completion_tokens"),
        decode_ms=timings.get("predicted_ms"),
        raw=body,
    )


class OpenAICompatEngine:
    """A chat model behind an OpenAI-compatible URL (`base_url` without the `/v1`)."""

    name = "openai-compatible"

    def __init__(self, base_url: str, model: str | None = None, *, timeout: float = 600.0,
                 transport: httpx.BaseTransport | None = None, metrics: Any = None):
        connect, params, self.base_url = connection_parts(base_url, strip_suffix="/v1")  # base_url: as recorded
        self._model = model
        self._metrics = metrics
        self.capabilities = Capabilities(per_request_cache_bypass=False, cached_token_telemetry=False,
                                         token_ids=False, reset_endpoint=False, restartable=False)
        self._http = httpx.Client(base_url=connect, params=params, timeout=httpx.Timeout(timeout, connect=10.0),
                                  transport=transport)

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, json=body)
        except httpx.HTTPError as exc:
            raise EngineError(f"{self.base_url} did not answer {path} ({type(exc).__name__})",
                              "check the URL and that the server is running") from exc
        if response.status_code != 200:
            raise EngineError(f"{self.base_url}{path} answered HTTP {response.status_code}: {response.text[:200]}",
                              "check the model name and the server log")
        return response.json()

    @property
    def model(self) -> str:
        if self._model is None:
            data = self._request("GET", "/v1/models").get("data") or []
            if not data:
                raise EngineError(f"{self.base_url} lists no model", "pass --model")
            self._model = str(data[0]["id"])
        return self._model

    def chat_body(self, messages: list[dict[str, str]], *, max_tokens: int, seed: int = 42,
                  temperature: float = 0.0, top_logprobs: int = 0) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                "temperature": temperature, "seed": seed, "stream": False}
        if top_logprobs:
            body.update(logprobs=True, top_logprobs=top_logprobs)
        return body

    def chat(self, messages: list[dict[str, str]], *, max_tokens: int, seed: int = 42, temperature: float = 0.0,
             top_logprobs: int = 0) -> Completion:
        before = self._metrics.cache_counters() if self._metrics is not None else None
        completion = normalize_chat(self._request("POST", "/v1/chat/completions", self.chat_body(
            messages, max_tokens=max_tokens, seed=seed, temperature=temperature, top_logprobs=top_logprobs)))
        if before is not None and completion.cached_tokens is None:
            from kit.engines.vllm import _cache_telemetry, _with_cached  # noqa: PLC0415 - vLLM only

            telemetry = _cache_telemetry(completion, before, self._metrics.cache_counters())
            completion = _with_cached(completion, telemetry.cached_tokens)
        return completion

    def info(self) -> dict[str, Any]:
        return {"engine": self.name, "url": self.base_url, "model": self.model,
                "capabilities": self.capabilities.__dict__.copy()}

    def close(self) -> None:
        self._http.close()
