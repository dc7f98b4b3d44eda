"""The `docker` tier: a real Docker daemon and the real CPU image of the kit's llama-server.

The daemon is the one KIT_TEST_DOCKER_HOST (CI's, started by .ci/run) or DOCKER_HOST names, else a private one this session
starts and stops with .ci/dockerd.sh (root and Debian's docker.io needed). Where none can start, every
test of the tier is skipped with a one-line reason. The image is built once per session with
`kit images build llamacpp --target cpu --base debootstrap` (the base tarball is cached in the kit cache).
Kit commands run as subprocesses with DOCKER_HOST in their environment only: the unit tier's own
"no daemon" tests never see this daemon.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCKERD = ROOT / ".ci" / "dockerd.sh"
CPU_IMAGE = "kit/llamacpp:7e4c0a9-cpu"
TIMINGS: dict[str, float] = {}  # what the tier measured, printed at the end of the session


def _why_no_daemon() -> str | None:
    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        return "no dockerd/docker on PATH (apt-get install -y docker.io)"
    if os.geteuid() != 0:
        return "a private dockerd needs root"
    return None


@pytest.fixture(scope="session")
def docker_env():
    """The environment kit commands of the tier run with (DOCKER_HOST set), the daemon started if needed."""
    given = os.environ.get("KIT_TEST_DOCKER_HOST") or os.environ.get("DOCKER_HOST")
    folder = None
    if given:
        host = given
    else:
        reason = _why_no_daemon()
        if reason:
            pytest.skip(f"docker tier: {reason}")
        folder = tempfile.mkdtemp(prefix="kit-dockerd-tests-")
        started = time.monotonic()
        done = subprocess.run(["bash", str(DOCKERD), "start", folder], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            subprocess.run(["bash", str(DOCKERD), "stop", folder], capture_output=True, timeout=60)
            pytest.skip(f"docker tier: the private dockerd did not start ({done.stderr.strip().splitlines()[-1:]})")
        TIMINGS["daemon start s"] = time.monotonic() - started
        host = done.stdout.strip().split("=", 1)[1]
    env = {**os.environ, "DOCKER_HOST": host, "PYTHONPATH": str(ROOT)}
    yield env
    if folder is not None:
        subprocess.run(["bash", str(DOCKERD), "stop", folder], capture_output=True, timeout=120)


def kit(env, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kit.cli", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)


def docker(env, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, env=env, timeout=120)


@pytest.fixture(scope="session")
def cpu_image(docker_env) -> str:
    started = time.monotonic()
    built = kit(docker_env, "images", "build", "llamacpp", "--target", "cpu", "--base", "debootstrap")
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    TIMINGS["image build s (base from cache or debootstrap)"] = time.monotonic() - started
    return CPU_IMAGE


def pytest_terminal_summary(terminalreporter):
    if TIMINGS:
        terminalreporter.write_line("docker tier timings: " + ", ".join(f"{k} {v:.1f}" for k, v in TIMINGS.items()))
