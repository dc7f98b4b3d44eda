"""The Docker launcher, driven through a fake SDK client (tests/launch/fake_docker.py).

There is no Docker daemon here, so these tests check what the launcher asks of the SDK and how it
reacts to the daemon's answers (container states, port bindings, missing images, build errors),
using the shapes `docker inspect` returns. Nothing here starts a real container.
"""

from __future__ import annotations

import json

import pytest

from kit.core.errors import EngineError
from kit.launch.docker.container_spec import LABEL_RUN_ID, llamacpp_spec, vllm_spec
from kit.launch.docker.container_token import LABEL_TOKEN, token_for
from kit.launch.docker.docker_launcher import DockerLauncher
from tests.fake_engine.clock import Clock

from .fake_docker import FakeDockerClient


@pytest.fixture
def client():
    return FakeDockerClient()


@pytest.fixture
def clock():
    return Clock(100.0)


@pytest.fixture
def gguf(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")
    return path


def make_launcher(client, clock, *, http=None, progress=None):
    return DockerLauncher(
        client,
        progress=progress,
        http_status=http or (lambda url: None),
        poll_s=1.0,
        sleep=clock.sleep,
        clock=clock,
    )


def test_present_image_is_neither_built_nor_pulled(client, clock):
    client.add_image("kit/llamacpp:7e4c0a9-cuda12.6")
    info = make_launcher(client, clock).ensure_image("kit/llamacpp:7e4c0a9-cuda12.6", dockerfile="Dockerfile.llamacpp")
    assert info.source == "local"
    assert info.id.startswith("sha256:")
    assert not client.called("api.build") and not client.called("api.pull")


def test_missing_image_is_built_with_progress(client, clock, tmp_path):
    client.build_stream = [{"stream": "Step 1/9 : FROM nvidia/cuda\n"}, {"stream": "\n"}, {"stream": "done\n"}]
    lines = []
    launcher = make_launcher(client, clock, progress=lines.append)
    info = launcher.ensure_image(
        "kit/llamacpp:test", dockerfile="Dockerfile.llamacpp", context=tmp_path, buildargs={"CUDA_ARCHITECTURES": "90"}
    )
    (call,) = client.called("api.build")
    assert call[1]["dockerfile"] == "Dockerfile.llamacpp"
    assert call[1]["tag"] == "kit/llamacpp:test"
    assert call[1]["buildargs"] == {"CUDA_ARCHITECTURES": "90"}
    assert call[1]["path"] == str(tmp_path)
    assert info.source == "built"
    assert "Step 1/9 : FROM nvidia/cuda" in lines and "done" in lines
    assert "" not in lines


def test_build_error_is_reported(client, clock):
    client.build_stream = [
        {"stream": "Step 1\n"},
        {"error": "cmake failed", "errorDetail": {"message": "cmake failed"}},
    ]
    with pytest.raises(EngineError, match="cmake failed"):
        make_launcher(client, clock).ensure_image("kit/x:1", dockerfile="Dockerfile.llamacpp")


def test_missing_image_is_pulled_by_repo_and_tag(client, clock):
    client.pull_stream = [{"status": "Downloading", "id": "abc", "progress": "[==> ]"}, {"status": "Pull complete"}]
    lines = []
    info = make_launcher(client, clock, progress=lines.append).ensure_image("vllm/vllm-openai:v0.11.0")
    (call,) = client.called("api.pull")
    assert call[1] == "vllm/vllm-openai" and call[2]["tag"] == "v0.11.0"
    assert info.source == "pulled"
    assert info.repo_digests and info.repo_digests[0].startswith("vllm/vllm-openai@sha256:")
    assert "abc Downloading [==> ]" in lines


def test_pull_refused_when_not_allowed(client, clock):
    with pytest.raises(EngineError, match="not present"):
        make_launcher(client, clock).ensure_image("kit/vllm:0.11.0", pull=False)


def test_start_passes_the_spec_and_finds_an_assigned_port(client, clock, gguf, fresh_kit_cache):
    spec = llamacpp_spec(run_id="run-7", model_file=gguf, host_port=0)
    running = make_launcher(client, clock).start(spec)
    (call,) = client.called("containers.run")
    expected = spec.run_kwargs()
    assert call[1] == {**expected, "labels": {**expected["labels"], LABEL_TOKEN: token_for("run-7")}}
    assert call[1]["detach"] is True
    assert running.host_port == 49151
    assert running.base_url == "http://127.0.0.1:49151"
    assert running.health_url == "http://127.0.0.1:49151/health"


def test_start_failure_names_the_likely_causes(client, clock, gguf):
    client.run_error = RuntimeError('could not select device driver "nvidia" with capabilities: [[gpu]]')
    with pytest.raises(EngineError, match="NVIDIA container toolkit"):
        make_launcher(client, clock).start(llamacpp_spec(run_id="r", model_file=gguf))


def test_wait_healthy_uses_docker_health_status(client, clock, gguf):
    client.next_states = [
        {"Status": "running", "Health": {"Status": "starting"}},  # consumed by start()
        {"Status": "running", "Health": {"Status": "starting"}},
        {"Status": "running", "Health": {"Status": "starting"}},
        {"Status": "running", "Health": {"Status": "healthy"}},
    ]
    launcher = make_launcher(client, clock)
    running = launcher.start(llamacpp_spec(run_id="r", model_file=gguf, host_port=18080))
    seconds = launcher.wait_healthy(running, timeout_s=60)
    assert seconds == pytest.approx(2.0)
    assert running.ready_seconds == seconds


def test_wait_healthy_accepts_http_200_before_docker_probe(client, clock, gguf):
    answers = iter([None, 503, 200])
    probed = []

    def http(url):
        probed.append(url)
        return next(answers)

    launcher = make_launcher(client, clock, http=http)
    running = launcher.start(vllm_spec(run_id="r", model="m", prefix_caching=True, host_port=18000))
    assert launcher.wait_healthy(running, timeout_s=60) == pytest.approx(2.0)
    assert probed == ["http://127.0.0.1:18000/health"] * 3


def test_wait_healthy_fails_fast_when_container_exits(client, clock, gguf):
    client.next_states = [{"Status": "running"}, {"Status": "exited", "ExitCode": 1}]
    client.next_logs = b"loading model\nerror: failed to open /models/m.gguf\n"
    launcher = make_launcher(client, clock)
    running = launcher.start(llamacpp_spec(run_id="r", model_file=gguf, host_port=18080))
    with pytest.raises(EngineError, match=r"exit code 1.*failed to open /models/m.gguf"):
        launcher.wait_healthy(running, timeout_s=600)
    assert clock.now == 100.0  # no waiting once it has exited


def test_wait_healthy_times_out(client, clock, gguf):
    launcher = make_launcher(client, clock)
    running = launcher.start(llamacpp_spec(run_id="r", model_file=gguf, host_port=18080))
    with pytest.raises(EngineError, match="within 30 s"):
        launcher.wait_healthy(running, timeout_s=30)
    assert 30 <= clock.now - 100.0 <= 31


def test_logs_written_and_container_removed_on_stop(client, clock, gguf, tmp_path):
    client.next_logs = b"2026-01-01T00:00:00Z main: server is listening\n"
    launcher = make_launcher(client, clock)
    running = launcher.start(llamacpp_spec(run_id="r", model_file=gguf, host_port=18080))
    log_path = tmp_path / "logs" / "server.log"
    launcher.stop(running, log_path=log_path, timeout_s=5)
    assert log_path.read_bytes() == client.next_logs
    (logs_call,) = [c for c in client.called("container.logs") if "timestamps" in c[2]]
    assert logs_call[2] == {"stdout": True, "stderr": True, "timestamps": True}
    assert client.called("container.stop")[0][2] == {"timeout": 5}
    assert client.called("container.remove")[0][2] == {"force": True}
    assert client.containers_made[0].removed
    launcher.stop(running)  # a second stop is harmless


def test_describe_gives_image_and_config_without_secrets(client, clock):
    client.add_image("kit/vllm:0.11.0")
    launcher = make_launcher(client, clock)
    spec = vllm_spec(run_id="r", model="m", prefix_caching=False, hf_token="hf_very_secret", host_port=18000)
    running = launcher.start(spec)
    info = launcher.describe(running)
    assert info["image_id"] == "sha256:" + "cd" * 32
    assert info["image_repo_digests"] == ["kit/vllm@sha256:" + "ef" * 32]
    assert info["container_id"] == running.id
    assert info["host_config"]["IpcMode"] == "host"
    assert info["host_config"]["DeviceRequests"][0]["capabilities"] == [["gpu"]]
    assert "HF_TOKEN=<redacted>" in info["config"]["Env"]
    assert "PATH=/usr/bin" in info["config"]["Env"]
    assert "hf_very_secret" not in json.dumps(info)


def test_cleanup_removes_only_this_runs_containers(client, clock, gguf, fresh_kit_cache):
    launcher = make_launcher(client, clock)
    launcher.start(llamacpp_spec(run_id="crashed", model_file=gguf, host_port=18080))
    launcher.start(vllm_spec(run_id="crashed", model="m", prefix_caching=True, host_port=18000))
    launcher.start(llamacpp_spec(run_id="other", model_file=gguf, host_port=18081))
    removed = launcher.cleanup("crashed")
    assert len(removed) == 2
    (list_call,) = client.called("containers.list")
    assert list_call[1]["all"] is True
    assert f"{LABEL_RUN_ID}=crashed" in list_call[1]["filters"]["label"]
    assert [c.removed for c in client.containers_made] == [True, True, False]
    assert launcher.cleanup("crashed") == []


def _labelled_by_someone_else(client, gguf, token=None):
    """A container carrying the run's labels (kit.managed=true, kit.run_id) that this kit did not start: what
    anyone who can run `docker run --label ...` makes; `token`: a kit.token of their own choosing."""
    kwargs = llamacpp_spec(run_id="crashed", model_file=gguf, host_port=18090).run_kwargs()
    if token is not None:
        kwargs["labels"] = {**kwargs["labels"], LABEL_TOKEN: token}
    return client.containers.run(**kwargs)


@pytest.mark.parametrize("token", [None, "", "0" * 64])
def test_cleanup_leaves_containers_that_only_carry_the_labels(client, clock, gguf, fresh_kit_cache, token):
    launcher = make_launcher(client, clock)
    stranger = _labelled_by_someone_else(client, gguf, token)
    ours = launcher.start(llamacpp_spec(run_id="crashed", model_file=gguf, host_port=18080))
    assert launcher.leftovers("crashed") == ([ours.container], [stranger])
    assert launcher.cleanup("crashed") == [ours.container.name]
    assert ours.container.removed and not stranger.removed
    assert not [call for call in client.called("container.remove") if call[1] == stranger.id]


def test_a_token_is_only_good_for_its_own_run_and_its_own_key(client, clock, gguf, fresh_kit_cache):
    launcher = make_launcher(client, clock)
    other_run = launcher.start(llamacpp_spec(run_id="other", model_file=gguf, host_port=18081)).container
    copied = _labelled_by_someone_else(client, gguf, other_run.labels[LABEL_TOKEN])  # another run's token
    assert launcher.leftovers("crashed") == ([], [copied])
    started = launcher.start(llamacpp_spec(run_id="crashed", model_file=gguf, host_port=18080)).container
    (fresh_kit_cache / "container-key").unlink()  # a new key: what the old one signed is no longer ours
    assert launcher.leftovers("crashed") == ([], [copied, started])
    assert (fresh_kit_cache / "container-key").stat().st_mode & 0o077 == 0  # readable by its user only


def test_the_token_never_reaches_the_record(client, clock, gguf, fresh_kit_cache):
    launcher = make_launcher(client, clock)
    running = launcher.start(llamacpp_spec(run_id="r", model_file=gguf, host_port=18080))
    token = running.container.labels[LABEL_TOKEN]
    assert len(token) == 64
    info = launcher.describe(running)
    assert info["config"]["Labels"][LABEL_TOKEN] == "<redacted>" and token not in json.dumps(info)


def test_from_env_without_daemon_says_how_to_fix(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    with pytest.raises(EngineError, match="Docker daemon"):
        DockerLauncher.from_env()
