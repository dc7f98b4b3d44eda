"""Client for an Ollama server (`/api/chat`, `/api/generate`, `/api/ps`, `/api/show`, `/api/version`).

Ollama's quirks, handled here so nothing downstream sees them:
- Durations come in nanoseconds (`prompt_eval_duration`, `eval_duration`, `load_duration`); the
  `Completion` carries milliseconds.
- `prompt_eval_count` shows the whole prompt even when most of it was restored from the cache, so
  Ollama has no cached-token telemetry: `cached_tokens` and `prefill_tokens` stay None, and only
  `prompt_eval_duration` tells the cache states apart.
- Emitted tokens come back as strings only (with `logprobs: true`, since Ollama 0.12.11); no ids.
- Unloading is a request with `keep_alive: 0`; its answer does not prove the model left memory, so
  `unload()` polls `/api/ps` until the model is gone and says whether that was confirmed in time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated, Any, Callable

import httpx
from pydantic import Field

from kit.core.digests import sha256_text
from kit.engines.base import (
    Capabilities,
    Completion,
    CompletionRequest,
    Sent,
    refuse_unsupported,
)
from kit.engines.identify import Prober, Proof, short
from kit.engines.watched import Dialect, Event, joined
from kit.engines.http import M, Answer, Count, Finite, client, error_text, parsed, post_timed, send, validated
from kit.engines.openai_shapes import LogprobEntry, logprob_entry
from kit.core.errors import EngineError
from kit.core.secret_urls import connection_parts

NS_PER_MS = 1_000_000
SERVE = "check that `ollama serve` is running and the URL is right"


NonNegative = Annotated[Finite, Field(ge=0)]


class _Message(Answer):
    content: str


class _Answer(Answer):
    done_reason: str | None = None
    prompt_eval_count: Count | None = None
    prompt_eval_duration: NonNegative | None = None  # nanoseconds
    eval_count: Count | None = None
    eval_duration: NonNegative | None = None
    logprobs: list[LogprobEntry] | None = None


class ChatAnswer(_Answer):
    """A final (non-streamed) `/api/chat` answer (tests/fixtures/ollama)."""

    message: _Message


class GenerateAnswer(_Answer):
    """A final (non-streamed) `/api/generate` answer."""

    response: str


class _Listed(Answer):
    name: str | None = None
    model: str | None = None


class PsAnswer(Answer):
    models: list[_Listed] | None = None


class ShowAnswer(Answer):
    template: str | None = None
    details: dict[str, Any] | None = None
    parameters: str | None = None


class VersionAnswer(Answer):
    version: str | None = None


NOT_OLLAMA = "is this an Ollama server (0.12.11 or later for log-probabilities)? the pass is VOID"


def _ms(ns: float | None) -> float | None:
    return ns / NS_PER_MS if ns is not None else None


def normalize(body: Any, sent: Sent | None = None, *, who: str = "Ollama") -> Completion:
    """Turn a final (non-streamed) `/api/chat` or `/api/generate` answer into a Completion; InvalidAnswer
    if a field the kit needs is missing or wrong. Log-probabilities are optional: Ollama before 0.12.11 gives
    none, and the checks run on Ollama compare output bytes and prefill times."""
    chat = isinstance(body, dict) and "message" in body
    what = "POST /api/chat" if chat else "POST /api/generate"
    answer_: ChatAnswer | GenerateAnswer = (
        validated(ChatAnswer, body, who=who, what=what, fix=NOT_OLLAMA) if chat
        else validated(GenerateAnswer, body, who=who, what=what, fix=NOT_OLLAMA))
    entries = tuple([logprob_entry(item) for item in answer_.logprobs or ()])
    return Completion(
        text=answer_.message.content if isinstance(answer_, ChatAnswer) else answer_.response,
        token_ids=None,
        tokens=tuple([e["token"] for e in entries]),
        logprobs=entries,
        finish_reason=answer_.done_reason,
        cached_tokens=None,  # prompt_eval_count counts restored tokens too: unknown, never 0
        prompt_tokens=answer_.prompt_eval_count,
        prefill_tokens=None,
        prefill_ms=_ms(answer_.prompt_eval_duration),
        decode_tokens=answer_.eval_count,
        decode_ms=_ms(answer_.eval_duration),
        raw=body,
        sent=sent,
    )


@dataclass(frozen=True)
class UnloadResult:
    """What an unload achieved: `confirmed` only when `/api/ps` stopped listing the model in time."""

    confirmed: bool
    seconds: float
    polls: int
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"method": "keep_alive 0, then poll /api/ps", "confirmed": self.confirmed,
                "seconds": round(self.seconds, 3), "polls": self.polls, "detail": self.detail}


def same_model(listed: dict[str, Any], model: str) -> bool:
    """Does a `/api/ps` or `/api/tags` entry stand for `model` (a name without a tag means `:latest`)?"""
    wanted = {model, model if ":" in model else f"{model}:latest"}
    return bool(wanted & {listed.get("name"), listed.get("model")})


class OllamaEngine:
    """One model on an Ollama server at `base_url`."""

    name = "ollama"

    def __init__(self, base_url: str, model: str, *, keep_alive: str | None = None,
                 transport: httpx.BaseTransport | None = None, sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic):
        """`transport` replaces the network (tests); `sleep`/`clock` drive the unload poll."""
        connect, params, self.base_url = connection_parts(base_url)  # base_url: as recorded, no credentials
        self.model = model
        self.keep_alive = keep_alive
        self.capabilities = Capabilities(raw_prompts=True, chat_messages=True)  # no cache switch, counts or ids
        self._http = client(connect, transport, params)
        self._sleep, self._clock = sleep, clock
        self._who = f"Ollama at {self.base_url}"

    # -- plumbing -------------------------------------------------------------------------------

    def _call(self, method: str, path: str, shape: type[M], body: dict[str, Any] | None = None) -> M:
        response = send(self._http, method, path, body, who=self._who, fix=SERVE)
        return validated(shape, self._checked(response, path), who=self._who, what=f"{method} {path}", fix=NOT_OLLAMA)

    def _checked(self, response: httpx.Response, path: str) -> Any:
        """The JSON body of a 200 answer; EngineError for any other status."""
        if response.status_code != 200:
            fix = (f"pull it first: `ollama pull {self.model}`" if response.status_code == 404
                   else "check the request settings and the server log")
            raise EngineError(f"Ollama {path} answered HTTP {response.status_code}: "
                              f"{error_text(response, 'error')[:200]}", fix)
        return parsed(response, who=self._who, what=path, fix=NOT_OLLAMA)

    def _options(self, max_tokens: int, seed: int, temperature: float) -> dict[str, Any]:
        return {"temperature": temperature, "seed": seed, "num_predict": max_tokens}

    # -- requests -------------------------------------------------------------------------------

    def request_body(self, request: CompletionRequest) -> tuple[str, dict[str, Any]]:
        """The endpoint and exact JSON body `complete()` sends: chat messages go to `/api/chat` (the model's
        own template), a prompt to `/api/generate` raw (it is already templated); never streamed."""
        body: dict[str, Any] = {"model": self.model}
        if request.messages is not None:
            endpoint = "/api/chat"
            body["messages"] = list(request.messages)
        else:
            endpoint = "/api/generate"
            body.update(prompt=request.prompt, raw=True)
        body.update(stream=False, options=self._options(request.max_tokens, request.seed, request.temperature))
        if request.stop:
            body["options"]["stop"] = list(request.stop)
        if request.top_logprobs:
            body.update(logprobs=True, top_logprobs=request.top_logprobs)
        if self.keep_alive is not None:
            body["keep_alive"] = self.keep_alive
        return endpoint, body

    def complete(self, request: CompletionRequest) -> Completion:
        refuse_unsupported(self, request)
        if request.cache_prompt is False:
            raise EngineError("Ollama cannot skip its prompt cache for one request",
                              "reload the model (keep_alive 0) to get a full evaluation")
        endpoint, body = self.request_body(request)
        response, sent = post_timed(self._http, endpoint, body, who=self._who, fix=SERVE, tokens=request.max_tokens)
        return normalize(self._checked(response, endpoint), sent, who=self._who)

    # -- the instance ---------------------------------------------------------------------------

    def running(self) -> list[dict[str, Any]]:
        """The models `/api/ps` lists as loaded."""
        return [entry.model_dump() for entry in self._call("GET", "/api/ps", PsAnswer).models or ()]

    def loaded(self) -> bool:
        return any(same_model(entry, self.model) for entry in self.running())

    def unload(self, timeout: float = 30.0, poll: float = 0.25) -> UnloadResult:
        """Ask Ollama to unload the model, then poll `/api/ps` until it is gone or `timeout` passes."""
        started = self._clock()
        answer = self._call("POST", "/api/generate", _Answer, {"model": self.model, "keep_alive": 0})
        polls = 0
        while True:
            polls += 1
            if not self.loaded():
                return UnloadResult(True, self._clock() - started, polls,
                                    f"{self.model} gone from /api/ps (done_reason {answer.done_reason!r})")
            if self._clock() - started >= timeout:
                return UnloadResult(False, self._clock() - started, polls,
                                    f"{self.model} still listed by /api/ps after {timeout:.0f} s")
            self._sleep(poll)

    def show(self) -> ShowAnswer:
        return self._call("POST", "/api/show", ShowAnswer, {"model": self.model})

    def version(self) -> str | None:
        return self._call("GET", "/api/version", VersionAnswer).version

    def info(self) -> dict[str, Any]:
        """Version, model details, template and parameters (recorded in the manifest)."""
        show = self.show()
        template = show.template or ""
        return {"engine": self.name, "url": self.base_url, "version": self.version(), "model": self.model,
                "details": show.details, "parameters": show.parameters, "template": template,
                "template_sha256": sha256_text(template),
                "capabilities": self.capabilities.__dict__.copy()}

    def close(self) -> None:
        self._http.close()


def proof(probe: Prober) -> Proof | None:
    """An Ollama server answers `GET /api/version` with its `version`."""
    version = (probe.json("/api/version") or {}).get("version")
    return Proof(version, f"GET /api/version: version {short(version)}") if isinstance(version, str) else None


def _assembled(events: list[Event]) -> dict[str, Any]:
    body = dict(events[-1]) if events else {}
    if any("message" in e for e in events):
        body["message"] = {"role": "assistant", "content": joined(events, lambda e: (e.get("message") or {}).get("content"))}
    else:
        body["response"] = joined(events, lambda e: e.get("response"))
    return body


WATCHED = {  # Ollama's own API (`kit watch`): its streams are JSON lines
    "/api/generate": Dialect("ollama", "generate_content", normalize, _assembled, json_lines=True),
    "/api/chat": Dialect("ollama", "chat", normalize, _assembled, json_lines=True)}
