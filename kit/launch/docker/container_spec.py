"""Container specs: what the Docker launcher asks the daemon to run, as plain data.

A `ContainerSpec` holds everything `docker.containers.run(...)` needs to start one engine server:
image, entrypoint and flags, GPU request, loopback-only port, read-only model mount, labels and
health check. Building one touches no daemon and imports no Docker code, so specs can be tested,
recorded in a run manifest and compared between runs.

Secrets: a spec's environment holds only what the caller passed explicitly. Nothing here reads
`os.environ`; a Hugging Face token reaches a container only when the caller hands it to
`vllm_spec(hf_token=...)`, and the manifest view redacts it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from types import MappingProxyType
from typing import Any

from kit.core.errors import ConfigError

LLAMACPP_COMMIT = "7e4c0a96880dae4fc4268ad441f8a6446bd5460a"
LLAMACPP_IMAGE = "kit/llamacpp:7e4c0a9-cuda12.6"
VLLM_IMAGE = "kit/vllm:0.11.0"
LLAMACPP_CONTAINER_PORT = 8080
VLLM_CONTAINER_PORT = 8000
MODELS_TARGET = "/models"
HF_CACHE_TARGET = "/root/.cache/huggingface"

LABEL_MANAGED = "kit.managed"
LABEL_RUN_ID = "kit.run_id"
LABEL_ENGINE = "kit.engine"

# Environment names that may carry credentials. Only names the caller allows explicitly may appear
# in a spec; the manifest view never shows their values.
_SECRET_NAME = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|CREDENTIAL)", re.IGNORECASE)
_ALLOWED_SECRETS = frozenset({"HF_TOKEN"})
_NS_PER_S = 1_000_000_000


@dataclass(frozen=True)
class GpuRequest:
    """A GPU reservation, the plain-data form of `docker.types.DeviceRequest`.

    `count=-1` asks for every GPU (`--gpus all`); `device_ids` picks GPUs by index or UUID.
    """

    driver: str = "nvidia"
    count: int | None = -1
    device_ids: tuple[str, ...] | None = None
    capabilities: tuple[tuple[str, ...], ...] = (("gpu",),)

    def to_docker(self) -> dict[str, Any]:
        """Keyword arguments for `docker.types.DeviceRequest` (the SDK accepts this dict too)."""
        return {
            "driver": self.driver,
            "count": self.count,
            "device_ids": list(self.device_ids) if self.device_ids is not None else None,
            "capabilities": [list(group) for group in self.capabilities],
            "options": {},
        }


@dataclass(frozen=True)
class Mount:
    """A host folder (bind) or named volume made visible inside the container."""

    source: str
    target: str
    read_only: bool = True
    kind: str = "bind"  # "bind" (host path) or "volume" (named Docker volume)


@dataclass(frozen=True)
class HealthCheck:
    """A Docker health check; times in seconds (converted to nanoseconds for the daemon)."""

    test: tuple[str, ...]
    interval_s: float = 10.0
    timeout_s: float = 5.0
    retries: int = 3
    start_period_s: float = 600.0

    def to_docker(self) -> dict[str, Any]:
        return {
            "test": list(self.test),
            "interval": int(self.interval_s * _NS_PER_S),
            "timeout": int(self.timeout_s * _NS_PER_S),
            "retries": self.retries,
            "start_period": int(self.start_period_s * _NS_PER_S),
        }


@dataclass(frozen=True)
class ContainerSpec:
    """Everything needed to start one engine container; validated on creation."""

    engine: str
    run_id: str
    image: str
    entrypoint: tuple[str, ...]
    command: tuple[str, ...]
    container_port: int
    host_port: int
    host_ip: str = "127.0.0.1"
    health_path: str = "/health"
    environment: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    gpus: tuple[GpuRequest, ...] = (GpuRequest(),)
    ipc_mode: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    healthcheck: HealthCheck | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        try:
            loopback = ipaddress.ip_address(self.host_ip).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ConfigError(
                f"container port would be published on {self.host_ip!r}",
                "engine servers have no authentication; publish them on 127.0.0.1 only",
            )
        if not 0 <= self.host_port <= 65535:
            raise ConfigError(
                f"host port {self.host_port} is out of range", "pick a port in 1-65535 (0 = any free port)"
            )
        for name in self.environment:
            if _SECRET_NAME.search(name) and name not in _ALLOWED_SECRETS:
                raise ConfigError(
                    f"environment variable {name} looks like a credential",
                    "containers get no credentials except an explicitly passed HF_TOKEN",
                )
        for mount in self.mounts:
            if PurePosixPath(mount.target).is_relative_to(MODELS_TARGET) and not mount.read_only:
                raise ConfigError("the models folder would be mounted writable", "mount models read-only")
        object.__setattr__(self, "environment", MappingProxyType(dict(self.environment)))
        labels = {LABEL_MANAGED: "true", LABEL_RUN_ID: self.run_id, LABEL_ENGINE: self.engine, **self.labels}
        object.__setattr__(self, "labels", MappingProxyType(labels))

    @property
    def base_url(self) -> str:
        """Where the engine answers on the host (known once `host_port` is fixed)."""
        return f"http://{self.host_ip}:{self.host_port}"

    def run_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for `docker.DockerClient().containers.run(**kwargs)` (detached)."""
        kwargs: dict[str, Any] = {
            "image": self.image,
            "entrypoint": list(self.entrypoint),
            "command": list(self.command),
            "detach": True,
            "environment": dict(self.environment),
            "labels": dict(self.labels),
            "ports": {f"{self.container_port}/tcp": (self.host_ip, self.host_port or None)},
            "device_requests": [gpu.to_docker() for gpu in self.gpus],
            "mounts": [_mount_to_docker(mount) for mount in self.mounts],
        }
        if self.name:
            kwargs["name"] = self.name
        if self.ipc_mode:
            kwargs["ipc_mode"] = self.ipc_mode
        if self.healthcheck is not None:
            kwargs["healthcheck"] = self.healthcheck.to_docker()
        return kwargs

    def to_manifest(self) -> dict[str, Any]:
        """The spec as recorded in a run manifest: same content, credential values redacted."""
        kwargs = self.run_kwargs()
        kwargs["environment"] = {
            key: ("<redacted>" if is_secret_name(key) else value) for key, value in kwargs["environment"].items()
        }
        kwargs["engine"] = self.engine
        kwargs["health_path"] = self.health_path
        return kwargs


