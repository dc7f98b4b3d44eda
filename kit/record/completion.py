"""The values an engine's answer is kept as in a record: `Completion` (the normalized answer, its raw body
and what was `Sent`), the log-probability entries, and `prompt_text`, the prompt a request body sends.

They are the engine contract's output types (kit.engines.base re-exports them: every adapter's `complete()`
returns a `Completion`) and the record's content (kit.record.model embeds them), so they live in the record
layer, below the engines. Standard library only (kit.core.digests, which needs orjson, is imported where used).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any

try:
    from typing_extensions import TypedDict  # pydantic (kit.record.model.validate) reads typing's only from 3.12
except ImportError:  # pragma: no cover - the BFCL worker, which never validates records
    from typing import TypedDict


def documented(doc: str, default: Any = MISSING, *, required: bool | None = None) -> Any:
    """A dataclass field with its documentation (the line docs/records.md shows for it, kit.record.docs);
    `required` (default: no default value) is whether every record has it, whoever wrote it."""
    required = default is MISSING if required is None else required
    return field(default=default, metadata={"doc": doc, "required": required})


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
