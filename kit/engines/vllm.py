"""The vLLM 0.11.0 engine client: `/v1/completions` in, a normalized `Completion` out.

vLLM's quirks, handled here so nothing downstream sees them:
- Emitted tokens come back as strings (`logprobs.tokens`); ids only when the server returns
  `choices[0].token_ids` (ask with `request_token_ids=True`), else `token_ids` is None.
- Cached tokens are measured two ways and both are recorded (`Completion.cache_measures`):
  `usage.prompt_tokens_details.cached_tokens`, which is null unless the server runs with
  `--enable-prompt-tokens-details` AND the request hit the cache (so null means "unknown", never 0),
  and the deltas of the `/metrics` counters `vllm:prefix_cache_hits_total` /
  `vllm:prefix_cache_queries_total` (tokens) read before and after the request; with one request in
  flight they are that request's hits and prompt length, so the delta counts only when the queries
  delta equals the request's prompt tokens. `cached_tokens` is the usage number where there is one,
  else the delta; where both exist and differ the completion says `disagree`.
- Prefix caching is chosen per server process (`--enable-prefix-caching` or not); there is no
  per-request bypass. The server's own word on it is the `enable_prefix_caching` label of the
  `vllm:cache_config_info` gauge (`server_prefix_caching()`).
- `POST /tokenize` counts a prompt's tokens with the served model's tokenizer. `POST /reset_prefix_cache` exists only with `VLLM_SERVER_DEV_MODE=1` and its
  200 does not prove the cache is empty: verify with the next request's cached tokens.
- A prompt longer than the context is an HTTP 400 ("maximum context length"): a recorded
  `context_overflow` outcome, not a crash.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

import httpx
from pydantic import Field

from kit.engines.base import (
    CacheMeasures,
    Capabilities,
    Completion,
    CompletionRequest,
    Sent,
    TokenLogprob,
    refuse_unsupported,
)
from kit.engines.cache_reset import CacheReset
from kit.engines.identify import Prober, Proof, short
from kit.engines.watched import Dialect, openai_assembled
from kit.engines.http import Answer, Count, Finite, M, answer, client, json_or, parsed, post_timed, send, validated
from kit.engines.openai_shapes import ModelsAnswer, Usage
from kit.core.errors import EngineError, InvalidAnswer
from kit.core.secret_urls import connection_parts

HITS_METRIC = "vllm:prefix_cache_hits_total"
QUERIES_METRIC = "vllm:prefix_cache_queries_total"
CONFIG_METRIC = "vllm:cache_config_info"
METRIC_NAME = re.compile(rb"^(?:# (?:HELP|TYPE) )?vllm:[a-z_]+", re.MULTILINE)  # what proves a vLLM server
_OVERFLOW = re.compile(r"maximum context length", re.IGNORECASE)
_OVERFLOW_PROMPT = re.compile(r"\((\d+) in the messages|has (\d+) input tokens|contains at least (\d+) input tokens")


@dataclass(frozen=True)
class CacheCounters:
    """A reading of vLLM's prefix-cache counters (tokens, summed over engines)."""

    hits: float
    queries: float


@dataclass(frozen=True)
class CacheTelemetry:
    """One completion's cached tokens as each measure gave them, and which one `cached_tokens` took:
    `source` "usage", "metrics", or None (unknown)."""

    source: str | None
    cached_tokens: int | None
    hits_delta: float | None = None
    queries_delta: float | None = None
    usage: int | None = None
    metrics_cached: int | None = None  # the delta's hits, where it covers exactly this request's prompt

    @property
    def disagree(self) -> bool:
        return self.usage is not None and self.metrics_cached is not None and self.usage != self.metrics_cached

    def measures(self) -> CacheMeasures:
        return {"usage": self.usage, "metrics_hits": self.hits_delta, "metrics_queries": self.queries_delta,
                "source": self.source, "disagree": self.disagree}


def _samples(text: str):
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415 - only vLLM needs it

    try:
        for family in text_string_to_metric_families(text):
            yield from family.samples
    except ValueError as exc:
        raise EngineError(f"vLLM /metrics is not Prometheus text ({exc})", "check the server URL") from exc


def parse_cache_counters(text: str) -> CacheCounters | None:
    """Read the prefix-cache counters from Prometheus text; None when vLLM does not export them."""
    totals: dict[str, float] = {}
    for sample in _samples(text):
        if sample.name in (HITS_METRIC, QUERIES_METRIC):
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    if HITS_METRIC not in totals or QUERIES_METRIC not in totals:
        return None
    return CacheCounters(hits=totals[HITS_METRIC], queries=totals[QUERIES_METRIC])


