"""The engine contract: one request shape in, one normalized completion out.

Every adapter (llama.cpp, vLLM, Ollama, any OpenAI-compatible URL) turns its server's answer into a
`Completion`. Engine quirks (UTF-8 merged tokens, null cached-token counts, nanosecond durations)
are handled inside the adapter, so protocols, records and analysis never see them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class CompletionRequest:
    """What a protocol asks of an engine. `prompt` is the exact text sent (already templated)."""

    prompt: str
    max_tokens: int
    cache_prompt: bool | None = None  # None: leave the engine's default
    top_logprobs: int = 1
    temperature: float = 0.0
    seed: int = 42
    stop: tuple[str, ...] = ()


@dataclass(frozen=True)
class TopLogprob:
    token: str
    logprob: float
    id: int | None = None


@dataclass(frozen=True)
class TokenLogprob:
    """One log-probability entry as the engine reported it.

    On llama.cpp an entry can cover more than one emitted token (a token that ends inside a UTF-8
    character is folded into the next entry), so `len(logprobs)` may be below `len(token_ids)`.
    """

    token: str
    logprob: float
    id: int | None = None
    top: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True)
class Completion:
    """An engine's answer, normalized.

    `cached_tokens` is None when the engine did not say (never read None as 0). `outcome` is
    "ok", or "context_overflow" when the engine refused the prompt as too long (a deterministic,
    recorded outcome rather than a crash).
    """

    text: str
    token_ids: tuple[int, ...] | None
    tokens: tuple[str, ...]
    logprobs: tuple[TokenLogprob, ...]
    finish_reason: str | None
    cached_tokens: int | None
    prompt_tokens: int | None
    prefill_tokens: int | None
    prefill_ms: float | None
    decode_tokens: int | None
    decode_ms: float | None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)
    outcome: str = "ok"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Capabilities:
    """What an engine can do and report, so protocols can say what they cannot verify."""

    per_request_cache_bypass: bool  # can one request force a full recompute?
    cached_token_telemetry: bool  # does each response say how many prompt tokens were reused?
    token_ids: bool  # are emitted tokens given as ids (else only strings)?
    reset_endpoint: bool  # can the prefix cache be cleared without a restart?
    restartable: bool  # did the kit start it (so it can stop and start it again)?


@runtime_checkable
class Engine(Protocol):
    """A client for one running engine."""

    name: str
    capabilities: Capabilities

    def complete(self, request: CompletionRequest) -> Completion: ...

    def info(self) -> dict[str, Any]:
        """Build, model and settings as the engine reports them (recorded in the manifest)."""
        ...

    def close(self) -> None: ...
