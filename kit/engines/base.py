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

from dataclasses import KW_ONLY, dataclass
from typing import Any, Protocol, runtime_checkable

from kit.core.errors import ConfigError
# The contract's output types live in the record layer, which keeps them; re-exported for the adapters.
from kit.record.completion import (  # noqa: F401
    NORMALIZED_FIELDS, CacheMeasures, Completion, NormalizedCompletion, Sent, TokenLogprob, TopLogprob, prompt_text)

Message = dict[str, str]  # {"role": ..., "content": ...} (a tool message also has "name")


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
