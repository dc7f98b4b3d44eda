"""The Docker provider: one engine container per session, through the Docker launcher.

It follows the same contract as `NativeProvider` (see kit.launch.provider): `describe()` for the
manifest, and `session(label, log_dir)` yielding an `EngineSession` on a freshly started server.
Each session starts a container from a `ContainerSpec` (llama.cpp or vLLM image), waits for its
health endpoint, records image id/digests and the container's effective config (credentials
redacted) in the session's `launch` dict, and on the way out writes the container log into the run's
log folder, stops and removes the container. Every container carries the run's id label, so
`cleanup()` removes leftovers after a crash.
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Iterator

from kit.engines.base import Engine
from kit.core.errors import ConfigError
from kit.launch.docker.container_spec import ContainerSpec, llamacpp_spec, vllm_spec
from kit.launch.docker.docker_launcher import DockerLauncher, ImageInfo, RunningContainer
from kit.launch.provider import KEEP, EngineSession

SpecFactory = Callable[[str], ContainerSpec]  # container name -> spec
EngineFactory = Callable[[RunningContainer], Engine]


class ContainerHandle:
    """A running engine container seen as a server (kit.launch.provider.ServerHandle). Its log is at
    `log_path` once the provider stops the container (at the end of the session, also after an error)."""

    EXIT_POLL_S = 0.25

    def __init__(self, running: RunningContainer, log_path: Path, launcher: DockerLauncher):
        self.running = running
        self.log_path = log_path
        self.launcher = launcher  # its clock and sleep time the exit wait

    def alive(self) -> bool:
        try:
            self.running.container.reload()
        except Exception:  # noqa: BLE001 - a container the daemon no longer knows is not alive
            return False
        return (self.running.container.attrs.get("State") or {}).get("Status") == "running"

    def wait_exit(self, settle: float) -> bool:
        """Poll the container's status for up to `settle` seconds; True once it is no longer running."""
        deadline = self.launcher.clock() + settle
        while self.alive():
            if self.launcher.clock() >= deadline:
                return False
            self.launcher.sleep(self.EXIT_POLL_S)
        return True

    def log_tail(self, lines: int = 20) -> str:
        try:
            raw = self.running.container.logs(stdout=True, stderr=True, tail=lines)
        except Exception:  # noqa: BLE001 - only used to decorate error messages
            return ""
        return raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)

    def log_location(self) -> str:
        return str(self.log_path)


def _llamacpp_engine(running: RunningContainer) -> Engine:
    from kit.engines.llamacpp import LlamaCppEngine  # noqa: PLC0415

    return LlamaCppEngine(running.base_url, restartable=True)


def _vllm_engine(prefix_caching: bool, dev_mode: bool) -> EngineFactory:
    def make(running: RunningContainer) -> Engine:
        from kit.engines.vllm import VllmEngine  # noqa: PLC0415

        return VllmEngine(running.base_url, prefix_caching=prefix_caching, dev_mode=dev_mode, restartable=True,
                          request_token_ids=True)

    return make


