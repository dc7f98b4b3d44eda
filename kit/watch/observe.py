"""What the proxy reads from one call: the request's canonical hash and decoding, and the answer normalized
by the engine adapters' own `normalize` functions (kit.engines), streamed answers assembled first.

The request hash (`request_hash`) is the sha256 of the canonical JSON of the endpoint and the body less
TRANSPORT_FIELDS (how the answer travels: `stream`, `stream_options`) and STATE_FIELDS (directives that pick
the serving state, `cache_prompt`, `id_slot`, `keep_alive`): the same question asked streamed or not, with
the cache on or off, hashes alike, because the serving state is what the watch classifies, not part of the
question. A request is *greedy* when it sets temperature 0 or top-k 1, *seeded* when it sets an integer
seed (top level, or Ollama's `options`); alarms only concern such requests.

The answer's shape is found from the path (SHAPES: the endpoints each engine's registration lists, EngineKind.watched); its encoding from the content type: one JSON body,
server-sent events (`data: {...}` lines) or JSON lines (Ollama). The output hash is the sha256 of the
normalized text (as every kit record's `output_sha256`); the token ids, where the engine gives them, are
hashed separately (`tokens_sha256`, evidence: a streamed llama.cpp answer carries ids an unstreamed one
lacks unless asked). `seen` makes a call's record fields from what the proxy hands over (`Finished`): all of
the observation but what depends on the calls before it (alarms, the record's place), so that it can run in
a process of its own (kit.watch.observer). Nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import orjson

from kit.core.digests import sha256_json, sha256_text
from kit.core.errors import KitError
from kit.engines import registry
from kit.engines.base import Completion, NormalizedCompletion, prompt_text
from kit.engines.watched import first_choice
from kit.record.alarms import Call
from kit.record.cache_state import Calibration, StateLabel, classify, from_telemetry
from kit.record.model import RequestSent

TRANSPORT_FIELDS = frozenset({"stream", "stream_options"})
STATE_FIELDS = frozenset({"cache_prompt", "id_slot", "keep_alive"})


# path -> how its answers read (kit.engines.watched.Dialect: shape, OpenTelemetry operation name, normalizer),
# from every engine's registration (EngineKind.watched)
SHAPES = registry.watched_endpoints()


STREAMED = frozenset({"text/event-stream", "application/x-ndjson"})  # server-sent events, JSON lines (Ollama)


def media_type(content_type: str) -> str:
    """The media type of a Content-Type header value (its parameters dropped, lower case)."""
    return content_type.split(";")[0].strip().lower()


def watched(method: str, path: str) -> bool:
    """Whether a call is a generation the watch records (others pass through, counted only)."""
    return method == "POST" and path in SHAPES


def parse_json(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


@dataclass(frozen=True)
class Asked:
    """A generation request as the watch records it: its hashes, decoding, model and seed."""

    path: str
    body: dict[str, Any] | None  # None: not a JSON object (recorded with its byte hash)
    request_sha256: str
    prompt_sha256: str
    decoding: str | None  # "greedy", "seeded" or None
    model: str | None
    seed: int | None
    temperature: float | None
    max_tokens: int | None


def _option(body: dict[str, Any], key: str) -> Any:
    options = body.get("options")
    return body.get(key, options.get(key) if isinstance(options, dict) else None)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def decoding(body: dict[str, Any]) -> str | None:
    """"greedy" (temperature 0 or top-k 1), "seeded" (an integer seed) or None (sampled unseeded)."""
    if _number(_option(body, "temperature")) == 0.0 or _number(_option(body, "top_k")) == 1.0:
        return "greedy"
    seed = _option(body, "seed")
    return "seeded" if isinstance(seed, int) and not isinstance(seed, bool) else None


def request_hash(path: str, body: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of the path and the body less transport and state fields."""
    kept = {key: value for key, value in body.items() if key not in TRANSPORT_FIELDS | STATE_FIELDS}
    return sha256_json({"endpoint": path, "body": kept})


