"""`kit doctor`: each check against injected probes, then the real doctor on this machine.

The probe-driven tests fake only what cannot exist here (a Docker daemon, nvidia-smi on a GPU
machine); the `docker info` and nvidia-smi texts are the shapes those tools print.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kit import doctor
from kit.doctor import MISSING, OK, WARN, CommandResult, Probes
from kit.errors import EngineError

NVIDIA_SMI = "NVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB\nNVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB\n"
NVCC_12 = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.6, V12.6.77\n"
NVCC_13 = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"


def no_daemon():
    raise ConnectionError("Error while fetching server API version: No such file or directory")


def make_probes(tmp_path: Path, *, commands=None, tools=("cmake", "make", "c++"), docker=no_daemon, free=50 * 2**30,
                embedded=None, needs=None, environ=None) -> Probes:
    commands = commands or {}

    def run(argv):
        return commands.get(argv[0])

    def start():
        if embedded is None:
            raise EngineError("the embedded llama-server is not installed", "use --server-bin")
        return embedded

    return Probes(docker_info=docker, run=run, which=lambda name: f"/usr/bin/{name}" if name in tools else None,
                  disk_free=lambda path: free, free_port=lambda: 43210, embedded=start,
                  model_needs=lambda names: needs if needs is not None else [(n, 98362432, False) for n in names],
                  cache_dir=tmp_path, environ=environ or {}, hf_token_file=tmp_path / "token")


def by_name(checks):
    return {c.name: c for c in checks}


def test_gpu_machine_with_docker_can_run_everything(tmp_path):
    info = {"ServerVersion": "27.3.1", "Runtimes": {"runc": {}, "nvidia": {"path": "nvidia-container-runtime"}}}
    probes = make_probes(tmp_path, docker=lambda: info,
                         commands={"nvidia-smi": CommandResult(0, NVIDIA_SMI), "nvcc": CommandResult(0, NVCC_12)},
                         embedded={"build_info": "b1-7e4c0a9", "cpu_backend": {"name": "wheel", "rebuilt_here": False}, "startup_seconds": 1.0})
    checks = doctor.run_checks(probes)
    found = by_name(checks)
    assert all(c.status == OK for c in checks if c.name != "hf token")
    assert "2 GPU(s)" in found["gpu"].detail and "550.54.15" in found["gpu"].detail
    assert found["nvcc"].data["release"] == "12.6"
    assert "wheel CPU backend" in found["embedded engine"].detail
    assert doctor.runnable(checks) == list(doctor.PATHS)


def test_docker_without_nvidia_runtime_is_missing_with_the_fix(tmp_path):
    probes = make_probes(tmp_path, docker=lambda: {"ServerVersion": "27.3.1", "Runtimes": {"runc": {}}})
    daemon = doctor.check_docker_daemon(probes)
    runtime = doctor.check_nvidia_runtime(probes, daemon)
    assert daemon.status == OK
    assert runtime.status == MISSING and "nvidia-ctk" in runtime.fix


def test_no_daemon_reports_the_reason(tmp_path):
    check = doctor.check_docker_daemon(make_probes(tmp_path))
    assert check.status == MISSING and "No such file" in check.detail and "DOCKER_HOST" in check.fix


@pytest.mark.parametrize("result, status, needle", [
    (None, MISSING, "not found"),
    (CommandResult(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"), MISSING,
     "couldn't communicate"),
    (CommandResult(0, ""), MISSING, "no GPU"),
])
def test_gpu_absent_or_broken(tmp_path, result, status, needle):
    check = doctor.check_gpu(make_probes(tmp_path, commands={"nvidia-smi": result} if result else {}))
    assert check.status == status and needle in check.detail and check.fix


def test_nvcc_versions(tmp_path):
    assert doctor.check_nvcc(make_probes(tmp_path)).status == MISSING
    warn = doctor.check_nvcc(make_probes(tmp_path, commands={"nvcc": CommandResult(0, NVCC_13)}))
    assert warn.status == WARN and "13.0" in warn.detail and "CUDA 12" in warn.fix
    assert doctor.nvcc_release(NVCC_12) == (12, 6)
    assert doctor.nvcc_release("garbage") is None


def test_build_tools_names_what_is_missing(tmp_path):
    check = doctor.check_build_tools(make_probes(tmp_path, tools=("cmake",)))
    assert check.status == MISSING and check.detail == "not found: make, c++"
    # the same install line as every build says (kit.launch.build_tools)
    assert check.fix == "install make and c++ (apt-get install -y cmake build-essential), then retry"


def test_disk_compares_free_space_with_models_to_fetch(tmp_path):
    needs = [("big", 40 * 2**30, False), ("cached", 90 * 2**30, True)]
    ok = doctor.check_disk(make_probes(tmp_path, needs=needs, free=50 * 2**30), ["big", "cached"])
    short = doctor.check_disk(make_probes(tmp_path, needs=needs, free=10 * 2**30), ["big", "cached"])
    unknown = doctor.check_disk(make_probes(tmp_path, needs=[("x", None, False)]), ["x"])
    assert ok.status == OK and ok.data["needed_bytes"] == 40 * 2**30  # the cached model needs no room
    assert short.status == MISSING and "KIT_CACHE_DIR" in short.fix
    assert unknown.status == WARN and "x" in unknown.detail


def test_hf_token_is_yes_or_no_and_never_printed(tmp_path):
    secret = "hf_abcdefSECRET123"
    check = doctor.check_hf_token(make_probes(tmp_path, environ={"HF_TOKEN": secret}))
    assert check.status == OK and secret not in json.dumps(doctor.report([check]))
    assert doctor.check_hf_token(make_probes(tmp_path)).status == WARN
    (tmp_path / "token").write_text(secret)
    assert doctor.check_hf_token(make_probes(tmp_path)).status == OK


def test_nothing_runnable_when_every_engine_path_is_missing(tmp_path):
    checks = doctor.run_checks(make_probes(tmp_path, tools=()))
    found = by_name(checks)
    assert found["embedded engine"].status == MISSING and found["embedded engine"].fix == "use --server-bin"
    assert doctor.runnable(checks) == []
    assert doctor.report(checks)["can_run"] == []


def test_check_line_shows_fix_only_when_not_ok():
    assert "->" in doctor.Check("gpu", MISSING, "none", "install it").line()
    assert "->" not in doctor.Check("gpu", OK, "one", "unused").line()


@pytest.mark.engine
def test_doctor_on_this_machine_is_honest():
    """This machine has no Docker daemon and no GPU, and the embedded engine works."""
    result = subprocess.run([sys.executable, "-m", "kit.cli", "doctor", "--json"], capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    found = {c["name"]: c for c in report["checks"]}
    assert found["docker daemon"]["status"] == MISSING
    assert found["gpu"]["status"] == MISSING
    assert found["embedded engine"]["status"] == OK
    assert "7e4c0a9" in found["embedded engine"]["data"]["build_info"]
    assert report["can_run"] == ["embedded CPU engine"]
