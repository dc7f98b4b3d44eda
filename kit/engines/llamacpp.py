"""Client for llama.cpp's llama-server (native `/completion` endpoint), normalized to `Completion`."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import httpx

from kit.core.digests import sha256_text
from kit.engines.base import (
    Capabilities,
    Completion,
    CompletionRequest,
    Sent,
    TokenLogprob,
    refuse_unsupported,
)
from kit.engines.http import (
    M,
    Answer,
    Count,
    Finite,
    answer,
    client,
    error_text,
    json_or,
    parsed,
    post_timed,
    send,
    validated,
    validated_or_none,
)
from kit.core.errors import EngineError, InvalidAnswer
from kit.engines.cache_reset import CacheReset
from kit.engines.identify import Prober, Proof, short
from kit.engines.watched import Dialect, Event, joined
from kit.core.secret_urls import connection_parts

FINISH_REASONS = {"eos": "stop", "word": "stop", "limit": "length"}
STILL_RUNNING = "check that the engine is still running (see its log) and resume the run"


def request_body(request: CompletionRequest) -> dict[str, Any]:
    """The exact JSON body sent to `/completion` for a prompt request (recorded with each response)."""
    body: dict[str, Any] = {
        "prompt": request.prompt,
        "n_predict": request.max_tokens,
        "temperature": request.temperature,
        "seed": request.seed,
        "n_probs": request.top_logprobs,
        "return_tokens": True,
    }
    if request.cache_prompt is not None:
        body["cache_prompt"] = request.cache_prompt
    if request.stop:
        body["stop"] = list(request.stop)
    return body


class _Top(Answer):
    token: str
    logprob: Finite
    id: Count | None = None


class _Entry(_Top):
    top_logprobs: list[_Top] = []


class _Timings(Answer):
    prompt_n: Count
    prompt_ms: Finite
    predicted_n: Count
    predicted_ms: Finite
    cache_n: Count | None = None  # None: this build does not say (never read as 0)


class CompletionAnswer(Answer):
    """A `/completion` answer (REFERENCE §1): the text, the emitted ids (`return_tokens`), the timings,
    and the probability entries when `n_probs` asked for them."""

    content: str
    tokens: list[Count]
    timings: _Timings
    stop_type: str | None = None
    completion_probabilities: list[_Entry] | None = None


class _Settings(Answer):
    n_ctx: Count | None = None


class PropsAnswer(Answer):
    build_info: str | None = None
    model_path: str | None = None
    total_slots: Count | None = None
    chat_template: str = ""
    default_generation_settings: _Settings | None = None


class _Error(Answer):
    type: str | None = None
    message: str | None = None
    n_prompt_tokens: Count | None = None


class ErrorAnswer(Answer):
    error: _Error


class TokensAnswer(Answer):
    tokens: list[Count]


class TemplateAnswer(Answer):
    prompt: str


class EraseAnswer(Answer):
    n_erased: Count


SLOTS_ERASED_MAX = 256  # slots a reset erases; a server claiming more is refused (its answer is untrusted)
HOST_CACHE = ("llama-server's host-memory prompt cache (--cache-ram, on by default) keeps prompts past a slot "
              "erase; start llama-server with --cache-ram 0 to pin the cold state")


def _entry(item: _Top) -> TokenLogprob:
    return {"token": item.token, "logprob": item.logprob, "id": item.id,
            "top": [{"token": t.token, "logprob": t.logprob, "id": t.id} for t in getattr(item, "top_logprobs", ())]}


NOT_LLAMA = "is this a llama-server of a supported build? the pass is VOID"


def normalize(body: Any, sent: Sent | None = None, *, who: str = "llama-server",
              logprobs_asked: bool = False) -> Completion:
    """Turn a `/completion` response into a Completion; InvalidAnswer if a field the kit needs is missing
    or wrong (`logprobs_asked`: the request's `n_probs` asked for probability entries).

    llama.cpp folds a token that ends inside a UTF-8 character into the next probability entry, so
    `logprobs` (and the `tokens` strings taken from it) can be shorter than `token_ids`.
    """
    what = "POST /completion"
    answer = validated(CompletionAnswer, body, who=who, what=what, fix=NOT_LLAMA)
    if logprobs_asked and answer.completion_probabilities is None:
        raise InvalidAnswer(f"{who} answered {what} without `completion_probabilities`, which n_probs asked for",
                            NOT_LLAMA)
    timings = answer.timings
    entries = tuple([_entry(item) for item in answer.completion_probabilities or ()])
    prompt_n, cache_n = timings.prompt_n, timings.cache_n
    return Completion(
        text=answer.content,
        token_ids=tuple(answer.tokens),
        tokens=tuple([e["token"] for e in entries]),
        logprobs=entries,
        finish_reason=FINISH_REASONS.get(answer.stop_type or "", answer.stop_type),
        cached_tokens=cache_n,
        prompt_tokens=(prompt_n + cache_n) if cache_n is not None else None,
        prefill_tokens=prompt_n,
        prefill_ms=timings.prompt_ms,
        decode_tokens=timings.predicted_n,
        decode_ms=timings.predicted_ms,
        raw=body,
        sent=sent,
    )


def overflow(body: dict[str, Any], error: _Error, sent: Sent | None = None) -> Completion:
    """The recorded outcome of a prompt the engine refused as longer than its context."""
    return Completion(text="", token_ids=(), tokens=(), logprobs=(), finish_reason=None, cached_tokens=None,
                      prompt_tokens=error.n_prompt_tokens, prefill_tokens=None, prefill_ms=None,
                      decode_tokens=0, decode_ms=None, raw=body, outcome="context_overflow", sent=sent)


class LlamaCppEngine:
    """A llama-server at `base_url`, started by the kit or by someone else."""

    name = "llama.cpp"

    def __init__(self, base_url: str, restartable: bool = False, transport: httpx.BaseTransport | None = None,
                 reuse_off: bool = False):
        """`transport` replaces the network (tests of paths a real server cannot be made to take here);
        `reuse_off` sends every request with cache_prompt false (the fix `reuse-off`, kit.launch.llamacpp.fixes)."""
        self.reuse_off = reuse_off
        connect, params, self.base_url = connection_parts(base_url)  # base_url: as recorded, no credentials
        self._http = client(connect, transport, params)
        # the slot erase (reset_cache) exists only with --slot-save-path: not declared, tried; no chat messages
        self.capabilities = Capabilities(per_request_cache_bypass=True, cached_token_telemetry=True, token_ids=True,
                                         restartable=restartable, raw_prompts=True, prompt_rendering=True,
                                         tokenization=True)
        self._who = f"llama-server at {self.base_url}"

    def _post(self, path: str, body: dict[str, Any], shape: type[M]) -> M:
        response = send(self._http, "POST", path, body, who=self._who, fix=STILL_RUNNING)
        if response.status_code != 200:
            raise EngineError(f"llama-server {path} answered HTTP {response.status_code}: "
                              f"{error_text(response, 'error', 'message')}", "check the request and the engine log")
        return answer(response, shape, who=self._who, what=f"POST {path}", fix=NOT_LLAMA)

    def _get(self, path: str, shape: type[M]) -> M:
        response = send(self._http, "GET", path, who=self._who, fix="check the URL and that the server is running")
        if response.status_code != 200:
            raise EngineError(f"llama-server {path} answered HTTP {response.status_code}",
                              "is this a llama.cpp server? pass the right --engine-url")
        return answer(response, shape, who=self._who, what=f"GET {path}", fix=NOT_LLAMA)

    def complete(self, request: CompletionRequest) -> Completion:
        refuse_unsupported(self, request)
        if self.reuse_off:
            request = replace(request, cache_prompt=False)
        response, sent = post_timed(self._http, "/completion", request_body(request), who=self._who, fix=STILL_RUNNING,
                                    tokens=request.max_tokens)
        if response.status_code != 200:
            body = json_or(response, None)
            error = validated_or_none(ErrorAnswer, body)
            if response.status_code == 400 and error and error.error.type == "exceed_context_size_error":
                return overflow(body, error.error, sent)
            raise EngineError(f"llama-server answered HTTP {response.status_code}: "
                              f"{error_text(response, 'error', 'message')[:200]}",
                              "check the request settings and the engine log")
        body = parsed(response, who=self._who, what="POST /completion", fix=NOT_LLAMA)
        return normalize(body, sent, who=self._who, logprobs_asked=request.top_logprobs > 0)

    def tokenize(self, text: str) -> list[int]:
        return self._post("/tokenize", {"content": text}, TokensAnswer).tokens

    def apply_template(self, messages: list[dict[str, str]]) -> str:
        """The prompt text the model's own chat template makes of `messages` (with the assistant prefix)."""
        response = send(self._http, "POST", "/apply-template", {"messages": messages}, who=self._who,
                        fix=STILL_RUNNING)
        if response.status_code != 200:
            raise EngineError(f"llama-server could not apply its chat template (HTTP {response.status_code})",
                              "use a model whose GGUF carries a chat template")
        return answer(response, TemplateAnswer, who=self._who, what="POST /apply-template", fix=NOT_LLAMA).prompt

    def reset_cache(self) -> CacheReset:
        """Empty every slot (`POST /slots/{id}?action=erase`). A server started without `--slot-save-path`
        refuses with HTTP 501, one without slot actions with another status: the reset is then refused, naming
        the option; only a server that does not answer at all raises (EngineError)."""
        slots = self.props().total_slots or 1
        if slots > SLOTS_ERASED_MAX:
            raise InvalidAnswer(f"{self._who} says it has {slots} slots", f"the kit erases at most {SLOTS_ERASED_MAX}")
        method = "POST /slots/0?action=erase" if slots == 1 else f"POST /slots/{{0..{slots - 1}}}?action=erase"
        erased = []
        for slot in range(slots):
            path = f"/slots/{slot}?action=erase"
            response = send(self._http, "POST", path, who=self._who, fix=STILL_RUNNING)
            if response.status_code == 501:
                return CacheReset(method, False, f"llama-server refused it (HTTP 501: "
                                  f"{error_text(response, 'error', 'message')[:160]}); start llama-server with "
                                  "--slot-save-path DIR to let the kit empty its slots between passes")
            if response.status_code != 200:  # a build or a proxy without slot actions: no reset, not a crash
                return CacheReset(method, False, f"llama-server answered HTTP {response.status_code} "
                                  f"({error_text(response, 'error', 'message')[:160]}): this server has no slot "
                                  "erase; a llama-server of a recent build started with --slot-save-path DIR has one")
            erased.append(answer(response, EraseAnswer, who=self._who, what=f"POST {path}", fix=NOT_LLAMA).n_erased)
        return CacheReset(method, True, f"llama-server erased {sum(erased)} tokens from {slots} slot(s)", HOST_CACHE)

    def props(self) -> PropsAnswer:
        return self._get("/props", PropsAnswer)

    def info(self) -> dict[str, Any]:
        props = self.props()
        settings = props.default_generation_settings
        return {
            "engine": self.name,
            "url": self.base_url,
            "build_info": props.build_info,
            "model_path": props.model_path,
            "total_slots": props.total_slots,
            "n_ctx": settings.n_ctx if settings else None,
            "chat_template_sha256": sha256_text(props.chat_template),
        }

    def close(self) -> None:
        self._http.close()


def proof(probe: Prober) -> Proof | None:
    """A llama-server answers `GET /props` with `build_info` (a string) or `total_slots` (a count)."""
    props = probe.json("/props")
    if props is None:
        return None
    build, slots = props.get("build_info"), props.get("total_slots")
    if isinstance(build, str):
        return Proof(build, f"GET /props: build_info {short(build)}")
    if isinstance(slots, int) and not isinstance(slots, bool) and slots >= 0:
        return Proof(None, f"GET /props: total_slots {slots}")
    return None


def _watched(body: dict[str, Any]) -> Completion:
    body.setdefault("tokens", [])  # present only when the client asked `return_tokens`
    return normalize(body)


def _assembled(events: list[Event]) -> dict[str, Any]:
    body = dict(events[-1]) if events else {}
    body["content"] = joined(events, lambda e: e.get("content"))
    body["tokens"] = [t for e in events for t in (e.get("tokens") or [])]
    probs = [p for e in events for p in (e.get("completion_probabilities") or [])]
    body["completion_probabilities"] = probs or None
    return body


_NATIVE = Dialect("llama", "text_completion", _watched, _assembled)
WATCHED = {"/completion": _NATIVE, "/completions": _NATIVE}  # llama-server's own completion API (`kit watch`)
