"""Engine answers made by hand, as an engine client returns them (with `sent`), for tests that write
records without an engine."""

from __future__ import annotations

from typing import Any

from kit.engines.base import Completion, Sent, TokenLogprob

STARTED = "2026-11-30T00:00:00.000+00:00"


def prompt_body(prompt: str, *, n_probs: int = 2, cache_prompt: bool = True, n_predict: int = 16) -> dict[str, Any]:
    """A llama.cpp `/completion` body (seed 42, greedy)."""
    return {"prompt": prompt, "n_predict": n_predict, "temperature": 0.0, "seed": 42, "n_probs": n_probs,
            "return_tokens": True, "cache_prompt": cache_prompt}


def answer(positions: list[TokenLogprob], *, body: dict[str, Any], cached: int | None = 3, text: str | None = None,
           ids: bool = True, endpoint: str = "/completion", raw: dict[str, Any] | None = None) -> Completion:
    """A completion of `positions` (log-probability entries) to the request `body`."""
    token_ids = tuple(p["id"] for p in positions) if ids else None
    return Completion(text="".join(p["token"] for p in positions) if text is None else text, token_ids=token_ids,
                      tokens=tuple(p["token"] for p in positions), logprobs=tuple(positions), finish_reason="stop",
                      cached_tokens=cached, prompt_tokens=100, prefill_tokens=None if cached is None else 100 - cached,
                      prefill_ms=1.0, decode_tokens=len(positions), decode_ms=1.0, raw=raw or {},
                      sent=Sent(endpoint, body, STARTED, 0.1))
