"""The kit's Docker path, really run: the CPU image, one fresh container per session whose records equal the
native run's, the GPU request reaching a container, a killed kit's containers removed by `kit resume`, and
compose.yaml's profiles. Fixtures: tests/docker/conftest.py (a real daemon, or the tier is skipped)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .conftest import ROOT, TIMINGS, docker, kit

pytestmark = pytest.mark.docker

SMALL = ("--items", "2", "--sessions", "2", "--max-tokens", "16")


def _records(run_dir: Path) -> dict[str, list[dict]]:
    return {path.stem: [json.loads(line) for line in path.read_text().splitlines()]
            for path in sorted((run_dir / "records").glob("*.jsonl"))}


def _run_dir(out: Path) -> Path:
    (found,) = [p for p in out.iterdir() if p.is_dir() and p.name.startswith("reset-")]
    return found


def _containers(env, label: str) -> list[str]:
    listed = docker(env, "ps", "-a", "-q", "--filter", f"label={label}")
    assert listed.returncode == 0, listed.stderr
    return listed.stdout.split()


def test_the_image_says_what_it_is(docker_env, cpu_image):
    listed = kit(docker_env, "images", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    (image,) = [i for i in json.loads(listed.stdout) if i["reference"] == cpu_image]
    from kit.launch.docker import images  # noqa: PLC0415

    assert image["target"] == "cpu" and image["wheel_sha256"] == images.WHEEL_SHA256
    assert image["llamacpp_commit"].startswith("7e4c0a9") and image["base"] == images.DEBOOTSTRAP_IMAGE
    assert image["cpu_backend"] in ("wheel", "portable")
    user = docker(docker_env, "image", "inspect", cpu_image, "--format", "{{.Config.User}} {{json .Config.Entrypoint}}")
    assert user.stdout.split() == ["10001:10001", '["llama-server"]']


def test_docker_run_records_equal_the_native_run(docker_env, cpu_image, tmp_path):
    """`kit run reset --launcher docker --gpus none`: a fresh container per session, none left after, and
    token ids, prompts and verdicts equal to the native run's on the same wheel and CPU backend."""
    started = time.monotonic()
    in_docker = kit(docker_env, "run", "reset", "--launcher", "docker", "--image", cpu_image, "--gpus", "none",
                    *SMALL, "--threads", "2", "--out", str(tmp_path / "docker"))
    assert in_docker.returncode == 0, in_docker.stdout[-3000:] + in_docker.stderr[-2000:]
    TIMINGS["docker run s"] = time.monotonic() - started
    started = time.monotonic()
    native = kit(docker_env, "run", "reset", *SMALL, "--threads", "2", "--out", str(tmp_path / "native"))
    assert native.returncode == 0, native.stdout[-3000:] + native.stderr[-2000:]
    TIMINGS["native run s"] = time.monotonic() - started
    a, b = _run_dir(tmp_path / "docker"), _run_dir(tmp_path / "native")
    manifest = json.loads((a / "manifest.json").read_text())
    assert manifest["options"]["gpus"] == "none" and manifest["engine"]["gpus"] == "none"
    assert manifest["engine"]["image_identity"]["target"] == "cpu"
    launches = [p["launch"] for p in manifest["passes"].values()]
    ids = {launch["container"]["container_id"] for launch in launches}
    assert len(ids) == len(launches) == 2  # one fresh container per session
    assert all(launch["container"]["host_config"]["DeviceRequests"] in (None, []) for launch in launches)
    TIMINGS["first container ready s"] = launches[0]["container"]["ready_seconds"]
    assert _containers(docker_env, f"kit.run_id={manifest['engine']['run_id']}") == []
    assert sorted(p.name for p in (a / "logs").glob("container-*.log")) == ["container-s1.log", "container-s2.log"]
    ours, theirs = _records(a), _records(b)
    assert ours.keys() == theirs.keys() == {"s1", "s2"}
    compared = 0
    for session in ours:
        assert len(ours[session]) == len(theirs[session]) == 8
        for x, y in zip(ours[session], theirs[session]):
            assert (x["unit"], x["phase"], x["prompt_sha256"]) == (y["unit"], y["phase"], y["prompt_sha256"])
            assert x["completion"]["token_ids"] == y["completion"]["token_ids"]
            assert x["output_sha256"] == y["output_sha256"] and x["gate"] == y["gate"]
            compared += len(x["completion"]["token_ids"])
    assert compared > 0
    table = [json.loads((d / "results" / "reset_table.json").read_text()) for d in (a, b)]
    assert table[0]["sessions"] == table[1]["sessions"]  # the verdicts, session by session
    print(f"records equal: {sum(map(len, ours.values()))} records, {compared} token ids")


