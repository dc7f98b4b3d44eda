"""A stand-in for the `docker` SDK client that records every call.

There is no Docker daemon on the test machine, so the launcher is driven through this fake. It has
the SDK's shape (`client.containers.run/list`, `client.images.get`, `client.api.build/pull`,
container `reload/logs/stop/remove`, `attrs` as `docker inspect` returns them) and nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class NotFound(Exception):
    """Named like docker.errors.NotFound, which the launcher recognises by name or status 404."""

    status_code = 404


class ImageNotFound(NotFound):
    pass


@dataclass
class FakeImage:
    id: str
    tags: list[str]
    attrs: dict[str, Any]


@dataclass
class FakeContainer:
    client: FakeDockerClient
    id: str
    name: str
    attrs: dict[str, Any]
    image: FakeImage | None = None
    # Each reload() pops the next State from this script (the last one sticks).
    states: list[dict[str, Any]] = field(default_factory=list)
    log_bytes: bytes = b""
    removed: bool = False

    @property
    def labels(self) -> dict[str, str]:
        return self.attrs["Config"]["Labels"]

    def reload(self) -> None:
        self.client.calls.append(("container.reload", self.id))
        if self.removed:
            raise NotFound(f"No such container: {self.id}")
        if self.states:
            self.attrs["State"] = self.states.pop(0) if len(self.states) > 1 else self.states[0]

    def logs(self, **kwargs: Any) -> bytes:
        self.client.calls.append(("container.logs", self.id, kwargs))
        if "tail" in kwargs:
            return b"\n".join(self.log_bytes.splitlines()[-kwargs["tail"] :])
        return self.log_bytes

    def stop(self, **kwargs: Any) -> None:
        self.client.calls.append(("container.stop", self.id, kwargs))
        if self.removed:
            raise NotFound(f"No such container: {self.id}")
        self.attrs["State"] = {"Status": "exited", "ExitCode": 0}

    def remove(self, **kwargs: Any) -> None:
        self.client.calls.append(("container.remove", self.id, kwargs))
        if self.removed:
            raise NotFound(f"No such container: {self.id}")
        self.removed = True


class _Containers:
    def __init__(self, client: FakeDockerClient):
        self.client = client

    def run(self, **kwargs: Any) -> FakeContainer:
        self.client.calls.append(("containers.run", kwargs))
        if self.client.run_error is not None:
            raise self.client.run_error
        number = len(self.client.containers_made) + 1
        port = kwargs["ports"]
        (container_port, (host_ip, host_port)) = next(iter(port.items()))
        published = str(host_port) if host_port else str(49150 + number)
        attrs = {
            "Id": f"c{number:063d}",
            "Name": "/" + kwargs.get("name", f"fake_{number}"),
            "Image": "sha256:" + "ab" * 32,
            "Config": {
                "Image": kwargs["image"],
                "Entrypoint": kwargs["entrypoint"],
                "Cmd": kwargs["command"],
                "Env": [f"{k}={v}" for k, v in kwargs["environment"].items()] + ["PATH=/usr/bin"],
                "Labels": dict(kwargs["labels"]),
                "Healthcheck": kwargs.get("healthcheck"),
            },
            "HostConfig": {
                "DeviceRequests": kwargs["device_requests"],
                "PortBindings": {container_port: [{"HostIp": host_ip, "HostPort": str(host_port or "")}]},
                "Mounts": kwargs["mounts"],
                "IpcMode": kwargs.get("ipc_mode", "private"),
            },
            "NetworkSettings": {"Ports": {container_port: [{"HostIp": host_ip, "HostPort": published}]}},
            "State": {"Status": "running", "Health": {"Status": "starting"}},
        }
        container = FakeContainer(
            client=self.client,
            id=attrs["Id"],
            name=attrs["Name"].lstrip("/"),
            attrs=attrs,
            image=self.client.images_by_ref.get(kwargs["image"]),
            states=list(self.client.next_states),
            log_bytes=self.client.next_logs,
        )
        self.client.containers_made.append(container)
        return container

    def list(self, **kwargs: Any) -> list[FakeContainer]:
        self.client.calls.append(("containers.list", kwargs))
        wanted = dict(item.split("=", 1) for item in kwargs.get("filters", {}).get("label", []))
        return [
            c
            for c in self.client.containers_made
            if not c.removed and all(c.labels.get(k) == v for k, v in wanted.items())
        ]


class _Images:
    def __init__(self, client: FakeDockerClient):
        self.client = client

    def get(self, reference: str) -> FakeImage:
        self.client.calls.append(("images.get", reference))
        try:
            return self.client.images_by_ref[reference]
        except KeyError:
            raise ImageNotFound(f"No such image: {reference}") from None


class _Api:
    def __init__(self, client: FakeDockerClient):
        self.client = client

    def build(self, **kwargs: Any):
        self.client.calls.append(("api.build", kwargs))
        yield from self.client.build_stream
        if not any("error" in chunk for chunk in self.client.build_stream):
            self.client.add_image(kwargs["tag"])

    def pull(self, repository: str, **kwargs: Any):
        self.client.calls.append(("api.pull", repository, kwargs))
        yield from self.client.pull_stream
        if not any("error" in chunk for chunk in self.client.pull_stream):
            tag = kwargs.get("tag")
            self.client.add_image(f"{repository}:{tag}" if tag else repository)


class FakeDockerClient:
    """Records calls in `self.calls`; behaviour is scripted through its attributes."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.containers = _Containers(self)
        self.images = _Images(self)
        self.api = _Api(self)
        self.containers_made: list[FakeContainer] = []
        self.images_by_ref: dict[str, FakeImage] = {}
        self.next_states: list[dict[str, Any]] = []
        self.next_logs = b"server listening\n"
        self.build_stream: list[dict[str, Any]] = []
        self.pull_stream: list[dict[str, Any]] = []
        self.run_error: Exception | None = None

    def add_image(self, reference: str) -> FakeImage:
        image = FakeImage(
            id="sha256:" + "cd" * 32,
            tags=[reference],
            attrs={"RepoDigests": [reference.split(":")[0] + "@sha256:" + "ef" * 32]},
        )
        self.images_by_ref[reference] = image
        return image

    def called(self, name: str) -> list[tuple[Any, ...]]:
        return [call for call in self.calls if call[0] == name]