def asked(path: str, data: bytes) -> Asked:
    """The request of one generation call, from its path and body bytes."""
    body = parse_json(data)
    if not isinstance(body, dict):
        digest = sha256_json({"endpoint": path, "bytes": data.hex()})
        return Asked(path, None, digest, sha256_text(data.decode("utf-8", "replace")), None, None, None, None, None)
    try:
        prompt = sha256_text(prompt_text(body))
    except ValueError:
        prompt = sha256_json(body.get("prompt", body.get("input")))
    seed = _option(body, "seed")
    limit = next((body[k] for k in ("max_tokens", "n_predict", "max_completion_tokens") if k in body),
                 _option(body, "num_predict"))
    model = body.get("model")
    return Asked(path, body, request_hash(path, body), prompt, decoding(body), model if isinstance(model, str) else None,
                 seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
                 _number(_option(body, "temperature")), limit if isinstance(limit, int) else None)


def _events(data: bytes, sse: bool) -> list[Any]:
    """The JSON objects of a streamed answer: SSE `data:` lines, or JSON lines."""
    found = []
    for line in data.splitlines():
        line = line.strip()
        if sse:
            if not line.startswith(b"data:"):
                continue
            line = line[5:].strip()
        if line and line != b"[DONE]":
            found.append(parse_json(line))
    return [event for event in found if isinstance(event, dict)]


@dataclass(frozen=True)
class Answered:
    """One answer as the watch reads it: the adapter's completion (None when it could not be read, with
    `problem` saying why), the model the answer names, and whether it carried token ids."""

    full: Completion | None
    problem: str | None
    model: str | None = None
    token_ids_given: bool = False

    @cached_property
    def completion(self) -> NormalizedCompletion | None:
        """The normalized answer (what a record keeps, without the raw body)."""
        return self.full.normalized() if self.full else None

    def with_counters(self, before: Any, after: Any) -> Answered:
        """The answer with vLLM's /metrics prefix-cache counter deltas around it (read while it was the only
        call in flight) as its cached tokens where its usage did not say (kit.engines.vllm)."""
        if self.full is None or before is None or after is None:
            return self
        from kit.engines.vllm import _cache_telemetry, _with_cached  # noqa: PLC0415 - vLLM only

        full = _with_cached(self.full, _cache_telemetry(self.full, before, after))
        return Answered(full, self.problem, self.model, self.token_ids_given)

    @property
    def output_sha256(self) -> str | None:
        return sha256_text(self.completion.text) if self.completion else None

    @property
    def tokens_sha256(self) -> str | None:
        ids = self.completion.token_ids if self.completion and self.token_ids_given else None
        return sha256_json(list(ids)) if ids else None


def answered(path: str, content_type: str, data: bytes) -> Answered:
    """The answer of a generation call to `path`, from its content type and the bytes upstream sent."""
    dialect = SHAPES[path]
    media = media_type(content_type)
    if media in STREAMED or (dialect.json_lines and b"\n{" in data.strip()):
        events = _events(data, sse=media == "text/event-stream")
        if not events:
            return Answered(None, "a streamed answer with no JSON event")
        body: Any = dialect.assemble(events)
    else:
        body = parse_json(data)
        if not isinstance(body, dict):
            return Answered(None, "the answer is not a JSON object")
    _usage_from_timings(body)
    given = bool(body.get("tokens")) or bool(first_choice(body).get("token_ids"))
    model = body.get("model") if isinstance(body.get("model"), str) else None
    try:
        completion = dialect.normalize(body)
    except KitError as exc:
        return Answered(None, exc.message, model)
    return Answered(completion, None, model, given)


def _usage_from_timings(body: dict[str, Any]) -> None:
    """llama-server's OpenAI-shaped answers: a streamed one carries `timings` but no `usage` unless asked
    (`stream_options.include_usage`); its prompt's tokens are `timings.prompt_n + timings.cache_n`."""
    timings, usage = body.get("timings"), body.get("usage")
    if "choices" not in body or not isinstance(timings, dict):
        return
    usage = dict(usage) if isinstance(usage, dict) else {}
    evaluated, cached = timings.get("prompt_n"), timings.get("cache_n")
    if usage.get("prompt_tokens") is None and isinstance(evaluated, int) and isinstance(cached, int):
        usage["prompt_tokens"] = evaluated + cached
        body["usage"] = usage


def state_of(completion: NormalizedCompletion | None, calibration: Calibration | None,
             reuse_tolerance: int = 8) -> StateLabel:
    """The cache state that served a call: from the cached-token telemetry the answer carries, else from its
    prefill time against a `kit check` calibration, else unknown (state None). `reuse_tolerance`: the prompt
    tokens a full reuse may leave to evaluate (kit.record.cache_state.from_telemetry; vLLM: a block)."""
    if completion is None:
        return StateLabel(None, None, "none", "no answer to read")
    label = from_telemetry(completion.cached_tokens, completion.prompt_tokens, reuse_tolerance)
    if label is not None:
        return label
    if calibration is not None and completion.prefill_ms is not None:
        return classify(calibration, completion.prefill_ms)
    return StateLabel(None, None, "none", "the answer reports no cached tokens"
                      + ("" if calibration else " and no calibration was given (--calibration)"))


