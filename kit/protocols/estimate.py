"""Durations stated before a run starts: measure this engine's prefill and decode speed with one
uncached request on a server of its own (so the probe leaves nothing in any pass's cache)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.engines.base import CompletionRequest


@dataclass(frozen=True)
class Speed:
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    prompt_tokens: int
    startup_seconds: float  # how long the probe's server took to start (0 for an engine started elsewhere)

    def request_seconds(self, prompt_tokens: float, new_tokens: float) -> float:
        return prompt_tokens / self.prefill_tokens_per_s + new_tokens / self.decode_tokens_per_s


def probe(provider, log_dir: Path, seed: int, prompt: str | Callable[[Any], str]) -> Speed:
    """One uncached 16-token request of `prompt` (or of `prompt(engine)`) with the protocol's `seed`, on a
    session of its own."""
    with provider.session("estimate", log_dir) as live:
        with live.engine_calls("the speed probe (session estimate)"):
            text = prompt(live.engine) if callable(prompt) else prompt
            done = live.engine.complete(CompletionRequest(prompt=text, max_tokens=16, seed=seed, cache_prompt=False))
        startup = float(live.launch.get("startup_seconds") or 0.0)
    # an engine without server timings (vLLM): the request's wall time bounds each phase from above
    wall_ms = done.sent.wall_seconds * 1000 if done.sent is not None else 1.0
    prefill = (done.prefill_tokens or done.prompt_tokens or 1) / max(done.prefill_ms or wall_ms, 1.0) * 1000
    decode = (done.decode_tokens or 1) / max(done.decode_ms or wall_ms, 1.0) * 1000
    return Speed(prefill, decode, done.prompt_tokens or 0, startup)
