"""Engine providers: give a protocol one engine per session, started by the kit or reached at a URL.

A provider knows binaries, ports and health, nothing about protocols.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterator, Protocol

from kit.engines.base import Engine
from kit.engines.llamacpp import LlamaCppEngine
from kit.engines.registry import LLAMACPP, EngineKind
from kit.core.errors import ConfigError, EngineError, IllegalInstruction, InvalidAnswer
from kit.launch.cpu.cpu_backend import CpuBackend
from kit.launch.native import NativeServer, ServerSpec
from kit.core.secret_urls import redact_url


class ServerHandle(Protocol):
    """What a session may use of the server behind its engine (a NativeServer, a container): nothing else."""

    def alive(self) -> bool: ...

    def wait_exit(self, settle: float) -> bool:
        """Wait up to `settle` seconds for the server to stop; True once it has stopped."""
        ...

    def log_tail(self, lines: int = 20) -> str: ...

    def log_location(self) -> str:
        """Where a person reads the server's log (a file path, or a command that shows it)."""
        ...


NO_SERVER_LOG = "the engine's own log (the kit did not start this server)"


@dataclass
class EngineSession:
    """A live engine for one session, plus what the manifest records about how it was launched."""

    engine: Engine
    launch: dict[str, Any] = field(default_factory=dict)
    server: ServerHandle | None = None

    def alive(self, settle: float = 2.0) -> bool:
        """Is the engine still running? Waits up to `settle` seconds for a dying server to exit."""
        return self.server is None or not self.server.wait_exit(settle)

    def log_tail(self, lines: int = 20) -> str:
        return self.server.log_tail(lines) if self.server else ""

    def log_location(self) -> str:
        return self.server.log_location() if self.server else NO_SERVER_LOG

    @contextmanager
    def engine_calls(self, where: str) -> Iterator[None]:
        """Engine calls made inside say where they failed: an EngineError becomes one line naming `where`
        (e.g. "session s1 (item 3, cold1)") and, for a server the kit started, its log; "died" when it is gone."""
        try:
            yield
        except EngineError as exc:
            if not self.alive():
                raise EngineError(f"the engine died during {where}",
                                  f"see its log: {self.log_location()}; records so far are kept") from exc
            log = f"its log: {self.log_location()}" if self.server else None
            fix = "; ".join(part for part in (exc.fix, log) if part) or None
            kind = InvalidAnswer if isinstance(exc, InvalidAnswer) else EngineError  # an unusable answer voids a pass
            raise kind(f"during {where}: {exc.message}", fix) from exc


KEEP: Any = object()  # `variant(cache_ram=KEEP)`: leave the server-level prompt cache setting as it is


class EngineProvider(Protocol):
    fresh_servers: bool  # does every session get a freshly started server?

    def describe(self) -> dict[str, Any]: ...

    def session(self, label: str, log_dir: Path) -> Any:  # context manager yielding EngineSession
        ...

    def variant(self, model: Path | None = None, cache_ram: Any = KEEP,
                details: dict[str, Any] | None = None) -> EngineProvider:
        """The same launcher serving another model file and/or another `--cache-ram` (protocols whose
        passes need different servers: the sweep's weight formats, flag × order's cache settings)."""
        ...


class NativeProvider:
    """Starts a llama-server process per session (the embedded engine or any binary + GGUF).

    `cpu` is the embedded engine's CPU backend (None for a user's binary); every session's launch
    record names it. A server that dies of SIGILL, at start-up or later, ends its session with
    IllegalInstruction, which the runner may answer by switching to the portable backend."""

    fresh_servers = True

    def __init__(self, spec: ServerSpec, details: dict[str, Any] | None = None, cpu: CpuBackend | None = None,
                 reuse_off: bool = False):
        self.spec = spec
        self.details = details or {}
        self.cpu = cpu
        self.reuse_off = reuse_off  # every request with cache_prompt false (the fix reuse-off, kit.launch.llamacpp.fixes)

    def describe(self) -> dict[str, Any]:
        return {"kind": "native", "binary": str(self.spec.binary), "model": str(self.spec.model),
                "ctx_size": self.spec.ctx_size, "threads": self.spec.threads, "cache_ram": self.spec.cache_ram,
                **self.details}

    def variant(self, model: Path | None = None, cache_ram: Any = KEEP,
                details: dict[str, Any] | None = None) -> NativeProvider:
        spec = replace(self.spec, model=model or self.spec.model,
                       cache_ram=self.spec.cache_ram if cache_ram is KEEP else cache_ram)
        return NativeProvider(spec, {**self.details, **(details or {})}, self.cpu, self.reuse_off)

    def tuned(self, threads: int | None = None, parallel: int | None = None,
              extra_args: tuple[str, ...] = (), reuse_off: bool = False) -> NativeProvider:
        """The same servers with other launch settings: `-t`, `-np` (slots) and further llama-server flags
        (e.g. `--ubatch-size`), for protocols that vary one server setting at a time; `reuse_off`: their
        engines send every request with cache_prompt false."""
        spec = replace(self.spec, threads=threads or self.spec.threads, parallel=parallel or self.spec.parallel,
                       extra_args=(*self.spec.extra_args, *extra_args))
        return NativeProvider(spec, dict(self.details), self.cpu, self.reuse_off or reuse_off)

    def with_cpu(self, binary: Path, env: dict[str, str], cpu: CpuBackend) -> NativeProvider:
        """The same servers on another CPU backend."""
        return NativeProvider(replace(self.spec, binary=binary, env=env),
                              {**self.details, "cpu_backend": cpu.name}, cpu, self.reuse_off)

    @contextmanager
    def session(self, label: str, log_dir: Path) -> Iterator[EngineSession]:
        server = NativeServer(self.spec, log_dir / f"server-{label}.log")
        server.start()
        engine = LlamaCppEngine(server.url, restartable=True, reuse_off=self.reuse_off)
        try:
            launch = {"argv": server.argv, "port": server.port, "pid": server.pid,
                      "startup_seconds": server.startup_seconds, "log": server.log_path.name, **engine.info()}
            if self.cpu is not None:
                launch.update(cpu_backend=self.cpu.name, cpu_backend_sha256=self.cpu.library_sha256)
            yield EngineSession(engine=engine, launch=launch, server=server)
        except EngineError as exc:  # a server that died shows as a failed request; anything else passes at once
            if not isinstance(exc, IllegalInstruction) and server.died_of_sigill():
                raise IllegalInstruction(f"llama-server died of SIGILL during session {label}",
                                         f"see its log: {server.log_path}") from exc
            raise
        finally:
            engine.close()
            server.stop()


