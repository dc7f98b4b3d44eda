"""The Docker launcher: runs an engine server from a `ContainerSpec` and takes it down again.

It gets (builds or pulls) the image, starts the container, waits until the server answers its
health endpoint, writes the container's log to a file, reports the image id, digests and effective
container config for the run manifest, and stops and removes the container. Every container it
starts carries the labels of its run and a token only this kit can give (kit.launch.docker.container_token), so
`leftovers(run_id)` finds what a crash left and `cleanup(run_id)` removes it, and never another container.

The `docker` SDK is imported only by `DockerLauncher.from_env()`; the launcher itself talks to any
object with the SDK's shape (`client.containers`, `client.images`, `client.api`), which is how the
tests drive it without a daemon.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.core.atomic_file import write_bytes_atomic
from kit.core.errors import EngineError
from kit.launch.docker import container_token
from kit.launch.docker.container_spec import (
    LABEL_MANAGED,
    LABEL_RUN_ID,
    ContainerSpec,
    is_secret_name,
)

Progress = Callable[[str], None]
HttpProbe = Callable[[str], "int | None"]


@dataclass(frozen=True)
class ImageInfo:
    """An image as the daemon knows it: local id, registry digests and tags."""

    reference: str
    id: str
    repo_digests: tuple[str, ...]
    tags: tuple[str, ...]
    source: str  # "local", "pulled" or "built"


@dataclass
class RunningContainer:
    """A started engine container and where it answers on the host."""

    spec: ContainerSpec
    container: Any
    host_port: int
    started_monotonic: float
    ready_seconds: float | None = None
    log_path: Path | None = field(default=None)

    @property
    def id(self) -> str:
        return str(self.container.id)

    @property
    def base_url(self) -> str:
        return f"http://{self.spec.host_ip}:{self.host_port}"

    @property
    def health_url(self) -> str:
        return self.base_url + self.spec.health_path


def _http_status(url: str) -> int | None:
    """GET `url` once; the status code, or None when nothing answered."""
    import httpx  # noqa: PLC0415 - loaded only when a container is polled

    try:
        return httpx.get(url, timeout=2.0).status_code
    except httpx.HTTPError:
        return None


def _is_not_found(exc: BaseException) -> bool:
    # docker.errors.NotFound / ImageNotFound, recognised without importing the SDK.
    return type(exc).__name__ in {"NotFound", "ImageNotFound"} or getattr(exc, "status_code", None) == 404


def _split_reference(reference: str) -> tuple[str, str]:
    """`repo[:tag]` → (repo, tag); digests (`repo@sha256:…`) stay whole in repo."""
    if "@" in reference:
        return reference, ""
    repo, sep, tag = reference.rpartition(":")
    if sep and "/" not in tag:
        return repo, tag
    return reference, "latest"


class DockerLauncher:
    """Starts and stops engine containers through a Docker SDK client."""

    def __init__(
        self,
        client: Any,
        *,
        progress: Progress | None = None,
        http_status: HttpProbe = _http_status,
        poll_s: float = 2.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.client = client
        self.progress = progress or (lambda line: None)
        self.http_status = http_status
        self.poll_s = poll_s
        self.sleep = sleep
        self.clock = clock

    @classmethod
    def from_env(cls, **kwargs: Any) -> DockerLauncher:
        """A launcher for the local Docker daemon (DOCKER_HOST etc. as the docker CLI reads them)."""
        try:
            import docker  # noqa: PLC0415 - the docker SDK loads only when Docker is used
        except ImportError as exc:
            raise EngineError(
                "the Docker SDK for Python is not installed", "pip install docker==7.1.0, or run the engine natively"
            ) from exc
        try:
            client = docker.from_env()
            client.ping()
        except Exception as exc:  # the SDK raises DockerException, requests errors, FileNotFoundError…
            raise EngineError(
                f"cannot reach the Docker daemon ({exc})",
                "start Docker (or set DOCKER_HOST), or use the native or external launcher",
            ) from exc
        return cls(client, **kwargs)

    # -- images -------------------------------------------------------------------------------

    def ensure_image(
        self,
        reference: str,
        *,
        dockerfile: str | None = None,
        context: str | Path | None = None,
        buildargs: dict[str, str] | None = None,
        pull: bool = True,
        build: Callable[[], Any] | None = None,
    ) -> ImageInfo:
        """The image `reference`, made by `build()`, built from `dockerfile` (in `context`) or pulled when
        missing."""
        try:
            return self._image_info(reference, self.client.images.get(reference), "local")
        except Exception as exc:
            if not _is_not_found(exc):
                raise EngineError(
                    f"could not look up image {reference}: {exc}", "check that Docker is running"
                ) from exc
        if build is not None:
            build()
            source = "built"
        elif dockerfile is not None:
            self._build(reference, dockerfile, Path(context or "."), buildargs or {})
            source = "built"
        elif pull:
            self._pull(reference)
            source = "pulled"
        else:
            raise EngineError(f"image {reference} is not present", f"build it or pull it: docker pull {reference}")
        return self._image_info(reference, self.client.images.get(reference), source)

    def _build(self, reference: str, dockerfile: str, context: Path, buildargs: dict[str, str]) -> None:
        self.build(reference, dockerfile, context, buildargs)

    def build(self, reference: str, dockerfile: str, context: Path, buildargs: dict[str, str],
              target: str | None = None, network_mode: str | None = None) -> None:
        """Build `reference` from `dockerfile` in `context` (its `target` stage; `network_mode="none"`: offline),
        showing the build's output as progress."""
        self.progress(f"building {reference} from {dockerfile}" + (f" (target {target})" if target else ""))
        extra: dict[str, Any] = {"target": target} if target else {}
        if network_mode:
            extra["network_mode"] = network_mode
        stream = self.client.api.build(
            path=str(context), dockerfile=dockerfile, tag=reference, buildargs=buildargs, rm=True, decode=True,
            **extra,
        )
        for chunk in stream:
            if "error" in chunk:
                detail = chunk.get("errorDetail", {}).get("message") or chunk["error"]
                raise EngineError(f"building {reference} failed: {str(detail).strip()}", "see the build output above")
            line = str(chunk.get("stream", "")).rstrip()
            if line:
                self.progress(line)

    def _pull(self, reference: str) -> None:
        repo, tag = _split_reference(reference)
        self.progress(f"pulling {reference}")
        for chunk in self.client.api.pull(repo, tag=tag or None, stream=True, decode=True):
            if "error" in chunk:
                raise EngineError(f"pulling {reference} failed: {chunk['error']}", "check the name and your network")
            parts = [chunk.get(k) for k in ("id", "status", "progress")]
            line = " ".join(str(p) for p in parts if p)
            if line:
                self.progress(line)

    @staticmethod
    def _image_info(reference: str, image: Any, source: str) -> ImageInfo:
        attrs = getattr(image, "attrs", {}) or {}
        return ImageInfo(
            reference=reference,
            id=str(image.id),
            repo_digests=tuple(attrs.get("RepoDigests") or ()),
            tags=tuple(getattr(image, "tags", ()) or ()),
            source=source,
        )

    # -- containers ---------------------------------------------------------------------------

    def start(self, spec: ContainerSpec) -> RunningContainer:
        """Start the container described by `spec` (detached) and find its host port."""
        started = self.clock()
        try:
            kwargs = spec.run_kwargs()
            kwargs["labels"] = {**kwargs["labels"], container_token.LABEL_TOKEN: container_token.token_for(spec.run_id)}
            container = self.client.containers.run(**kwargs)
        except Exception as exc:
            raise EngineError(
                f"could not start the {spec.engine} container from {spec.image}: {exc}",
                "check the image name, that the NVIDIA container toolkit is installed, and that the port is free",
            ) from exc
        container.reload()
        host_port = spec.host_port or self._published_port(container, spec)
        self.progress(f"started {spec.engine} container {str(container.id)[:12]} on {spec.host_ip}:{host_port}")
        return RunningContainer(spec=spec, container=container, host_port=host_port, started_monotonic=started)

    @staticmethod
    def _published_port(container: Any, spec: ContainerSpec) -> int:
        ports = (container.attrs.get("NetworkSettings") or {}).get("Ports") or {}
        for binding in ports.get(f"{spec.container_port}/tcp") or ():
            if binding.get("HostIp") == spec.host_ip and binding.get("HostPort"):
                return int(binding["HostPort"])
        raise EngineError(
            f"the {spec.engine} container published no port on {spec.host_ip}",
            "pass an explicit host port, or check the container with docker inspect",
        )

    def wait_healthy(self, running: RunningContainer, timeout_s: float = 900.0) -> float:
        """Block until the server is ready; seconds from start. Fails fast if the container exits.

        Ready means Docker reports the container `healthy` or its health URL answers 200, whichever
        comes first (the Docker probe runs only every few seconds).
        """
        deadline = self.clock() + timeout_s
        spec = running.spec
        while True:
            running.container.reload()
            state = running.container.attrs.get("State") or {}
            status = state.get("Status")
            if status in {"exited", "dead"}:
                tail = self._log_tail(running.container)
                raise EngineError(
                    f"the {spec.engine} container exited during start-up (exit code {state.get('ExitCode')})"
                    + (f": {tail}" if tail else ""),
                    "read the container log; common causes are a wrong model path, too little GPU memory, "
                    "or no GPU visible to Docker",
                )
            health = (state.get("Health") or {}).get("Status")
            if health == "healthy" or self.http_status(running.health_url) == 200:
                running.ready_seconds = self.clock() - running.started_monotonic
                self.progress(f"{spec.engine} ready after {running.ready_seconds:.1f} s")
                return running.ready_seconds
            if self.clock() >= deadline:
                raise EngineError(
                    f"the {spec.engine} server did not become healthy within {timeout_s:.0f} s",
                    "raise the start-up timeout (large models load slowly) or read the container log",
                )
            self.sleep(self.poll_s)

    @staticmethod
    def _log_tail(container: Any, lines: int = 5) -> str:
        try:
            raw = container.logs(stdout=True, stderr=True, tail=lines)
        except Exception:  # noqa: BLE001 - only decorates an error message; never hide the real failure
            return ""
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        return " | ".join(line.strip() for line in text.splitlines() if line.strip())

    def write_logs(self, running: RunningContainer, path: str | Path) -> Path:
        """Write the container's whole log (stdout and stderr, with timestamps) to `path`."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        raw = running.container.logs(stdout=True, stderr=True, timestamps=True)
        write_bytes_atomic(target, raw if isinstance(raw, bytes) else str(raw).encode("utf-8"))
        running.log_path = target
        return target

    def describe(self, running: RunningContainer) -> dict[str, Any]:
        """What the manifest records: image id and digests, container id and effective config."""
        container = running.container
        container.reload()
        attrs = container.attrs
        config = dict(attrs.get("Config") or {})
        config["Env"] = [_redact_env_line(line) for line in config.get("Env") or ()]
        if container_token.LABEL_TOKEN in (config.get("Labels") or {}):  # the token stays on this machine
            config["Labels"] = {**config["Labels"], container_token.LABEL_TOKEN: "<redacted>"}
        host_config = attrs.get("HostConfig") or {}
        image = getattr(container, "image", None)
        image_attrs = getattr(image, "attrs", {}) or {}
        return {
            "engine": running.spec.engine,
            "image": running.spec.image,
            "image_id": str(getattr(image, "id", None) or attrs.get("Image")),
            "image_repo_digests": list(image_attrs.get("RepoDigests") or ()),
            "container_id": running.id,
            "container_name": attrs.get("Name", "").lstrip("/") or getattr(container, "name", None),
            "base_url": running.base_url,
            "ready_seconds": running.ready_seconds,
            "config": {k: config.get(k) for k in ("Image", "Entrypoint", "Cmd", "Env", "Labels", "Healthcheck")},
            "host_config": {
                k: host_config.get(k) for k in ("DeviceRequests", "PortBindings", "Mounts", "IpcMode", "Binds")
            },
            "spec": running.spec.to_manifest(),
        }

    def stop(self, running: RunningContainer, *, log_path: str | Path | None = None, timeout_s: int = 30) -> None:
        """Write the log (if `log_path`), stop the container and remove it. Safe to call twice."""
        container = running.container
        try:
            if log_path is not None:
                self.write_logs(running, log_path)
            container.stop(timeout=timeout_s)
        except Exception as exc:
            if not _is_not_found(exc):
                raise
        try:
            container.remove(force=True)
        except Exception as exc:
            if not _is_not_found(exc):
                raise

    def leftovers(self, run_id: str) -> tuple[list[Any], list[Any]]:
        """The containers labelled with run `run_id` (running or not): (those this kit started, by their token;
        the others, which only carry the labels)."""
        filters = {"label": [f"{LABEL_MANAGED}=true", f"{LABEL_RUN_ID}={run_id}"]}
        ours: list[Any] = []
        others: list[Any] = []
        for container in list(self.client.containers.list(all=True, filters=filters)):
            if container_token.labels_of(container).get(LABEL_RUN_ID) != run_id:  # never another run's container
                continue
            (ours if container_token.started_here(container, run_id) else others).append(container)
        return ours, others

    def cleanup(self, run_id: str) -> list[str]:
        """Remove every container this kit started for `run_id` (running or not; `leftovers`); their names."""
        removed: list[str] = []
        for container in self.leftovers(run_id)[0]:
            try:
                container.remove(force=True)
            except Exception as exc:
                if not _is_not_found(exc):
                    raise
            removed.append(str(getattr(container, "name", container.id)))
        if removed:
            self.progress(f"removed {len(removed)} leftover container(s) of run {run_id}")
        return removed


def _redact_env_line(line: str) -> str:
    name, sep, _ = line.partition("=")
    return f"{name}=<redacted>" if sep and is_secret_name(name) else line
