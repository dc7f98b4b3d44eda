"""Run a protocol: check its options, make the run folder and manifest, provide the engine, then execute it
(kit.run.execution; a stopped run continues with kit.run.resume).

The runner never imports a user interface: it reports through events.
"""

from __future__ import annotations

import functools
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kit.run import execution, executors, long_runs, preflight, lock as run_lock
from kit.run.execution import RunResult
from kit.core.digests import sha256_text
from kit.engines import registry
from kit.engines.bounds import MAX_ANSWER_BYTES, AnswerBounds
from kit.core.errors import ConfigError, KitError
from kit.core.events import Emit, ignore
from kit.launch.llamacpp import fixes as fix_registry
from kit.launch.provider import EngineProvider, ExternalProvider, NativeProvider
from kit.record.manifest import Manifest, new_run_dir
from kit.core.paths import outputs_dir
from kit.protocols import kinds
from kit.protocols.kind import Kind
from kit.protocols.procedure import RunInputs
from kit.protocols.spec import ProtocolBase
from kit.record.provenance import collect
from kit.run.engine_source import engine_source
from kit.core.secret_urls import redact_url


@dataclass
class RunOptions:
    """Everything a person can choose on the command line or in the launcher."""

    protocol: str
    overrides: dict[str, Any] = field(default_factory=dict)
    gsm8k: Path | None = None
    model: str | None = None
    server_bin: Path | None = None
    engine_build: int | None = None  # llama.cpp build N built here (kit.run.engine_build); None: the paper's
    engine_url: str | None = None
    engine_urls: dict[str, str] = field(default_factory=dict)  # cache arm -> URL: a server per arm (vLLM)
    engine: str = registry.DEFAULT  # an engine `kit run` runs (kit.engines.registry.run_choices)
    port: int | None = None
    threads: int | None = None
    out: Path | None = None
    provider: EngineProvider | None = None  # an engine provider made by the caller (e.g. `kit check URL`)
    launcher: str = "native"  # "native" (embedded engine or server_bin) or "docker" (Dockerfile.llamacpp)
    cpu_backend: str = "auto"  # the embedded engine's CPU backend: auto, wheel or portable (kit.launch.cpu.cpu_backend)
    image: str | None = None  # --launcher docker: the engine image (default: the pinned CUDA image)
    gpus: str | None = None  # --launcher docker: all, none, N or ids (default: none on a cpu image, else all)
    container_label: str | None = None  # --launcher docker: the run-id label of its containers (a resume: the run's)
    stop: threading.Event | None = None  # set it from another thread to stop cleanly between requests
    max_answer_bytes: int = MAX_ANSWER_BYTES  # the most bytes read of one engine answer (kit.engines.bounds)
    request_deadline: float | None = None  # seconds one engine request may take; None: scaled from its max tokens
    executor: str = "local"  # where the passes run: local (in this process) or ray (kit.run.executors)
    ray_address: str | None = None  # --executor ray: the cluster (None: a local one; auto; ray://HOST:PORT)
    cpus_per_task: float = 1.0  # --executor ray: CPUs each unit's task asks for
    gpus_per_task: float = 0.0  # --executor ray: GPUs each unit's task asks for
    confirmed: bool = True  # False: a run past an hour on the CPU engine here is refused (kit.run.long_runs)
    fixes: tuple[str, ...] = ()  # named fixes applied to every server the kit starts (kit.launch.llamacpp.fixes)
    server_args: tuple[str, ...] = ()  # further llama-server flags, from the allow-list (kit.launch.llamacpp.fixes)

    @functools.cached_property
    def applied(self) -> fix_registry.Applied:
        """The run's fixes and server flags, parsed once (refused in one line where ill-shaped)."""
        return fix_registry.parse(self.fixes, self.server_args)

    def bounds(self) -> AnswerBounds:
        return AnswerBounds(self.max_answer_bytes, self.request_deadline)


CREDENTIALS_DROPPED = "engine_url_credentials_removed"  # saved options key: --engine-url had secrets, not stored


def provider_for(options: RunOptions, protocol: ProtocolBase, say: Callable[[str], None]) -> EngineProvider:
    """The run's engine: the caller's provider, the server given by --engine-url (reached with its engine's
    client), or one the kit starts the way its engine's registration says (`EngineKind.starts`, kit.run.providers)."""
    if options.provider is not None:  # source "provider": the one the caller made
        return options.provider
    engine = registry.named(options.engine)
    if engine_source(options) == "url" and options.engine_url:
        return ExternalProvider(options.engine_url, engine, options.model)
    if engine.starts is None:
        raise ConfigError(f"the kit does not start {engine.label} itself", "give the URL of a running server: "
                          f"--engine {engine.name} --engine-url URL")
    return registry.resolve_target(engine.starts)(options, protocol, say)


