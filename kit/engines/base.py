"""The engine contract: one request shape in, one normalized completion out, with what was sent.

Every adapter (llama.cpp, vLLM, Ollama, any OpenAI-compatible URL) turns its server's answer into a
`Completion`, and says in `Completion.sent` which endpoint it called with which exact JSON body, when,
and how long the answer took. Engine quirks (UTF-8 merged tokens, null cached-token counts,
nanosecond durations) are handled inside the adapter, so protocols, records and analysis never see them.

What an engine can do is declared in its `Capabilities`, never probed: whether `complete()` takes a
templated `prompt` or chat `messages`, and the optional prompt tools (`apply_template`, `tokenize`,
see `PromptTools`) that a protocol asks for with `require()`.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, MISSING, dataclass, field, fields
from typing import Any, Protocol, runtime_checkable

from kit.core.errors import ConfigError

# This module is imported by the BFCL worker too, which runs `python -S` without site-packages: it
# imports the standard library only (kit.core.digests, which needs orjson, is imported where it is used).
try:
    from typing_extensions import TypedDict  # pydantic (kit.record.model.validate) reads typing's only from 3.12
except ImportError:  # pragma: no cover - the BFCL worker, which never validates records
    from typing import TypedDict

Message = dict[str, str]  # {"role": ..., "content": ...} (a tool message also has "name")


def documented(doc: str, default: Any = MISSING, *, required: bool | None = None) -> Any:
    """A dataclass field with its documentation (the line docs/records.md shows for it, kit.record.docs);
    `required` (default: no default value) is whether every record has it, whoever wrote it."""
    required = default is MISSING if required is None else required
    return field(default=default, metadata={"doc": doc, "required": required})


@dataclass(frozen=True)
class CompletionRequest:
    """What a protocol asks of an engine: either `prompt`, the exact text to send (already templated),
    or chat `messages` that the engine's own template renders. `seed` has no default: every request
    carries its protocol's seed."""

    prompt: str | None = None
    _: KW_ONLY
    max_tokens: int
    seed: int
    messages: tuple[Message, ...] | None = None
    cache_prompt: bool | None = None  # None: leave the engine's default
    top_logprobs: int = 1
    temperature: float = 0.0
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("a CompletionRequest holds either a prompt or chat messages, not both or neither")


def prompt_text(body: dict[str, Any]) -> str:
    """The prompt a request body sends, as text: its `prompt`, or for a chat request the canonical JSON
    of its `messages` (kit.core.digests.canonical_json). `prompt_sha256` is the sha256 of this text's UTF-8."""
    from kit.core.digests import canonical_json  # noqa: PLC0415 - see the imports

    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if "messages" in body:
        return canonical_json(body["messages"])
    raise ValueError("a request body without a prompt string or chat messages")


@dataclass(frozen=True)
class Sent:
    """What an engine sent for one completion: the endpoint, the exact JSON body, when it was sent
    (ISO 8601, UTC) and the seconds until the answer was in."""

    endpoint: str
    body: dict[str, Any]
    started: str
    wall_seconds: float

    @property
    def prompt_sha256(self) -> str:
        """sha256 of the exact prompt bytes sent (see `prompt_text`)."""
        from kit.core.digests import sha256_text  # noqa: PLC0415 - see the imports

        return sha256_text(prompt_text(self.body))


# Log-probability entries are built by the thousand per request, so they are plain dicts (a third of the
# cost of dataclasses to make and to write), in exactly the shape a record holds and a reader gets back.
class TopLogprob(TypedDict):
    """One alternative at a position: `{"token", "logprob", "id"}` (`id` None where the engine gives none)."""

    token: str
    logprob: float
    id: int | None


class TokenLogprob(TypedDict):
    """One log-probability entry as the engine reported it: `{"token", "logprob", "id", "top"}`.

    On llama.cpp an entry can cover more than one emitted token (a token that ends inside a UTF-8
    character is folded into the next entry), so `len(logprobs)` may be below `len(token_ids)`.
    """

    token: str
    logprob: float
    id: int | None
    top: list[TopLogprob]


class CacheMeasures(TypedDict):
    """How an engine that measures reuse two ways (vLLM) arrived at `cached_tokens`: `usage` (the response's
    `usage.prompt_tokens_details.cached_tokens`, None when null), `metrics_hits` / `metrics_queries` (the
    /metrics counter deltas around the request, None when unread), `source` ("usage", "metrics" or None)
    and `disagree` (both gave a number and the numbers differ)."""

    usage: int | None
    metrics_hits: float | None
    metrics_queries: float | None
    source: str | None
    disagree: bool


