"""Pieces of the OpenAI response shape that several engines share (vLLM, OpenAI-compatible servers;
Ollama's log-probability entries have the same shape)."""

from __future__ import annotations

from typing import Any

from kit.engines.base import TokenLogprob
from kit.errors import EngineError


def logprob_entry(item: dict[str, Any]) -> TokenLogprob:
    """A `{token, logprob, bytes, top_logprobs}` entry, normalized (these engines give no token ids)."""
    return {"token": item.get("token", ""), "logprob": item["logprob"], "id": None,
            "top": [{"token": t.get("token", ""), "logprob": t["logprob"], "id": None}
                    for t in item.get("top_logprobs") or ()]}


def first_choice(body: dict[str, Any], who: str, fix: str) -> dict[str, Any]:
    """`choices[0]` of a completions or chat answer, or a clear error naming the server."""
    try:
        return body["choices"][0]
    except (KeyError, IndexError, TypeError) as exc:
        raise EngineError(f"{who} answered without choices", fix) from exc


def usage_cached_tokens(body: dict[str, Any]) -> int | None:
    """`usage.prompt_tokens_details.cached_tokens`, or None when absent or null (never read as 0)."""
    details = (body.get("usage") or {}).get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return cached if isinstance(cached, int) else None
