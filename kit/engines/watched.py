"""What `kit watch` (kit.watch.observe) needs from an engine's HTTP API: the generation endpoints it answers and,
for each, a `Dialect`: how the answer's streamed events make the one body the same request unstreamed would have
had, and the adapter's own `normalize` that reads that body. An adapter module lists its endpoints in `WATCHED`
(path -> Dialect) and its registration names that list (`EngineKind.watched`, kit.engines.registry); endpoints
several engines share (the OpenAI chat shape) are listed once, by the engine whose API they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Event = dict[str, Any]


@dataclass(frozen=True)
class Dialect:
    """One generation endpoint's answers: its shape's name, its OpenTelemetry operation name, the adapter's
    normalizer of one (assembled) body, how streamed events assemble into that body, and whether a stream may
    come as JSON lines without its content type saying so (Ollama)."""

    shape: str
    operation: str
    normalize: Callable[[dict[str, Any]], Any]
    assemble: Callable[[list[Event]], dict[str, Any]]
    json_lines: bool = False


def joined(events: list[Event], text: Callable[[Event], Any]) -> str:
    """The text parts of streamed events, joined (parts that are not strings left out)."""
    return "".join(part for part in map(text, events) if isinstance(part, str))


def last(events: list[Event], key: str) -> Any:
    """The last event's value of `key` that is not None."""
    return next((event[key] for event in reversed(events) if event.get(key) is not None), None)


def first_choice(event: Event) -> dict[str, Any]:
    """An OpenAI-shaped event's first choice ({} where it has none)."""
    choices = event.get("choices")
    return choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}


def openai_assembled(events: list[Event], chat: bool) -> dict[str, Any]:
    """OpenAI-shaped streamed events (chat deltas, or text completion parts) as one body."""
    finish = next((first_choice(e)["finish_reason"] for e in reversed(events) if first_choice(e).get("finish_reason")),
                  None)
    if chat:
        text = joined(events, lambda e: (first_choice(e).get("delta") or {}).get("content"))
        choice: dict[str, Any] = {"message": {"role": "assistant", "content": text}, "finish_reason": finish}
    else:
        choice = {"text": joined(events, lambda e: first_choice(e).get("text")), "finish_reason": finish}
    return {"choices": [choice], "usage": last(events, "usage"), "timings": last(events, "timings"),
            "model": last(events, "model")}