@dataclass(frozen=True)
class NormalizedCompletion:
    """An engine's answer, normalized: what a record keeps as its `completion`.

    `cached_tokens` is None when the engine did not say (never read None as 0). `outcome` is
    "ok", or "context_overflow" when the engine refused the prompt as too long (a deterministic,
    recorded outcome rather than a crash). `logprobs` comes directly before `finish_reason`: the
    skimming record reader relies on that order (kit.record.files).
    """

    text: str = documented("the answer's text")
    token_ids: tuple[int, ...] | None = documented("the emitted token ids; null where the engine gives only strings")
    tokens: tuple[str, ...] = documented("the emitted token strings, one per log-probability entry")
    logprobs: tuple[TokenLogprob, ...] | None = documented(
        "one entry per log-probability record: `token`, `logprob`, `id` and the `top` alternatives (each `token`, "
        "`logprob`, `id`); llama.cpp folds a token ending inside a UTF-8 character into the next entry, so there can "
        "be fewer entries than ids; null only when read with `read_records(..., logprobs=False)`")
    finish_reason: str | None = documented("`stop`, `length`, or the engine's own word")
    cached_tokens: int | None = documented("prompt tokens the engine reused from its cache; null = the engine did not "
                                           "say (never read as 0)")
    prompt_tokens: int | None = documented("the prompt's length in tokens, as the engine counted it")
    prefill_tokens: int | None = documented("prompt tokens the engine evaluated (not reused)")
    prefill_ms: float | None = documented("milliseconds the engine spent on the prompt")
    decode_tokens: int | None = documented("tokens generated")
    decode_ms: float | None = documented("milliseconds the engine spent generating")
    outcome: str = documented("`ok`, or `context_overflow` when the engine refused the prompt as too long (a "
                              "recorded outcome, not a crash)", "ok")
    cache_measures: CacheMeasures | None = documented(
        "only where the engine measures reuse two ways (vLLM): `usage` (the response's "
        "`usage.prompt_tokens_details.cached_tokens`), `metrics_hits` and `metrics_queries` (the /metrics prefix-cache "
        "counter deltas around the request, one request in flight), `source` of `cached_tokens` (`usage`, `metrics` "
        "or null) and `disagree` (both gave a number and they differ)", None)


NORMALIZED_FIELDS = tuple(f.name for f in fields(NormalizedCompletion))


@dataclass(frozen=True)
class Completion(NormalizedCompletion):
    """The normalized answer plus the engine's raw response body and what was sent (`sent`, set by
    every adapter's `complete()`; None only for completions built by hand, e.g. in tests)."""

    raw: dict[str, Any] = field(repr=False, default_factory=dict)
    sent: Sent | None = field(repr=False, default=None, compare=False)

    def normalized(self) -> NormalizedCompletion:
        """The answer without `raw` and `sent` (shares its tuples; nothing is copied)."""
        return NormalizedCompletion(*(getattr(self, name) for name in NORMALIZED_FIELDS))


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do and report, declared by its adapter, so protocols can say what they need
    and what they cannot verify. An adapter names what it has; what it does not name it lacks."""

    per_request_cache_bypass: bool = False  # can one request force a full recompute?
    cached_token_telemetry: bool = False  # does each response say how many prompt tokens were reused?
    token_ids: bool = False  # are emitted tokens given as ids (else only strings)?
    reset_endpoint: bool = False  # can the prefix cache be cleared without a restart?
    restartable: bool = False  # did the kit start it (so it can stop and start it again)?
    raw_prompts: bool = False  # does complete() take a templated `prompt`?
    chat_messages: bool = False  # does complete() take chat `messages` (rendered by the engine's own template)?
    prompt_rendering: bool = False  # apply_template(messages) -> the prompt text of the model's own template
    tokenization: bool = False  # tokenize(text) -> the model's token ids
    # prefix caching is fixed per server process (vLLM): `prefix_caching` says how this server runs and
    # `cache_counters()` reads its prefix-cache hit/query counters (see ServerCacheArm)
    arm_per_server: bool = False


@runtime_checkable
class Engine(Protocol):
    """A client for one running engine."""

    name: str
    capabilities: Capabilities

    def complete(self, request: CompletionRequest) -> Completion:
        """Send one request; the completion's `sent` says what went out."""
        ...

    def info(self) -> dict[str, Any]:
        """Build, model and settings as the engine reports them (recorded in the manifest)."""
        ...

    def close(self) -> None: ...


class PromptTools(Protocol):
    """The optional prompt tools: present where `prompt_rendering` / `tokenization` are declared."""

    def apply_template(self, messages: list[Message]) -> str: ...

    def tokenize(self, text: str) -> list[int]: ...


class ServerCacheArm(Protocol):
    """An engine whose cache arm is its server's launch setting (declared by `arm_per_server`)."""

    prefix_caching: bool | None  # how the server was launched (None: unknown)

    def cache_counters(self) -> Any:
        """The server's cumulative prefix-cache counters now (`.hits`, `.queries`, in tokens), or None."""
        ...

    def server_prefix_caching(self) -> bool | None:
        """Whether the server itself says it runs with prefix caching; None where it does not say."""
        ...


CAN = {"raw_prompts": "take a templated prompt", "chat_messages": "take chat messages",
       "prompt_rendering": "render a prompt with the model's chat template",
       "tokenization": "tokenize text",
       "arm_per_server": "prove a cache arm from its server's launch setting and hit counters"}


LLAMA_SERVER = "serve it from llama-server (the embedded engine, --server-bin or --engine-url)"


def require(engine: Engine, capability: str, needed_for: str, fix: str = LLAMA_SERVER) -> Any:
    """`engine` itself when it declares `capability`; else a one-line error naming what needs it."""
    if not getattr(engine.capabilities, capability):
        raise ConfigError(f"the {engine.name} engine cannot {CAN[capability]}, which {needed_for} needs", fix)
    return engine


def refuse_unsupported(engine: Engine, request: CompletionRequest) -> None:
    """Raise a one-line error when `request` is of a kind (prompt or messages) `engine` does not take."""
    if request.prompt is not None:
        require(engine, "raw_prompts", "a prompt request", "send it chat messages instead")
    else:
        require(engine, "chat_messages", "a chat request",
                "render the messages with the model's template (apply_template) and send the prompt")