def container_name(run_id: str, label: str) -> str:
    """A Docker-legal container name for one session of a run."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", f"kit-{run_id}-{label}")


class DockerProvider:
    """Starts one engine container per session (llama.cpp or vLLM image) through a DockerLauncher."""

    fresh_servers = True

    def __init__(self, launcher: DockerLauncher, run_id: str, make_spec: SpecFactory, make_engine: EngineFactory,
                 *, image_options: dict[str, Any] | None = None, startup_timeout_s: float = 900.0,
                 details: dict[str, Any] | None = None):
        """`image_options` go to `launcher.ensure_image` (dockerfile, context, buildargs, pull)."""
        self.launcher = launcher
        self.run_id = run_id
        self.make_spec = make_spec
        self.make_engine = make_engine
        self.image_options = image_options or {}
        self.startup_timeout_s = startup_timeout_s
        self.details = details or {}
        self._image: ImageInfo | None = None
        self._remake: Callable[[Path | None, Any, dict[str, Any] | None], DockerProvider] | None = None

    @classmethod
    def llamacpp(cls, launcher: DockerLauncher, run_id: str, model_file: str | Path, **options: Any) -> DockerProvider:
        """llama-server containers (kit/llamacpp image); `options` go to `llamacpp_spec` or the provider."""
        given = dict(options)
        own = {k: options.pop(k) for k in ("image_options", "startup_timeout_s", "details") if k in options}
        provider = cls(launcher, run_id,
                       lambda name: llamacpp_spec(run_id=run_id, model_file=model_file, name=name, **options),
                       _llamacpp_engine, **own)
        provider._remake = lambda model, cache_ram, details: cls.llamacpp(  # noqa: SLF001
            launcher, run_id, model or model_file, **{
                **given, "details": {**given.get("details", {}), **(details or {})},
                **({} if cache_ram is KEEP else {"cache_ram_mib": cache_ram})})
        return provider

    @classmethod
    def vllm(cls, launcher: DockerLauncher, run_id: str, model: str, prefix_caching: bool,
             **options: Any) -> DockerProvider:
        """`vllm serve` containers (kit/vllm image); `options` go to `vllm_spec` or the provider."""
        own = {k: options.pop(k) for k in ("image_options", "startup_timeout_s", "details") if k in options}
        dev_mode = bool(options.get("dev_mode", False))
        return cls(launcher, run_id,
                   lambda name: vllm_spec(run_id=run_id, model=model, prefix_caching=prefix_caching, name=name,
                                          **options),
                   _vllm_engine(prefix_caching, dev_mode), **own)

    def describe(self) -> dict[str, Any]:
        spec = self.make_spec(container_name(self.run_id, "SESSION"))
        return {"kind": "docker", "engine": spec.engine, "image": spec.image, "run_id": self.run_id,
                "spec": spec.to_manifest(), **self.details}

    def variant(self, model: Path | None = None, cache_ram: Any = KEEP,
                details: dict[str, Any] | None = None) -> DockerProvider:
        """Containers of the same image serving another GGUF and/or `--cache-ram` (llama.cpp only)."""
        if self._remake is None:
            raise ConfigError("this protocol needs a different model file or cache setting per pass, which the "
                              "vLLM container provider does not offer", "run it on llama.cpp (native or docker)")
        other = self._remake(model, cache_ram, details)
        other._image = self._image  # noqa: SLF001 - the image is the same; build or pull it once
        other.make_engine = self.make_engine  # and so is the engine client that talks to its containers
        return other

    def image(self) -> ImageInfo:
        """The engine image (built or pulled once per provider when missing)."""
        if self._image is None:
            spec = self.make_spec(container_name(self.run_id, "image"))
            self._image = self.launcher.ensure_image(spec.image, **self.image_options)
        return self._image

    @contextmanager
    def session(self, label: str, log_dir: Path) -> Iterator[EngineSession]:
        spec = self.make_spec(container_name(self.run_id, label))
        image = self.image()
        log_path = Path(log_dir) / f"container-{label}.log"
        try:
            running = self.launcher.start(spec)
        except Exception:
            self.cleanup()  # a container may exist in "created" state after a failed start
            raise
        engine: Engine | None = None
        try:
            self.launcher.wait_healthy(running, self.startup_timeout_s)
            engine = self.make_engine(running)
            launch = {"image_info": asdict(image), "container": self.launcher.describe(running),
                      "log": log_path.name, **engine.info()}
            yield EngineSession(engine=engine, launch=launch,
                                server=ContainerHandle(running, log_path, self.launcher))
        finally:
            if engine is not None:
                engine.close()
            try:
                self.launcher.stop(running, log_path=log_path)
            except Exception:
                self.cleanup()
                raise

    def cleanup(self) -> list[str]:
        """Remove every container left over from this run (by its run-id label)."""
        return self.launcher.cleanup(self.run_id)
