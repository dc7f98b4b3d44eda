"""vLLM servers for a run: one server per cache arm, since vLLM fixes prefix caching per process.

A run on `--engine vllm` gets an `ArmProviders` whose cache-on arm serves from servers launched with
`--enable-prefix-caching` and whose cache-off arm from `--no-enable-prefix-caching` ones, each way:
- the pinned container (`--launcher docker`, Dockerfile.vllm through the docker SDK: GPU passthrough,
  `ipc=host`, loopback port, logs into the run folder, image id and digests recorded);
- a native `vllm serve` (`--launcher native`: the venv `kit engines install vllm` makes, or the
  `vllm` executable `--server-bin` names), one process per session, its log in the run folder;
- URLs (`--engine-url on=URL --engine-url off=URL`): servers someone else started, one per arm.
Every server runs the protocol's flags (kit.launch.docker.container_spec.vllm_serve_args). Which protocols a
vLLM run serves, each kind says itself (`Kind.engine_rules`, kit.protocols.kinds.serves and refuse_unserved).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from kit.engines.vllm import VllmEngine
from kit.core.errors import ConfigError, EngineError
from kit.launch.docker.container_spec import vllm_serve_args
from kit.launch.native import NativeServer
from kit.launch.provider import KEEP, ArmProviders, EngineSession
from kit.models import load_registry
from kit.core.secret_urls import redact_url

ARMS = ("on", "off")
DEFAULT_CHECKPOINT = "qwen2.5-7b-instruct"  # the paper's vLLM Qwen arm
STARTUP_TIMEOUT_S = 900.0  # loading a 7B checkpoint and capturing CUDA graphs takes minutes
NO_VLLM = ("install it with `kit engines install vllm`, or pass --server-bin PATH/TO/vllm, --launcher docker, "
           "or --engine-url on=URL --engine-url off=URL")


@dataclass(frozen=True)
class Checkpoint:
    """What vLLM serves: the name it loads (a Hugging Face id or a local folder) and its prompt family."""

    served: str
    family: str | None
    registry_name: str | None = None
    format: str | None = None  # the weights' precision, where the registry knows it (BF16)


def details(chosen: Checkpoint | None) -> dict[str, Any]:
    """What the manifest records of the checkpoint (None: the model the servers at the URLs say they serve)."""
    served, family, registry_name, precision = (
        (chosen.served, chosen.family, chosen.registry_name, chosen.format) if chosen else (None, None, None, None))
    return {"engine": "vllm 0.11.0", "model_name": served, "model_family": family,
            "model_registry_name": registry_name, "format": precision}


def checkpoint(model: str | None) -> Checkpoint:
    """`--model` for vLLM: a registry checkpoint name, a Hugging Face id, or a local checkpoint folder."""
    registry = load_registry()
    name = model or DEFAULT_CHECKPOINT
    if name in registry.checkpoints:
        entry = registry.checkpoints[name]
        return Checkpoint(entry.repo, entry.family, name, entry.format)
    by_repo = next((e for e in registry.checkpoints.values() if e.repo == name), None)
    if by_repo is not None:
        return Checkpoint(by_repo.repo, by_repo.family, by_repo.name, by_repo.format)
    if name.endswith(".gguf"):
        raise ConfigError(f"--model {name} is a GGUF file, which the kit serves with llama.cpp, not vLLM",
                          f"drop --engine vllm, or give a checkpoint ({', '.join(sorted(registry.checkpoints))}, "
                          "a Hugging Face id or a folder)")
    if "/" not in name:
        raise ConfigError(f"--model {name!r} is not a vLLM checkpoint in the registry, a Hugging Face id or a folder",
                          f"use one of: {', '.join(sorted(registry.checkpoints))}, or an id like Org/Model")
    return Checkpoint(name, None)


@dataclass(frozen=True)
class VllmServeSpec:
    """How to launch one native `vllm serve` process (kit.launch.native.NativeServer runs it)."""

    binary: Path
    model: str
    prefix_caching: bool
    max_model_len: int = 16384
    seed: int = 42
    host: str = "127.0.0.1"
    port: int | None = None
    env: dict[str, str] | None = None

    label = "vllm serve"

    def check(self) -> None:
        if not self.binary.is_file() or not os.access(self.binary, os.X_OK):
            raise EngineError(f"no vLLM executable at {self.binary}", NO_VLLM)

    def argv(self, port: int) -> list[str]:
        return [str(self.binary), "serve", *vllm_serve_args(self.model, prefix_caching=self.prefix_caching,
                                                             host=self.host, port=port, seed=self.seed,
                                                             max_model_len=self.max_model_len)]


class VllmNativeProvider:
    """A fresh `vllm serve` process per session, with one prefix-caching setting."""

    fresh_servers = True

    def __init__(self, spec: VllmServeSpec, startup_timeout_s: float = STARTUP_TIMEOUT_S):
        self.spec, self.startup_timeout_s = spec, startup_timeout_s

    def describe(self) -> dict[str, Any]:
        return {"kind": "native", "engine": "vllm", "binary": str(self.spec.binary), "model": self.spec.model,
                "prefix_caching": self.spec.prefix_caching, "max_model_len": self.spec.max_model_len}

    def variant(self, model: Path | None = None, cache_ram: Any = KEEP, details: dict[str, Any] | None = None):
        raise ConfigError("vLLM serves one checkpoint with one cache setting per server",
                          "run this protocol on llama.cpp")

    @contextmanager
    def session(self, label: str, log_dir: Path) -> Iterator[EngineSession]:
        server = NativeServer(self.spec, log_dir / f"server-{label}.log", startup_timeout=self.startup_timeout_s)
        server.start()
        engine = VllmEngine(server.url, model=self.spec.model, prefix_caching=self.spec.prefix_caching,
                            restartable=True, request_token_ids=True)
        try:
            launch = {"argv": server.argv, "port": server.port, "pid": server.pid,
                      "startup_seconds": server.startup_seconds, "log": server.log_path.name, **engine.info()}
            yield EngineSession(engine=engine, launch=launch, server=server)
        finally:
            engine.close()
            server.stop()


class VllmUrlProvider:
    """A vLLM server someone else started for one arm: the kit cannot restart it, so passes share its history."""

    fresh_servers = False

    def __init__(self, url: str, prefix_caching: bool, model: str | None = None):
        self.url, self.prefix_caching, self.model = url, prefix_caching, model

    def describe(self) -> dict[str, Any]:
        return {"kind": "external", "engine": "vllm", "url": redact_url(self.url), "model": self.model,
                "prefix_caching": self.prefix_caching,
                "note": "not started by the kit: its launch flag is as given, checked against vllm:cache_config_info"}

    def variant(self, model: Path | None = None, cache_ram: Any = KEEP, details: dict[str, Any] | None = None):
        raise ConfigError("this protocol starts its own servers, but --engine-url points at servers the kit cannot "
                          "restart", "drop --engine-url and let the kit start vLLM (--launcher docker or native)")

    @contextmanager
    def session(self, label: str, log_dir: Path) -> Iterator[EngineSession]:
        engine = VllmEngine(self.url, model=self.model, prefix_caching=self.prefix_caching, request_token_ids=True)
        try:
            yield EngineSession(engine=engine, launch=engine.info())
        finally:
            engine.close()


def by_urls(urls: dict[str, str], model: str | None) -> ArmProviders:
    """One reached server per arm (`urls`: arm -> URL); the model is the one they serve (asked when None)."""
    missing = [arm for arm in ARMS if arm not in urls]
    if missing:
        raise ConfigError(f"no --engine-url for the cache-{missing[0]} arm: one vLLM server has one cache setting",
                          "give --engine-url on=URL (a server with --enable-prefix-caching) and --engine-url off=URL "
                          "(one with --no-enable-prefix-caching)")
    if len(set(urls.values())) < len(urls):
        raise ConfigError("--engine-url gives the same server for both arms, but one vLLM server has one cache setting",
                          "start one server per arm and give each its own URL")
    chosen = checkpoint(model) if model else None  # None: the model the servers say they serve
    return ArmProviders({arm: VllmUrlProvider(urls[arm], arm == "on", chosen.served if chosen else None)
                         for arm in ARMS},
                        details(chosen))


def native(binary: Path | None, model: str | None, max_model_len: int, seed: int,
           port: int | None = None) -> ArmProviders:
    """A native `vllm serve` per session and arm (`binary` None: the venv of `kit engines install vllm`)."""
    from kit.launch.gpu_setup import default_vllm_venv  # noqa: PLC0415

    chosen = checkpoint(model)
    found = Path(binary) if binary else default_vllm_venv() / "bin" / "vllm"
    specs = {arm: VllmServeSpec(found, chosen.served, arm == "on", max_model_len, seed) for arm in ARMS}
    specs["on"].check()  # the executable, refused now rather than at the first session
    if port is not None:
        raise ConfigError("--port names one port, but a vLLM run starts a server per cache arm",
                          "leave --port out: each server gets a free loopback port")
    return ArmProviders({arm: VllmNativeProvider(spec) for arm, spec in specs.items()}, details(chosen))


def docker(model: str | None, run_id: str, max_model_len: int, seed: int, launcher: Any = None,
           image: str | None = None, gpus: str | None = None) -> ArmProviders:
    """A `vllm serve` container per session and arm, from `image` (default: the one Dockerfile.vllm builds) with
    `gpus` (`--gpus` as typed; default all)."""
    from kit.launch.docker.container_spec import VLLM_IMAGE, gpus_text, parse_gpus  # noqa: PLC0415
    from kit.launch.docker.docker_launcher import DockerLauncher  # noqa: PLC0415 - the docker SDK only when asked for
    from kit.launch.docker.docker_provider import DockerProvider  # noqa: PLC0415
    from kit.core.paths import REPO_ROOT  # noqa: PLC0415

    chosen = checkpoint(model)
    folder = Path(chosen.served).expanduser()
    local = {"models_dir": str(folder.parent), "model": folder.name} if folder.is_dir() else {"model": chosen.served}
    launcher = launcher or DockerLauncher.from_env()
    asked = parse_gpus(gpus) if gpus else "all"
    build = {"dockerfile": "Dockerfile.vllm", "context": str(REPO_ROOT)} if image in (None, VLLM_IMAGE) else {}
    recorded = {**details(chosen), "gpus": gpus_text(asked)}
    return ArmProviders({arm: DockerProvider.vllm(launcher, run_id, prefix_caching=arm == "on",
                                                  max_model_len=max_model_len, seed=seed, details=recorded,
                                                  image=image or VLLM_IMAGE, gpus=asked, image_options=build, **local)
                         for arm in ARMS}, recorded)

