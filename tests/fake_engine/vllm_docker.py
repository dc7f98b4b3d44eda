"""The fake Docker SDK client (tests/launch/fake_docker.py) whose vLLM "containers" are fake vLLM server
processes (tests/fake_engine/vllm.py), each started with its container's own `vllm serve` flags on the
port the fake publishes, and killed when the container is stopped. There is no Docker daemon here."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from kit.launch.docker.container_spec import VLLM_IMAGE
from tests.fake_engine.vllm_serve import command
from tests.launch.fake_docker import FakeDockerClient


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class VllmContainers(FakeDockerClient):
    """The fake Docker SDK whose vLLM "containers" are fake vLLM server processes started with the
    container's own `vllm serve` flags on the port the fake publishes."""

    def __init__(self, log_dir: Path):
        super().__init__()
        self.log_dir = log_dir
        self.processes: list[subprocess.Popen] = []
        self.add_image(VLLM_IMAGE)
        started = self.containers.run

        def run(**kwargs):
            (inside, (host_ip, host_port)), = kwargs["ports"].items()
            if not host_port:  # a port free on this machine, not the fake's fixed 49151, 49152, ...: other
                kwargs = {**kwargs, "ports": {inside: (host_ip, free_port())}}  # test runs may be using those
            container = started(**kwargs)
            port = next(iter(container.attrs["NetworkSettings"]["Ports"].values()))[0]["HostPort"]
            flags = list(kwargs["command"][1:])
            flags[flags.index("--host") + 1], flags[flags.index("--port") + 1] = "127.0.0.1", port
            log = (self.log_dir / f"{container.name}.log").open("wb")
            process = subprocess.Popen(command(*flags, model=kwargs["command"][0]), stdout=log,
                                       stderr=subprocess.STDOUT)
            self.processes.append(process)
            stop = container.stop

            def stopped(**options):
                process.kill()
                process.wait(10)
                stop(**options)

            container.stop = stopped
            return container

        self.containers.run = run

    @classmethod
    def installed(cls, monkeypatch, log_dir: Path) -> VllmContainers:
        """A client that `DockerLauncher.from_env()` returns for the rest of the test."""
        from kit.launch.docker.docker_launcher import DockerLauncher  # noqa: PLC0415

        client = cls(log_dir)
        monkeypatch.setattr(DockerLauncher, "from_env", classmethod(lambda launcher, **kw: launcher(client, poll_s=0.05)))
        return client

    def kill_all(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait(10)
