"""Providers for engines the kit did not start but can still put in a known state between sessions.

- `OllamaProvider`: every session begins with a confirmed unload (`keep_alive: 0`, then `/api/ps`
  polled until the model is gone), so the session's first request loads a fresh instance.
- `VllmResetProvider`: every session begins with `POST /reset_prefix_cache` (vLLM dev mode); the
  endpoint's 200 proves nothing, so the reload counts as confirmed only once the session's first
  request shows 0 cached tokens (the protocol checks that from telemetry).
- `ResetProvider`: the same for any engine whose adapter has `reset_cache()` (kit.engines.cache_reset):
  llama.cpp's slot erase (with `--slot-save-path`), SGLang's `/flush_cache`. A refused reset (HTTP 501
  without `--slot-save-path`) leaves the session unconfirmed, its reason naming the option.
- `ChatUrlProvider`: any OpenAI-compatible URL; the kit cannot reload it, and says so.

Each session's `launch["reload"]` says what was done and whether it was confirmed. `url_provider` picks the
provider for a server at a URL by what its engine's registration says (`EngineKind.url_reload`, `kit check URL`).
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from kit.core.errors import ConfigError
from kit.engines import registry
from kit.engines.ollama import OllamaEngine
from kit.engines.openai_compat import OpenAICompatEngine
from kit.launch.provider import EngineSession
from kit.core.secret_urls import redact_url


class OllamaProvider:
    """One model on an Ollama server; each session starts from a confirmed unload."""

    fresh_servers = False  # the server stays; the model instance is reloaded

    def __init__(self, url: str, model: str, unload_timeout: float = 30.0,
                 make_engine: Callable[[str, str], OllamaEngine] | None = None):
        self.url, self.model, self.unload_timeout = url, model, unload_timeout
        self._make = make_engine or (lambda url, model: OllamaEngine(url, model))

    def describe(self) -> dict[str, Any]:
        return {"kind": "ollama", "url": redact_url(self.url), "model": self.model,
                "reload": "keep_alive 0, confirmed by /api/ps", "unload_timeout_s": self.unload_timeout}

    @contextmanager
    def session(self, label: str, log_dir: Path) -> Iterator[EngineSession]:
        engine = self._make(self.url, self.model)
        try:
            unloaded = engine.unload(timeout=self.unload_timeout)
            yield EngineSession(engine=engine, launch={"reload": unloaded.to_json(), **engine.info()})
        finally:
            engine.close()


class VllmResetProvider:
    """A running vLLM server in dev mode; each session starts with a prefix-cache reset."""

    fresh_servers = False

    def __init__(self, url: str, model: str | None = None, transport: Any = None):
        """`transport` replaces the network (tests)."""
        self.url, self.model, self.transport = url, model, transport

    def describe(self) -> dict[str, Any]:
        return {"kind": "vllm", "url": redact_url(self.url), "model": self.model,
                "reload": "POST /reset_prefix_cache (needs VLLM_SERVER_DEV_MODE=1), confirmed by 0 cached tokens"}

    @contextmanager
    def session(self, label: str, log_dir: Path) -> Iterator[EngineSession]:
        from kit.engines.vllm import VllmEngine  # noqa: PLC0415 - only this provider needs it

        control = VllmEngine(self.url, model=self.model, dev_mode=True, transport=self.transport)
        engine = OpenAICompatEngine(self.url, model=self.model, transport=self.transport, metrics=control)
        try:
            yield EngineSession(engine=engine, launch={"reload": control.reset_cache().reload(), **engine.info()})
        finally:
            engine.close()
            control.close()


class ResetProvider:
    """A running server whose adapter resets its own cache (`reset_cache()`); each session starts with that
    reset, confirmed only by the session's first request showing 0 cached tokens."""

    fresh_servers = False

    def __init__(self, url: str, kind: str, make_engine: Callable[[], Any]):
        self.url, self.kind, self._make = url, kind, make_engine

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "url": redact_url(self.url),
                "reload": "the engine's own cache reset, confirmed by 0 cached tokens on the next request"}

    @contextmanager
    def session(self, label: str, log_dir: Path) -> Iterator[EngineSession]:
        engine = self._make()
        try:
            yield EngineSession(engine=engine, launch={"reload": engine.reset_cache().reload(), **engine.info()})
        finally:
            engine.close()


class ChatUrlProvider:
    """Any OpenAI-compatible chat URL: no reload is possible, so the protocol cannot verify its cycles."""

    fresh_servers = False

    def __init__(self, url: str, model: str | None = None):
        self.url, self.model = url, model

    def describe(self) -> dict[str, Any]:
        return {"kind": "openai-compatible", "url": redact_url(self.url), "model": self.model,
                "reload": "none: the kit cannot reload an engine it reaches only through the OpenAI protocol"}

    @contextmanager
    def session(self, label: str, log_dir: Path) -> Iterator[EngineSession]:
        engine = OpenAICompatEngine(self.url, model=self.model)
        try:
            reload = {"method": "none", "confirmed": False, "without_reset": True,
                      "detail": "the OpenAI protocol has no reload; the instance's history is unknown"}
            yield EngineSession(engine=engine, launch={"reload": reload, **engine.info()})
        finally:
            engine.close()


def _unload(url: str, engine: registry.EngineKind, model: str | None, unload_timeout: float) -> Any:
    if not model:
        raise ConfigError(f"checking an {engine.label} server needs the model name",
                          "pass --model NAME (see `ollama ls`)")
    return OllamaProvider(url, model, unload_timeout=unload_timeout)


def _own_reset(url: str, engine: registry.EngineKind, model: str | None, _timeout: float) -> Any:
    options = {"model": model} if engine.takes_model else {}
    return ResetProvider(url, engine.name, lambda: engine.client(url, **options))


# how a server at a URL (`kit check URL`) is brought back to a cold cache, by its engine's `url_reload`
# (kit.engines.registry): Ollama confirms an unload, vLLM resets its prefix cache (dev mode), an adapter with a
# reset of its own uses it (llama.cpp erases its slots with --slot-save-path, SGLang flushes its radix cache);
# a plain OpenAI-compatible URL is not reloaded
RELOADS: dict[str, Callable[[str, registry.EngineKind, str | None, float], Any]] = {
    registry.UNLOAD: _unload,
    registry.PREFIX_RESET: lambda url, _engine, model, _: VllmResetProvider(url, model),
    registry.OWN_RESET: _own_reset,
    registry.NO_RELOAD: lambda url, _engine, model, _: ChatUrlProvider(url, model),
}


def url_provider(url: str, engine: str, model: str | None, unload_timeout: float) -> Any:
    """The provider for a server of `engine` at `url` (not the embedded engine: the runner launches that one)."""
    if engine not in registry.ENGINES:
        raise ConfigError(f"unknown engine kind {engine!r}", f"choose one of {', '.join(registry.ENGINES)}")
    found = registry.ENGINES[engine]
    return RELOADS[found.url_reload](url, found, model, unload_timeout)