def parse_prefix_caching(text: str) -> bool | None:
    """The `enable_prefix_caching` label of `vllm:cache_config_info` in Prometheus text; None without it."""
    for sample in _samples(text):
        if sample.name == CONFIG_METRIC and "enable_prefix_caching" in sample.labels:
            return sample.labels["enable_prefix_caching"].strip().lower() == "true"
    return None


def _error_message(body: Any, fallback: str) -> str:
    # vLLM 0.11 nests errors as {"error": {"message": ...}}; older releases used a flat body.
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if body.get("message"):
            return str(body["message"])
    return fallback


RUNNING = "is the server still running?"


class VllmEngine:
    """A client for one running `vllm serve` process (vLLM 0.11.0, OpenAI-compatible API)."""

    name = "vllm"

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        prefix_caching: bool | None = None,
        dev_mode: bool = False,
        restartable: bool = False,
        request_token_ids: bool = False,
        use_metrics: bool = True,
        transport: httpx.BaseTransport | None = None,
    ):
        """`prefix_caching` is how the server was started (None if unknown); `dev_mode` whether it
        runs with VLLM_SERVER_DEV_MODE=1. `transport` replaces the network (tests)."""
        connect, params, self.base_url = connection_parts(base_url)  # base_url: as recorded, no credentials
        self.prefix_caching = prefix_caching
        self.dev_mode = dev_mode
        self.request_token_ids = request_token_ids
        self.use_metrics = use_metrics
        # prefix caching is chosen per server process: no per-request bypass
        self.capabilities = Capabilities(cached_token_telemetry=True, token_ids=request_token_ids,
                                         reset_endpoint=dev_mode, restartable=restartable, raw_prompts=True,
                                         tokenization=True, arm_per_server=True)
        self._http = client(connect, transport, params)
        self._model = model
        self._who = f"vLLM at {self.base_url}"
        self.last_cache_telemetry: CacheTelemetry | None = None

    # -- plumbing -------------------------------------------------------------------------------

    def _get(self, path: str) -> httpx.Response:
        return send(self._http, "GET", path, who=self._who, fix=RUNNING)

    def _answer(self, response: httpx.Response, shape: type[M], what: str) -> M:
        return answer(response, shape, who=self._who, what=what, fix=NOT_VLLM)

    @property
    def model(self) -> str:
        """The served model name (asked from /v1/models once when not given)."""
        if self._model is None:
            data = self._answer(self._get("/v1/models"), ModelsAnswer, "GET /v1/models").data
            if not data:
                raise EngineError(f"vLLM at {self.base_url} serves no model", "check the server's start-up log")
            self._model = data[0].id
        return self._model

    def models(self) -> dict[str, Any]:
        response = self._get("/v1/models")
        if response.status_code != 200:
            raise EngineError(f"vLLM /v1/models answered HTTP {response.status_code}", "check the server URL")
        body = parsed(response, who=self._who, what="GET /v1/models", fix=NOT_VLLM)
        validated(ModelsAnswer, body, who=self._who, what="GET /v1/models", fix=NOT_VLLM)
        return body

    def _metrics_text(self) -> str | None:
        response = self._get("/metrics")
        return response.text if response.status_code == 200 else None

    def cache_counters(self) -> CacheCounters | None:
        """The server's prefix-cache counters now, or None when /metrics lacks them."""
        text = self._metrics_text()
        return parse_cache_counters(text) if text is not None else None

    def server_prefix_caching(self) -> bool | None:
        """Whether the server says it runs with prefix caching (`vllm:cache_config_info`); None if it does not say."""
        text = self._metrics_text()
        return parse_prefix_caching(text) if text is not None else None

    def tokenize(self, text: str) -> list[int]:
        """The served model's token ids of `text` (`POST /tokenize`, no special tokens added)."""
        response, _ = post_timed(self._http, "/tokenize", {"model": self.model, "prompt": text,
                                                           "add_special_tokens": False}, who=self._who, fix=RUNNING)
        if response.status_code != 200:
            raise EngineError(f"vLLM /tokenize answered HTTP {response.status_code} without tokens",
                              "check that the URL is a vLLM server")
        return self._answer(response, TokensAnswer, "POST /tokenize").tokens

    # -- the Engine protocol --------------------------------------------------------------------

    def request_body(self, request: CompletionRequest) -> dict[str, Any]:
        """The exact JSON body sent to /v1/completions for `request`."""
        body: dict[str, Any] = {
            "model": self.model,
            "prompt": request.prompt,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
            "seed": request.seed,
            "logprobs": request.top_logprobs,
        }
        if request.stop:
            body["stop"] = list(request.stop)
        if self.request_token_ids:
            body["return_token_ids"] = True
        return body

    def _check_cache_arm(self, request: CompletionRequest) -> None:
        if request.cache_prompt is None:
            return
        if self.prefix_caching is None and request.cache_prompt is False:
            raise EngineError(
                "vLLM cannot skip its prefix cache for one request, and this server's cache setting is unknown",
                "start the cache-off arm with --no-enable-prefix-caching and pass prefix_caching=False",
            )
        if self.prefix_caching is not None and request.cache_prompt != self.prefix_caching:
            state = "on" if self.prefix_caching else "off"
            raise EngineError(
                f"request asks for cache_prompt={request.cache_prompt} but this vLLM server runs with prefix caching {state}",
                "vLLM chooses prefix caching per server process; start a server for each arm",
            )

    def complete(self, request: CompletionRequest) -> Completion:
        refuse_unsupported(self, request)
        self._check_cache_arm(request)
        body = self.request_body(request)
        before = self.cache_counters() if self.use_metrics else None
        response, sent = post_timed(self._http, "/v1/completions", body, who=self._who, fix=RUNNING,
                                    tokens=request.max_tokens)
        payload = json_or(response, {"text": response.text})
        if response.status_code == 400 and _OVERFLOW.search(_error_message(payload, response.text)):
            self.last_cache_telemetry = CacheTelemetry(source=None, cached_tokens=None)
            return _overflow_completion(payload, _error_message(payload, response.text), sent)
        if response.status_code != 200:
            raise EngineError(
                f"vLLM answered HTTP {response.status_code}: {_error_message(payload, response.text)[:300]}",
                "check the request settings and the server log",
            )
        after = self.cache_counters() if before is not None else None
        completion = normalize_completion(parsed(response, who=self._who, what="POST /v1/completions", fix=NOT_VLLM),
                                          sent, who=self._who, logprobs_asked=request.top_logprobs > 0)
        telemetry = _cache_telemetry(completion, before, after)
        self.last_cache_telemetry = telemetry
        return _with_cached(completion, telemetry)

    def reset_cache(self) -> CacheReset:
        """`POST /reset_prefix_cache` as a CacheReset: refused, naming VLLM_SERVER_DEV_MODE=1, where the
        server answers anything but 200 (the endpoint exists only in its development mode)."""
        method = "POST /reset_prefix_cache"
        response = send(self._http, "POST", "/reset_prefix_cache", who=self._who, fix=RUNNING)
        if response.status_code != 200:
            return CacheReset(method, False, f"{method} answered HTTP {response.status_code}: the server needs "
                              "VLLM_SERVER_DEV_MODE=1 for this endpoint (start vLLM with it to let the kit reset "
                              "its prefix cache between passes)")
        return CacheReset(method, True, "a 200 proves nothing")

    def info(self) -> dict[str, Any]:
        version_response = self._get("/version")
        version = (self._answer(version_response, VersionAnswer, "GET /version").version
                   if version_response.status_code == 200 else None)
        return {
            "engine": self.name,
            "base_url": self.base_url,
            "version": version,
            "model": self.model,
            "models": self.models(),
            "prefix_caching": self.prefix_caching,
            "dev_mode": self.dev_mode,
            "capabilities": self.capabilities.__dict__.copy(),
        }

    def close(self) -> None:
        self._http.close()


