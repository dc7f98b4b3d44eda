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
from pydantic import Field

from kit.engines.base import (
    Capabilities,
    Completion,
    CompletionRequest,
    Sent,
    refuse_unsupported,
)
from kit.engines.http import Answer, Count, Finite, client, error_text, parsed, post_timed, send, validated
from kit.engines.openai_shapes import LogprobEntry, ModelsAnswer, Usage, logprob_entry
from kit.engines.watched import Dialect, openai_assembled
from kit.core.errors import EngineError
from kit.core.secret_urls import connection_parts

CHAT = "/v1/chat/completions"


class _Message(Answer):
    content: str


class _ChatLogprobs(Answer):
    content: list[LogprobEntry] | None = None


class _Choice(Answer):
    message: _Message
    finish_reason: str | None = None
    logprobs: _ChatLogprobs | None = None


class _Timings(Answer):  # llama-server's addition to the protocol
    cache_n: Count | None = None
    prompt_ms: Finite | None = None
    predicted_ms: Finite | None = None


class ChatAnswer(Answer):
    """A `/v1/chat/completions` answer: the first choice's message text (and its log-probabilities when
    asked for), `usage` and llama-server's `timings` where given."""

    choices: list[_Choice] = Field(min_length=1)
    usage: Usage | None = None
    timings: _Timings | None = None


NOT_CHAT = "is this an OpenAI-compatible chat URL? the pass is VOID"


def normalize_chat(body: Any, sent: Sent | None = None, *, who: str = "the server") -> Completion:
    """Turn a `/v1/chat/completions` answer into a Completion (no network); InvalidAnswer if a field the
    kit needs is missing or wrong. Log-probabilities are optional (not every server gives them; the checks
    run on a chat URL compare output bytes)."""
    answer_ = validated(ChatAnswer, body, who=who, what=f"POST {CHAT}", fix=NOT_CHAT)
    choice = answer_.choices[0]
    usage = answer_.usage or Usage()
    timings = answer_.timings or _Timings()
    cached = usage.cached_tokens
    if cached is None:
        cached = timings.cache_n
    prompt = usage.prompt_tokens
    entries = tuple([logprob_entry(item) for item in (choice.logprobs.content if choice.logprobs else None) or ()])
    return Completion(
        text=choice.message.content,
        token_ids=None,
        tokens=tuple([e["token"] for e in entries]),
        logprobs=entries,
        finish_reason=choice.finish_reason,
        cached_tokens=cached,
        prompt_tokens=prompt,
        prefill_tokens=(prompt - cached) if prompt is not None and cached is not None else None,
        prefill_ms=timings.prompt_ms,
        decode_tokens=usage.completion_tokens,
        decode_ms=timings.predicted_ms,
        raw=body,
        sent=sent,
    )


RUNNING = "check the URL and that the server is running"


class OpenAICompatEngine:
    """A chat model behind an OpenAI-compatible URL (`base_url` without the `/v1`)."""

    name = "openai-compatible"

    def __init__(self, base_url: str, model: str | None = None, *,
                 transport: httpx.BaseTransport | None = None, metrics: Any = None):
        connect, params, self.base_url = connection_parts(base_url, strip_suffix="/v1")  # base_url: as recorded
        self._model = model
        self._metrics = metrics
        self.capabilities = Capabilities(chat_messages=True)  # the protocol promises nothing else
        self._http = client(connect, transport, params)

    def _checked(self, response: httpx.Response, path: str) -> Any:
        """The JSON body of a 200 answer; EngineError for any other status."""
        if response.status_code != 200:
            raise EngineError(f"{self.base_url}{path} answered HTTP {response.status_code}: "
                              f"{error_text(response, 'error', 'message')[:200]}",
                              "check the model name and the server log")
        return parsed(response, who=self.base_url, what=path, fix=NOT_CHAT)

    @property
    def model(self) -> str:
        if self._model is None:
            path = "/v1/models"
            body = self._checked(send(self._http, "GET", path, who=self.base_url, fix=RUNNING), path)
            data = validated(ModelsAnswer, body, who=self.base_url, what=f"GET {path}", fix=NOT_CHAT).data
            if not data:
                raise EngineError(f"{self.base_url} lists no model", "pass --model")
            self._model = data[0].id
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
        response, sent = post_timed(self._http, CHAT, body, who=self.base_url, fix=RUNNING, tokens=request.max_tokens)
        completion = normalize_chat(self._checked(response, CHAT), sent, who=self.base_url)
        if before is not None and completion.cached_tokens is None:
            from kit.engines.vllm import _cache_telemetry, _with_cached  # noqa: PLC0415 - vLLM only

            completion = _with_cached(completion, _cache_telemetry(completion, before, self._metrics.cache_counters()))
        return completion

    def info(self) -> dict[str, Any]:
        return {"engine": self.name, "url": self.base_url, "model": self.model,
                "capabilities": self.capabilities.__dict__.copy()}

    def close(self) -> None:
        self._http.close()


_CHAT = Dialect("chat", "chat", normalize_chat, lambda events: openai_assembled(events, chat=True))
WATCHED = {"/v1/chat/completions": _CHAT, "/chat/completions": _CHAT}  # the OpenAI chat API (`kit watch`)
