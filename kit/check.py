"""`kit check`: the pinning protocol against one engine, with defaults an engine owner can run as is.

Which provider serves the check: no URL → the embedded llama-server, restarted for every pass; an
Ollama URL → confirmed unloads; a vLLM URL → prefix-cache resets (dev mode); a llama-server or any
OpenAI-compatible URL → no reload (the passes are VOID and the verdict says what could not be verified).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from kit.errors import ConfigError
from kit.launch.instance import ChatUrlProvider, OllamaProvider, VllmResetProvider
from kit.launch.provider import ExternalProvider

ENGINE_CHOICES = ("auto", "llamacpp", "ollama", "vllm", "openai")  # what `kit check --kind` accepts
OLLAMA_PORT = 11434


def resolve_kind(url: str | None, kind: str) -> str:
    """The engine kind for `url`: "embedded" without a URL; "auto" means Ollama on its default port,
    else an OpenAI-compatible endpoint."""
    if url is None:
        if kind not in ("auto", "llamacpp"):
            raise ConfigError(f"--kind {kind} needs the engine's URL", f"run `kit check URL --kind {kind}`")
        return "embedded"
    if kind != "auto":
        return kind
    return "ollama" if urlparse(url).port == OLLAMA_PORT else "openai"


def provider_for(url: str, kind: str, model: str | None, unload_timeout: float) -> Any:
    """The provider for an engine at `url` of `kind` (not "embedded": the runner launches that one)."""
    if kind == "ollama":
        if not model:
            raise ConfigError("checking an Ollama server needs the model name", "pass --model NAME (see `ollama ls`)")
        return OllamaProvider(url, model, unload_timeout=unload_timeout)
    if kind == "vllm":
        return VllmResetProvider(url, model)
    if kind == "llamacpp":
        return ExternalProvider(url)
    if kind == "openai":
        return ChatUrlProvider(url, model)
    raise ConfigError(f"unknown engine kind {kind!r}", f"choose one of {', '.join(ENGINE_CHOICES)}")


VLLM_BLOCK = 16  # vLLM caches whole blocks: a full reuse can leave up to a block's tokens to evaluate


def kind_overrides(kind: str) -> dict[str, Any]:
    """Protocol settings an engine kind needs (vLLM: full-KV reuse re-evaluates up to one block)."""
    return {"reuse_tolerance": VLLM_BLOCK} if kind == "vllm" else {}


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