class _Logprobs(Answer):
    tokens: list[str]
    token_logprobs: list[Finite | None]
    top_logprobs: list[dict[str, Finite] | None] | None = None


class _Choice(Answer):
    text: str
    finish_reason: str | None = None
    logprobs: _Logprobs | None = None
    token_ids: list[Count] | None = None


class CompletionAnswer(Answer):
    """A `/v1/completions` answer of vLLM 0.11.0 (tests/fixtures/vllm)."""

    choices: list[_Choice] = Field(min_length=1)
    usage: Usage


class TokensAnswer(Answer):
    tokens: list[Count]


class VersionAnswer(Answer):
    version: str | None = None


NOT_VLLM = "check that the URL is a vLLM 0.11 completions server; the pass is VOID"


def normalize_completion(body: Any, sent: Sent | None = None, *, who: str = "vLLM",
                         logprobs_asked: bool = False) -> Completion:
    """Turn a vLLM /v1/completions body into a `Completion` (no network); InvalidAnswer if a field the kit
    needs is missing or wrong (`logprobs_asked`: the request asked for log-probabilities, which carry the
    emitted token strings). Token ids are optional even when asked for: an endpoint that gives strings only
    is compared on its strings."""
    what = "POST /v1/completions"
    answer_ = validated(CompletionAnswer, body, who=who, what=what, fix=NOT_VLLM)
    choice, usage = answer_.choices[0], answer_.usage
    if logprobs_asked and choice.logprobs is None:
        raise InvalidAnswer(f"{who} answered {what} without `choices[0].logprobs`, which the request asked for",
                            NOT_VLLM)
    cached = usage.cached_tokens
    block = choice.logprobs
    tokens = tuple(block.tokens) if block else ()
    token_logprobs = list(block.token_logprobs) if block else []
    tops = list(block.top_logprobs or ()) if block else []
    entries: list[TokenLogprob] = []
    for index, token in enumerate(tokens):
        value = token_logprobs[index] if index < len(token_logprobs) else None
        if value is None:  # only echoed prompt tokens lack one; generated tokens always have it
            raise InvalidAnswer(f"vLLM gave no logprob for emitted token {index}", "do not request echo=True")
        top = tops[index] if index < len(tops) else None
        ranked = sorted((top or {}).items(), key=lambda item: -item[1])  # stable: ties keep vLLM's order
        entries.append({"token": token, "logprob": float(value), "id": None,
                        "top": [{"token": str(t), "logprob": float(lp), "id": None} for t, lp in ranked]})
    ids = choice.token_ids
    prompt_tokens = usage.prompt_tokens
    return Completion(
        text=choice.text,
        token_ids=tuple(ids) if ids is not None else None,
        tokens=tokens,
        logprobs=tuple(entries),
        finish_reason=choice.finish_reason,
        cached_tokens=cached,
        prompt_tokens=prompt_tokens,
        prefill_tokens=(prompt_tokens - cached) if prompt_tokens is not None and cached is not None else None,
        prefill_ms=None,
        decode_tokens=usage.completion_tokens,
        decode_ms=None,
        raw=body,
        sent=sent,
    )