def test_a_gpu_request_reaches_the_container(docker_env, cpu_image, smollm2):
    """The stub NVIDIA hook lets dockerd honour the request: the ids asked for reach the container, `none`
    sends nothing."""
    script = f"""
import sys
from kit.launch.docker.container_spec import llamacpp_spec
from kit.launch.docker.docker_launcher import DockerLauncher
launcher = DockerLauncher.from_env()
for gpus in (("0", "1"), "none"):
    spec = llamacpp_spec(run_id="gpu-tier", model_file={str(smollm2)!r}, image={cpu_image!r}, gpus=gpus)
    running = launcher.start(spec)
    try:
        launcher.wait_healthy(running, 120)
        code, out = running.container.exec_run(["sh", "-c", "tr '\\\\0' '\\\\n' </proc/1/environ"])
        seen = [line for line in out.decode().splitlines() if line.startswith("NVIDIA_VISIBLE_DEVICES=")]
        print(gpus, seen, launcher.describe(running)["host_config"]["DeviceRequests"])
    finally:
        launcher.stop(running)
print("left", launcher.cleanup("gpu-tier"))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=docker_env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("('0', '1') ['NVIDIA_VISIBLE_DEVICES=0,1'] [{'Driver': 'nvidia'"), lines
    assert lines[1] in ("none [] None", "none [] []"), lines
    assert lines[2] == "left []"


def test_a_killed_kit_leaves_no_container_after_resume(docker_env, cpu_image, tmp_path):
    out = tmp_path / "out"
    process = subprocess.Popen([sys.executable, "-m", "kit.cli", "run", "reset", "--launcher", "docker",
                                "--image", cpu_image, *SMALL, "--out", str(out)], env=docker_env, cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while not _containers(docker_env, "kit.managed=true") and time.monotonic() < deadline:
            assert process.poll() is None, "the run ended before its first container started"
            time.sleep(0.5)
        left = _containers(docker_env, "kit.managed=true")
        assert left, "no container started within 120 s"
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    assert _containers(docker_env, "kit.managed=true") == left  # the killed kit stopped nothing
    run_dir = _run_dir(out)
    label = json.loads((run_dir / "manifest.json").read_text())["engine"]["run_id"]
    decoy = docker(docker_env, "create", "--label", "kit.managed=true", "--label", f"kit.run_id={label}",
                   "--label", f"kit.token={'0' * 64}", cpu_image)  # the run's labels, written by someone else
    assert decoy.returncode == 0, decoy.stderr
    decoy_id = decoy.stdout.strip()[:12]
    try:
        resumed = kit(docker_env, "resume", str(run_dir))
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-2000:]
        assert _containers(docker_env, "kit.managed=true") == [decoy_id]  # only what this kit started is gone
    finally:
        docker(docker_env, "rm", "-f", decoy_id)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "finished"
    found = manifest["resumed"][-1]["leftover_servers"]
    removed = [entry for entry in found if entry["outcome"].startswith("removed")]
    assert [entry["id"][:12] for entry in removed] == left
    assert all((run_dir / "logs" / entry["log"]).is_file() for entry in removed)
    assert [(entry["id"][:12], entry["outcome"]) for entry in found if entry not in removed] == \
        [(decoy_id, "left: not started by this kit (no matching kit.token)")]


@pytest.mark.skipif(shutil.which("docker-compose") is None, reason="no docker-compose (apt-get install -y docker-compose)")
@pytest.mark.parametrize("profile", ["llamacpp", "llamacpp-cpu"])
def test_compose_profiles_are_valid(docker_env, profile):
    done = subprocess.run(["docker-compose", "-f", str(ROOT / "compose.yaml"), "--profile", profile, "config"],
                          capture_output=True, text=True, env=docker_env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert f"kit/llamacpp:7e4c0a9-{'cpu' if profile.endswith('cpu') else 'cuda12.6'}" in done.stdout
