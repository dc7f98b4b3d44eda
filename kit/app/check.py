"""`kit check`: the pinning protocol against one engine, with defaults an engine owner can run as is.

Which provider serves the check: no URL → the embedded llama-server, restarted for every pass; a URL → the
engine found there (kit.engines.identify, from what only that engine answers) and its provider
(kit.launch.instance.url_provider): Ollama → confirmed unloads; vLLM → prefix-cache resets (dev mode);
llama.cpp → slot erases (`--slot-save-path`); SGLang → radix-cache flushes; any other OpenAI-compatible URL →
no reset (the passes are VOID; what needs no reset is still measured, and the verdict lists what could not be).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from kit.engines import registry
from kit.engines.identify import identify
from kit.core.errors import ConfigError



def engine_choices() -> list[str]:
    """What `kit check --kind` accepts."""
    return ["auto", *registry.check_choices()]


def resolve(url: str | None, kind: str, transport: Any = None) -> tuple[str, str]:
    """(the engine kind, the line saying what answers and from which answer): "embedded" without a URL; with
    one, what kit.engines.identify finds there ("auto": whichever engine's own endpoint answers, else
    OpenAI-compatible; where nothing answers, Ollama on its default port). `transport`: tests."""
    if url is None:
        if kind != "auto" and registry.EMBEDDED not in registry.named(kind, "--kind").launch:
            raise ConfigError(f"--kind {kind} needs the engine's URL", f"run `kit check URL --kind {kind}`")
        return "embedded", "engine: llama-server, started by the kit and restarted before every pass"
    if kind != "auto":
        registry.named(kind, "--kind")
    found = identify(url, kind, transport=transport)
    if not found.reached and kind == "auto" and (by_port := registry.by_port(urlparse(url).port)):
        return by_port.name, f"engine: {by_port.label} (nothing answered yet; port {by_port.port})"
    return found.kind, found.line()


def resolve_kind(url: str | None, kind: str, transport: Any = None) -> str:
    """The engine kind alone (see `resolve`)."""
    return resolve(url, kind, transport)[0]


def kind_overrides(kind: str) -> dict[str, Any]:
    """Protocol settings an engine kind needs (vLLM: full-KV reuse re-evaluates up to one block)."""
    engine = registry.ENGINES.get(kind)
    return dict(engine.check_overrides) if engine else {}


def overrides(cycles: int | None, per_arm: int | None, max_tokens: int | None, calibration_rounds: int | None,
              always_fresh: int | None, steady: int | None, cache_ram: str | None) -> dict[str, Any]:
    """Protocol overrides from `kit check` options (None leaves the protocol file's value)."""
    result: dict[str, Any] = {}
    for key, value in (("cycles", cycles), ("per_arm", per_arm), ("max_tokens", max_tokens)):
        if value is not None:
            result[key] = value
    if calibration_rounds is not None:
        result["calibration"] = {"rounds": calibration_rounds}
    regimes = {k: v for k, v in (("always_fresh", always_fresh), ("steady", steady)) if v is not None}
    if regimes:
        result["regimes"] = regimes
    if cache_ram is not None:
        if cache_ram != "default" and not cache_ram.isdigit():
            raise ConfigError(f"--cache-ram {cache_ram!r}", "give MiB (0 disables) or 'default'")
        result["engine"] = {"cache_ram": None if cache_ram == "default" else int(cache_ram)}
    return result