@dataclass(frozen=True)
class Finished:
    """A generation call whose answer has gone to the client, as the proxy hands it over to be observed: the
    request (`body`, its bytes), the answer's bytes kept (`data`) and why it did not end whole (`error`, None if
    it did), and what the proxy measured (`seconds` from its request to the answer's last byte; vLLM's
    prefix-cache counters before and after it, where they were read)."""

    path: str
    body: bytes
    started: str
    seconds: float
    status: int | None
    content_type: str
    encoded: str | None  # the answer's content encoding, where it is not the identity
    data: bytes
    error: str | None
    counters: Any = None
    counters_after: Any = None


@dataclass(frozen=True)
class Reading:
    """How the proxy reads its calls (the parts of kit.watch.proxy.Settings that `seen` uses)."""

    calibration: Calibration | None = None
    reuse_tolerance: int = 8
    engine_build: str | None = None
    store_bodies: bool = False


@dataclass(frozen=True)
class Seen:
    """What `seen` makes of a call: its record's fields (kit.record.model.WatchRecord) less `alarms`, what the
    alarm tracker sees of it, and whether it failed (no whole answer with status 200)."""

    fields: dict[str, Any]
    call: Call
    failed: bool


def seen(finished: Finished, reading: Reading) -> Seen:
    """One finished generation call read: request hashed, answer normalized, cache state classified."""
    request = asked(finished.path, finished.body)
    error = finished.error
    if error is None and finished.status != 200:
        error = f"the upstream answered HTTP {finished.status}"
    if error is None and finished.encoded:
        error = f"the answer is {finished.encoded}-encoded: passed on unread"
    answer = answered(request.path, finished.content_type, finished.data) if error is None else Answered(None, error)
    answer = answer.with_counters(finished.counters, finished.counters_after)
    completion = answer.completion
    label = state_of(completion, reading.calibration, reading.reuse_tolerance)
    output = answer.output_sha256
    fields: dict[str, Any] = {
        "prompt_sha256": request.prompt_sha256, "endpoint": request.path, "request_sha256": request.request_sha256,
        "stream": media_type(finished.content_type) in STREAMED,
        "status": finished.status, "decoding": request.decoding, "output_sha256": output,
        "tokens_sha256": answer.tokens_sha256, "state": dict(vars(label)),  # as StateLabel.to_json, not deep-copied
        "cached_tokens": completion.cached_tokens if completion else None,
        "prompt_tokens": completion.prompt_tokens if completion else None,
        "prefill_ms": completion.prefill_ms if completion else None,
        "model": answer.model or request.model, "engine_build": reading.engine_build,
        "gen_ai": gen_ai(request, answer), "started": finished.started, "wall_seconds": round(finished.seconds, 6),
        "error": error or answer.problem}
    if reading.store_bodies:
        fields["request"] = RequestSent(request.path, request.body) if request.body is not None else None
        fields["completion"] = completion
    return Seen(fields, Call(request.request_sha256, request.decoding, label.state, output), error is not None)


def gen_ai(request: Asked, answer: Answered) -> dict[str, Any]:
    """The call's OpenTelemetry GenAI semantic-convention attributes (those with a value)."""
    completion = answer.completion
    values = {
        "gen_ai.operation.name": SHAPES[request.path].operation,
        "gen_ai.request.model": request.model, "gen_ai.request.seed": request.seed,
        "gen_ai.request.temperature": request.temperature, "gen_ai.request.max_tokens": request.max_tokens,
        "gen_ai.response.model": answer.model,
        "gen_ai.response.finish_reasons": [completion.finish_reason] if completion and completion.finish_reason
        else None,
        "gen_ai.usage.input_tokens": completion.prompt_tokens if completion else None,
        "gen_ai.usage.output_tokens": completion.decode_tokens if completion else None,
        "gen_ai.usage.cache_read.input_tokens": completion.cached_tokens if completion else None,
    }
    return {key: value for key, value in values.items() if value is not None}