class ArmProviders:
    """One provider per cache arm, for engines whose prefix caching is a server launch setting (vLLM):
    every session of the cache-on arm comes from `arms["on"]`, of the cache-off arm from `arms["off"]`.
    `details` (model name, family, ...) go into `describe()` beside each arm's own description."""

    def __init__(self, arms: dict[str, Any], details: dict[str, Any] | None = None):
        self.arms = dict(arms)
        self.details = details or {}
        self.fresh_servers = all(p.fresh_servers for p in self.arms.values())

    def describe(self) -> dict[str, Any]:
        return {"kind": "per_arm", **self.details, "arms": {arm: p.describe() for arm, p in self.arms.items()}}

    def session(self, label: str, log_dir: Path) -> Any:
        raise ConfigError(f"session {label} would serve both cache arms from one server, but this engine fixes "
                          "prefix caching per server process",
                          "give the protocol `server: per_arm` (each arm's passes on its own server) or "
                          "`server: per_pass`")

    def variant(self, model: Path | None = None, cache_ram: Any = KEEP,
                details: dict[str, Any] | None = None) -> Any:
        """The same servers: they have no server-level prompt cache to set (`cache_ram` KEEP or None) and
        serve their one checkpoint (`model` None)."""
        if model is None and cache_ram in (KEEP, None):
            return self
        raise ConfigError("this protocol needs servers of another model file or --cache-ram setting per pass, "
                          "which a server per cache arm (vLLM) does not offer",
                          "run it on llama.cpp (embedded, native or docker)")


def per_arm_servers(provider: Any) -> bool:
    """Does every cache arm get servers of its own (the engine fixes prefix caching per process)?"""
    return isinstance(provider, ArmProviders)


def for_arm(provider: Any, arm: str) -> Any:
    """The provider of `arm`'s servers: its own for an ArmProviders, else `provider` itself (llama.cpp
    switches the cache per request, so one server serves both arms)."""
    if not isinstance(provider, ArmProviders):
        return provider
    if arm not in provider.arms:
        raise ConfigError(f"no server is given for the cache-{arm} arm", f"give one (e.g. --engine-url {arm}=URL)")
    return provider.arms[arm]


class ExternalProvider:
    """An engine someone else started: the kit cannot restart it, so sessions share its history. `engine`: the
    registered engine it is (its client, kit.engines.registry; by default llama.cpp's); `model`: the served model's
    name, given to a client that takes one (`EngineKind.takes_model`)."""

    fresh_servers = False
    by_url = True  # a server reached by URL: the ladder runs its rungs that need no restart on it

    def __init__(self, url: str, engine: EngineKind = LLAMACPP, model: str | None = None):
        self.url, self.engine, self.model = url, engine, model

    def describe(self) -> dict[str, Any]:
        return {"kind": "external", "url": redact_url(self.url),
                "note": "not started by the kit: sessions share one server and its cache history"}

    def variant(self, model: Path | None = None, cache_ram: Any = KEEP,
                details: dict[str, Any] | None = None) -> ExternalProvider:
        raise ConfigError("this protocol starts its own servers (other model files or cache settings per pass), "
                          "but --engine-url points at a server the kit cannot restart",
                          "drop --engine-url and let the kit start llama-server (embedded, --server-bin, or "
                          "--launcher docker)")

    @contextmanager
    def session(self, label: str, log_dir: Path) -> Iterator[EngineSession]:
        engine = self.engine.client(self.url, **({"model": self.model} if self.engine.takes_model and self.model
                                                 else {}))
        try:
            yield EngineSession(engine=engine, launch=engine.info())
        finally:
            engine.close()