def refuse_reused_servers(protocol: ProtocolBase, kind: Kind, provider: EngineProvider) -> None:
    """A protocol that starts servers of its own (a kind that needs them, or a grid with a fresh server
    per pass) cannot run on servers the kit did not start: refused before the run folder exists."""
    if provider.fresh_servers:
        return
    if kind.launcher is not None and kind.launcher.started_engine_only:
        raise KitError(f"{kind.name} protocols start fresh servers of their own, but the kit cannot restart a server "
                       "it reaches by --engine-url", "let the kit start the engine (drop --engine-url)")
    if getattr(protocol, "server", None) == "per_pass":
        raise KitError("the protocol asks for a fresh server per pass (server: per_pass), but the kit cannot restart "
                       "a server it reaches by --engine-url", "let the kit start the engine (drop --engine-url), or "
                       "use a protocol with server: shared or per_arm")


def run(options: RunOptions, emit: Emit = ignore, say: Callable[[str], None] = print) -> RunResult:
    """Run one protocol end to end. Bad input raises KitError before the run folder exists."""
    protocol, path, digest = kinds.load(options.protocol, options.overrides)
    kind = kinds.of(protocol)
    preflight.check_run_options(options, kind, protocol)  # the run's fixes, or its arms'
    executors.check(options, kind)  # before a model is fetched or a folder written
    written, engine = registry.named(protocol.engine.kind, "engine.kind"), registry.named(options.engine)
    if not engine.runs_written_for(written) and options.provider is None:
        raise ConfigError(f"{path.name} is written for {written.label} (engine.kind: {written.name}), not for "
                          f"{options.engine}", f"add --engine {written.name} (--launcher docker, native "
                          f"{written.name}, or --engine-url on=URL --engine-url off=URL), or run a llama.cpp protocol "
                          "(grid, grid-cpu)")
    # what the engine cannot serve, refused before anything is fetched or written
    kinds.refuse_unserved(protocol, engine, starts_servers=options.provider is None and not options.engine_urls)
    long_runs.refuse_unconfirmed(options, protocol, path)  # before BFCL, a model or a backend is fetched or built
    prepared = kind.prepare(protocol, RunInputs(gsm8k=options.gsm8k, say=say))
    content = path.read_bytes().decode("utf-8")  # the exact bytes digested, so resume can check them
    if sha256_text(content) != digest:
        raise KitError(f"{path} changed while it was being read", "run again once nothing is editing it")
    provider = provider_for(options, protocol, say)
    refuse_reused_servers(protocol, kind, provider)
    executor = executors.make(options, kind, provider)
    run_dir = new_run_dir(options.out or outputs_dir(), path.stem)
    with run_lock.locked(run_dir, "run", run_lock.RESERVE_BYTES) as lock:
        manifest = Manifest.create(
            run_dir, protocol={"name": path.stem, "kind": protocol.protocol, "file": str(path), "sha256": digest,
                               "content": content, "resolved": protocol.model_dump(mode="json"),
                               "overrides": options.overrides},
            options=options_json(options), plan=prepared.plan, workload=prepared.workload,
            engine={**provider.describe(), **server_bin_record(options.server_bin)},
            seeds=prepared.seeds, provenance={**collect(), "cpu_backend": cpu_record(provider)})
        return execution.execute(protocol, kind, prepared, provider, manifest, emit, say, stop=options.stop,
                        bounds=options.bounds(), lock=lock, executor=executor)


def cpu_record(provider: EngineProvider) -> dict[str, Any] | None:
    cpu = provider.cpu if isinstance(provider, NativeProvider) else None
    return cpu.to_json() if cpu else None


def server_bin_record(server_bin: Path | None) -> dict[str, str]:
    """What the manifest's engine records of a server binary the user gave: its sha256, by which a later
    resume or replay compares the binary the user gives then (a recorded path is never run: docs/security.md)."""
    from kit.models.hashing import sha256_file  # noqa: PLC0415

    return {"server_bin_sha256": sha256_file(Path(server_bin))} if server_bin and Path(server_bin).is_file() else {}


def options_json(options: RunOptions) -> dict[str, Any]:
    saved = {key: str(value) if isinstance(value, Path) else value
             for key, value in options.__dict__.items()
             if key not in ("protocol", "overrides", "provider", "stop", "container_label", "confirmed", "applied")}
    saved["provider"] = options.provider.describe().get("kind") if options.provider is not None else None
    if options.engine_url and redact_url(options.engine_url) != options.engine_url:
        saved["engine_url"] = redact_url(options.engine_url)  # credentials are never stored
        saved[CREDENTIALS_DROPPED] = True
    if any(redact_url(url) != url for url in options.engine_urls.values()):
        saved["engine_urls"] = {arm: redact_url(url) for arm, url in options.engine_urls.items()}
        saved[CREDENTIALS_DROPPED] = True
    return saved