def _cache_telemetry(
    completion: Completion, before: CacheCounters | None, after: CacheCounters | None
) -> CacheTelemetry:
    """Both measures of one completion's cached tokens: the usage field (already in `completion`) and the
    counter deltas, which count only if they cover exactly this request's prompt (one request in flight)."""
    usage = completion.cached_tokens
    hits = queries = metrics = None
    if before is not None and after is not None:
        hits, queries = after.hits - before.hits, after.queries - before.queries
        if completion.prompt_tokens is not None and queries == completion.prompt_tokens and 0 <= hits <= queries:
            metrics = int(hits)
    if usage is not None:
        return CacheTelemetry("usage", usage, hits, queries, usage, metrics)
    return CacheTelemetry("metrics" if metrics is not None else None, metrics, hits, queries, None, metrics)


def _with_cached(completion: Completion, telemetry: CacheTelemetry) -> Completion:
    """`completion` with the cached tokens `telemetry` settled on, and both measures."""
    prompt, cached = completion.prompt_tokens, telemetry.cached_tokens
    prefill = (prompt - cached) if prompt is not None and cached is not None else None
    return replace(completion, cached_tokens=cached, prefill_tokens=prefill, cache_measures=telemetry.measures())


def _overflow_completion(payload: Any, message: str, sent: Sent | None = None) -> Completion:
    match = _OVERFLOW_PROMPT.search(message)
    prompt_tokens = int(next(g for g in match.groups() if g)) if match else None
    return Completion(
        text="",
        token_ids=None,
        tokens=(),
        logprobs=(),
        finish_reason=None,
        cached_tokens=None,
        prompt_tokens=prompt_tokens,
        prefill_tokens=None,
        prefill_ms=None,
        decode_tokens=None,
        decode_ms=None,
        raw=payload if isinstance(payload, dict) else {"text": str(payload)},
        outcome="context_overflow",
        sent=sent,
    )


def proof(probe: Prober) -> Proof | None:
    """A vLLM server has `vllm:`-named metric families on `GET /metrics`; its build is `GET /version`'s."""
    metrics = probe.raw("/metrics")
    if metrics is None or not METRIC_NAME.search(metrics):
        return None
    version = (probe.json("/version") or {}).get("version")
    build = version if isinstance(version, str) else None
    shown = f"; GET /version: {short(build)}" if build else ""
    return Proof(build, f"GET /metrics: vllm: metric names{shown}")


def _watched(body: dict[str, Any]) -> Completion:
    body.setdefault("usage", {})
    return normalize_completion(body)


WATCHED = {"/v1/completions": Dialect(  # the OpenAI text completions API, as vLLM answers it (`kit watch`)
    "completion", "text_completion", _watched, lambda events: openai_assembled(events, chat=False))}
