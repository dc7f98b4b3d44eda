"""Durations stated before a run starts: measure this engine's prefill and decode speed with one
uncached request on a server of its own (so the probe leaves nothing in any pass's cache), or read the
measurement an earlier run made of the same request on the same machine, engine, model and server settings
(kit.protocols.speed_cache; KIT_FRESH_ESTIMATE=1 measures again)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kit.core.digests import sha256_text
from kit.engines.base import CompletionRequest
from kit.protocols import speed_cache

PROBE_TOKENS = 16


@dataclass(frozen=True)
class Speed:
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    prompt_tokens: int
    startup_seconds: float  # how long the probe's server took to start (0 for an engine started elsewhere)
    # where it came from, as the manifest's estimate records it: measured by this run or read from the cache
    source: dict[str, Any] = field(default_factory=dict, compare=False)

    def request_seconds(self, prompt_tokens: float, new_tokens: float) -> float:
        return prompt_tokens / self.prefill_tokens_per_s + new_tokens / self.decode_tokens_per_s


def probe(provider, log_dir: Path, seed: int, prompt: str | Callable[[Any], str], *,
          prompt_id: str | None = None, notice: Callable[[str], None] = lambda _: None) -> Speed:
    """One uncached 16-token request of `prompt` (or of `prompt(engine)`) with the protocol's `seed`, on a
    session of its own; or the measurement the kit's cache keeps of that request on the same servers. A
    callable prompt is known to the cache by `prompt_id` (what it renders, e.g. its messages' sha256); without
    one it is measured every time. `notice`: told of a cache file ignored, and why."""
    identity = sha256_text(prompt) if isinstance(prompt, str) else prompt_id
    key = speed_cache.key_for(provider, identity, PROBE_TOKENS, seed) if identity is not None else None
    if key is not None and not speed_cache.fresh_asked():  # KIT_FRESH_ESTIMATE=1: measured, and the cache rewritten
        found = speed_cache.lookup(key)
        if found.ignored:
            notice(found.ignored)
        if found.found is not None:
            kept = found.found
            return Speed(kept.prefill_tokens_per_s, kept.decode_tokens_per_s, kept.prompt_tokens, kept.startup_seconds,
                         {"measured": "by an earlier run (kept in the kit's speed cache)",
                          "measured_at": kept.measured_at.isoformat(timespec="seconds"),
                          "cache_file": str(speed_cache.path_for(key)), "key_sha256": key.sha256()})
    speed = measure(provider, log_dir, seed, prompt)
    measured_at = datetime.now(timezone.utc)
    source: dict[str, Any] = {"measured": "by this run (logs/server-estimate.log)",
                              "measured_at": measured_at.isoformat(timespec="seconds")}
    if key is not None:
        try:
            kept_at = speed_cache.keep(key, speed_cache.CachedSpeed(
                schema_=speed_cache.SCHEMA, key=key, measured_at=measured_at,
                prefill_tokens_per_s=speed.prefill_tokens_per_s, decode_tokens_per_s=speed.decode_tokens_per_s,
                prompt_tokens=speed.prompt_tokens, startup_seconds=speed.startup_seconds))
        except (OSError, ValueError) as exc:  # a full disk, a folder in its place, a speed out of the file's bounds
            notice(f"could not keep the speed measurement in {speed_cache.path_for(key)} ({exc}); the next run "
                   "measures it again")
        else:
            source.update(cache_file=str(kept_at), key_sha256=key.sha256())
    return replace(speed, source=source)


def measure(provider, log_dir: Path, seed: int, prompt: str | Callable[[Any], str]) -> Speed:
    """The probe's request itself, on a session of its own (its server's log: `log_dir/server-estimate.log`)."""
    with provider.session("estimate", log_dir) as live:
        with live.engine_calls("the speed probe (session estimate)"):
            text = prompt(live.engine) if callable(prompt) else prompt
            done = live.engine.complete(CompletionRequest(prompt=text, max_tokens=PROBE_TOKENS, seed=seed,
                                                          cache_prompt=False))
        startup = float(live.launch.get("startup_seconds") or 0.0)
    # an engine without server timings (vLLM): the request's wall time bounds each phase from above
    wall_ms = done.sent.wall_seconds * 1000 if done.sent is not None else 1.0
    prefill = (done.prefill_tokens or done.prompt_tokens or 1) / max(done.prefill_ms or wall_ms, 1.0) * 1000
    decode = (done.decode_tokens or 1) / max(done.decode_ms or wall_ms, 1.0) * 1000
    return Speed(prefill, decode, done.prompt_tokens or 0, startup)