def is_secret_name(name: str) -> bool:
    """True for environment names that may carry credentials (tokens, keys, passwords)."""
    return bool(_SECRET_NAME.search(name))


def _mount_to_docker(mount: Mount) -> dict[str, Any]:
    """Keyword arguments for `docker.types.Mount` (which the SDK also accepts as a dict)."""
    return {"Type": mount.kind, "Source": mount.source, "Target": mount.target, "ReadOnly": mount.read_only}


def parse_gpus(text: str) -> str | int | tuple[str, ...]:
    """`--gpus` as typed: all, none, a count (2) or GPU ids (0,1 or UUIDs); refused in one line otherwise."""
    value = text.strip()
    if value in ("all", "none"):
        return value
    if value.isdigit():
        if int(value) < 1:
            raise ConfigError(f"--gpus {text!r} asks for no GPU", "pass --gpus none for no GPU, or a count from 1")
        return int(value)
    ids = tuple(part.strip() for part in value.split(","))
    if value and all(re.fullmatch(r"[A-Za-z0-9-]+", part) for part in ids):
        return ids
    raise ConfigError(f"--gpus {text!r} is not all, none, a count or GPU ids",
                      "pass --gpus all, --gpus none, --gpus 2, or --gpus 0,1")


def gpus_text(gpus: str | int | Sequence[str | int]) -> str:
    """The `--gpus` value that gives `gpus` (what a manifest records)."""
    if isinstance(gpus, (str, int)):
        return str(gpus)
    return ",".join(str(g) for g in gpus)


def _gpu_requests(gpus: str | int | Sequence[str | int]) -> tuple[GpuRequest, ...]:
    if gpus == "none":
        return ()  # no device request at all: the container sees no GPU
    if gpus == "all":
        return (GpuRequest(count=-1),)
    if isinstance(gpus, int) and not isinstance(gpus, bool):
        if gpus < 1:
            raise ConfigError(f"asked for {gpus} GPUs", "pass gpus='all', a positive count, or GPU ids")
        return (GpuRequest(count=gpus),)
    if isinstance(gpus, Sequence) and not isinstance(gpus, str) and gpus:
        return (GpuRequest(count=None, device_ids=tuple(str(g) for g in gpus)),)
    raise ConfigError(f"cannot read GPU selection {gpus!r}", "pass gpus='all', 'none', a positive count, or GPU ids")


def _check_args(extra_args: Sequence[str]) -> tuple[str, ...]:
    if isinstance(extra_args, str):
        raise ConfigError("extra server flags were given as one string", "pass them as a list, one flag per item")
    return tuple(str(a) for a in extra_args)


