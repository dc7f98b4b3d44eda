"""`--launcher docker`: the runner hands protocols a container per session. No Docker daemon runs here, so
the launcher is driven through the recording fake client (tests/launch/fake_docker.py)."""


from kit.run import runner
from kit.launch.docker.docker_launcher import DockerLauncher
from kit.launch.docker.docker_run import llamacpp_provider
from kit.protocols import kinds
from tests.bundle.kit_cli import run_here

from .fake_docker import FakeDockerClient


def test_runner_builds_a_llamacpp_container_provider_from_the_protocol(tmp_path):
    protocol, _, _ = kinds.load("reset", {"engine": {"ctx_size": 1024, "cache_ram": 0}})
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    options = runner.RunOptions(protocol="reset", launcher="docker")
    provider = llamacpp_provider(options, model, protocol, {"model_sha256": "abc"}, print,
                                 launcher=DockerLauncher(FakeDockerClient()))
    described = provider.describe()
    assert described["kind"] == "docker" and described["model_sha256"] == "abc"
    command = described["spec"]["command"]
    assert command[command.index("--ctx-size") + 1] == "1024" and command[command.index("--cache-ram") + 1] == "0"
    assert command[command.index("--seed") + 1] == "42"
    ports = described["spec"]["ports"]
    assert all(binding[0] == "127.0.0.1" for binding in ports.values())


def test_without_a_daemon_the_cli_says_so_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-daemon.sock")  # whatever daemon this machine has
    result = run_here("demo", "--launcher", "docker", "--out", str(tmp_path))
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "cannot reach the Docker daemon" in lines[0] and "native" in lines[0]
    assert not any(tmp_path.iterdir())  # refused before any run folder exists