def llamacpp_spec(
    *,
    run_id: str,
    model_file: str | Path,
    host_port: int = 0,
    image: str = LLAMACPP_IMAGE,
    ctx_size: int = 16384,
    parallel: int = 1,
    n_gpu_layers: int = 99,
    seed: int = 42,
    cache_ram_mib: int | None = None,
    extra_args: Sequence[str] = (),
    gpus: str | int | Sequence[str | int] = "all",
    name: str | None = None,
) -> ContainerSpec:
    """A llama-server container with the paper's settings (REFERENCE §3).

    `model_file` is a GGUF on the host; that one file is mounted read-only under /models.
    `cache_ram_mib=0` is the paper's controlled arm (`--cache-ram 0`); None keeps the default.
    `host_port=0` lets Docker pick a free loopback port (read it back after start).
    """
    model = Path(model_file).expanduser().resolve()
    if model.suffix.lower() != ".gguf":
        raise ConfigError(f"{model} is not a .gguf file", "llama-server loads GGUF models; pass the .gguf path")
    model_target = str(PurePosixPath(MODELS_TARGET) / model.name)
    command = [
        "--host", "0.0.0.0",
        "--port", str(LLAMACPP_CONTAINER_PORT),
        "--model", model_target,
        "--parallel", str(parallel),
        "--ctx-size", str(ctx_size),
        "--n-gpu-layers", str(n_gpu_layers),
        "--seed", str(seed),
        "--slots",
        "--metrics",
    ]  # fmt: skip
    if cache_ram_mib is not None:
        command += ["--cache-ram", str(cache_ram_mib)]
    command += _check_args(extra_args)
    health_url = f"http://127.0.0.1:{LLAMACPP_CONTAINER_PORT}/health"
    return ContainerSpec(
        engine="llamacpp",
        run_id=run_id,
        image=image,
        entrypoint=("llama-server",),
        command=tuple(command),
        container_port=LLAMACPP_CONTAINER_PORT,
        host_port=host_port,
        # Only the model file is shared with the container, read-only.
        mounts=(Mount(source=str(model), target=model_target, read_only=True),),
        gpus=_gpu_requests(gpus),
        labels={"kit.llamacpp.commit": LLAMACPP_COMMIT},
        healthcheck=HealthCheck(test=("CMD", "curl", "-fsS", "-o", "/dev/null", health_url)),
        name=name,
    )


def vllm_serve_args(model: str, *, prefix_caching: bool, host: str, port: int, seed: int = 42,
                    max_model_len: int = 16384) -> list[str]:
    """The `vllm serve` arguments of every protocol (REFERENCE §3), after `vllm serve`: one request at a
    time, the request seed, the context, cached tokens in `usage`, and the arm's prefix-caching flag."""
    return [
        model,
        "--host", host,
        "--port", str(port),
        "--max-num-seqs", "1",
        "--seed", str(seed),
        "--max-model-len", str(max_model_len),
        "--enable-prompt-tokens-details",
        "--enable-prefix-caching" if prefix_caching else "--no-enable-prefix-caching",
    ]  # fmt: skip


def vllm_spec(
    *,
    run_id: str,
    model: str,
    prefix_caching: bool,
    host_port: int = 0,
    image: str = VLLM_IMAGE,
    models_dir: str | Path | None = None,
    hf_cache_volume: str | None = "kit-hf-cache",
    hf_token: str | None = None,
    max_model_len: int = 16384,
    seed: int = 42,
    dev_mode: bool = False,
    extra_args: Sequence[str] = (),
    gpus: str | int | Sequence[str | int] = "all",
    name: str | None = None,
) -> ContainerSpec:
    """A `vllm serve` container with the protocol flags (REFERENCE §3).

    Prefix caching is fixed per server process (`prefix_caching`). `model` is a Hugging Face id,
    or a folder name under `models_dir` (mounted read-only at /models). `hf_token` reaches the
    container only when given here. `dev_mode=True` sets VLLM_SERVER_DEV_MODE=1, which enables
    `POST /reset_prefix_cache`.
    """
    mounts: list[Mount] = []
    served = model
    if models_dir is not None:
        folder = Path(models_dir).expanduser().resolve()
        mounts.append(Mount(source=str(folder), target=MODELS_TARGET, read_only=True))
        if (folder / model).exists():
            served = str(PurePosixPath(MODELS_TARGET) / model)
    if hf_cache_volume:
        mounts.append(Mount(source=hf_cache_volume, target=HF_CACHE_TARGET, read_only=False, kind="volume"))
    command = [*vllm_serve_args(served, prefix_caching=prefix_caching, host="0.0.0.0", port=VLLM_CONTAINER_PORT,
                                seed=seed, max_model_len=max_model_len), *_check_args(extra_args)]
    environment: dict[str, str] = {}
    if dev_mode:
        environment["VLLM_SERVER_DEV_MODE"] = "1"
    if hf_token:
        environment["HF_TOKEN"] = hf_token
    probe = f"import urllib.request; urllib.request.urlopen('http://127.0.0.1:{VLLM_CONTAINER_PORT}/health', timeout=4)"
    return ContainerSpec(
        engine="vllm",
        run_id=run_id,
        image=image,
        entrypoint=("vllm", "serve"),
        command=tuple(command),
        container_port=VLLM_CONTAINER_PORT,
        host_port=host_port,
        environment=environment,
        mounts=tuple(mounts),
        gpus=_gpu_requests(gpus),
        ipc_mode="host",
        labels={"kit.vllm.prefix_caching": "on" if prefix_caching else "off"},
        healthcheck=HealthCheck(test=("CMD", "python3", "-c", probe), interval_s=15.0, start_period_s=900.0),
        name=name,
    )
