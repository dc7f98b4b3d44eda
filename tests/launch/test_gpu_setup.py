"""Native GPU set-up: command building and refusals, without running the real build or pip.

`which`, the command output and the executor are injected, so nvcc, nvidia-smi and pip are
stand-ins here; the nvcc and nvidia-smi texts are what those tools print.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kit.core.errors import EngineError
from kit.launch import gpu_setup

NVCC_12 = "Cuda compilation tools, release 12.6, V12.6.77\n"
NVCC_13 = "Cuda compilation tools, release 13.0, V13.0.88\n"
SMI_L = "GPU 0: NVIDIA L4 (UUID: GPU-0d8e6f7a-1111-2222-3333-444455556666)\n"


def tools(*present):
    return lambda name: f"/usr/bin/{name}" if name in present else None


class Recorder:
    """Stands in for running commands: records argv, answers with fixed exit codes."""

    def __init__(self, code: int = 0):
        self.code = code
        self.calls: list[list[str]] = []

    def __call__(self, argv):
        self.calls.append(list(argv))
        return self.code


def test_build_argv_runs_the_pinned_script_with_archs_and_prefix(tmp_path):
    argv = gpu_setup.build_llamacpp_argv(tmp_path / "pfx", "80;90")
    assert argv == ["bash", str(gpu_setup.BUILD_SCRIPT), "--archs", "80;90", str(tmp_path / "pfx")]
    assert gpu_setup.BUILD_SCRIPT.is_file()


def test_build_argv_is_accepted_by_the_script_itself(tmp_path):
    """The script's own --dry-run parses the argv we build (runs nothing)."""
    argv = gpu_setup.build_llamacpp_argv(tmp_path / "pfx", "89", extra=["--dry-run"])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert "-DCMAKE_CUDA_ARCHITECTURES=89" in done.stdout and str(tmp_path / "pfx") in done.stdout


@pytest.mark.parametrize("archs", ["abc", "89;", "", "sm_89"])
def test_bad_archs_are_refused(tmp_path, archs):
    with pytest.raises(EngineError, match="--archs"):
        gpu_setup.build_llamacpp_argv(tmp_path, archs)


@pytest.mark.parametrize("present, nvcc_text, message", [
    ((), NVCC_12, "needs cmake, make, c[+][+], not found on PATH; install .*apt-get install -y cmake build-essential"),
    (("cmake", "make"), NVCC_12, "needs c[+][+], not found"),
    (("cmake", "make", "c++"), NVCC_12, "nvcc not found"),
    (("cmake", "make", "c++", "nvcc"), NVCC_13, "CUDA 13.0"),
    (("cmake", "make", "c++", "nvcc"), "nvcc: command output without a version", "cannot read the CUDA version"),
])
def test_build_refuses_without_prerequisites(tmp_path, present, nvcc_text, message):
    execute = Recorder()
    with pytest.raises(EngineError, match=message) as caught:
        gpu_setup.build_llamacpp(tmp_path, which=tools(*present), output=lambda argv: nvcc_text, execute=execute,
                                 say=lambda line: None)
    assert execute.calls == []  # nothing was built
    assert "\n" not in caught.value.line()


def test_build_runs_the_script_when_prerequisites_are_there(tmp_path):
    execute, said = Recorder(), []
    binary = gpu_setup.build_llamacpp(tmp_path / "pfx", "89", which=tools("cmake", "make", "c++", "nvcc"),
                                      output=lambda argv: NVCC_12, execute=execute, say=said.append)
    assert execute.calls == [gpu_setup.build_llamacpp_argv(tmp_path / "pfx", "89")]
    assert binary == tmp_path / "pfx" / "bin" / "llama-server"
    assert "CUDA 12.6" in said[0]


def test_build_failure_is_an_error(tmp_path):
    with pytest.raises(EngineError, match="exit 2"):
        gpu_setup.build_llamacpp(tmp_path, which=tools("cmake", "make", "c++", "nvcc"), output=lambda argv: NVCC_12,
                                 execute=Recorder(code=2), say=lambda line: None)


def test_default_prefix_is_in_the_kit_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    assert gpu_setup.default_llamacpp_prefix() == tmp_path / "engines" / "llamacpp-7e4c0a9-cuda"


def test_vllm_commands_make_a_venv_and_pin_vllm(tmp_path):
    commands = gpu_setup.vllm_install_commands(tmp_path / "venv", python="/usr/bin/python3")
    assert commands[0] == ["/usr/bin/python3", "-m", "venv", str(tmp_path / "venv")]
    assert commands[-1] == [str(tmp_path / "venv" / "bin" / "python"), "-m", "pip", "install", "vllm==0.11.0"]


def test_vllm_install_refuses_without_a_gpu(tmp_path):
    execute = Recorder()

    def no_smi(argv):
        raise FileNotFoundError("nvidia-smi")

    with pytest.raises(EngineError, match="no NVIDIA GPU") as caught:
        gpu_setup.install_vllm(tmp_path / "venv", output=no_smi, execute=execute, say=lambda line: None)
    assert "--force" in caught.value.fix and execute.calls == []
    with pytest.raises(EngineError, match="no NVIDIA GPU"):
        gpu_setup.install_vllm(tmp_path / "venv", output=lambda argv: "No devices were found\n", execute=execute,
                               say=lambda line: None)


def test_vllm_install_runs_with_a_gpu_or_force(tmp_path):
    with_gpu, forced = Recorder(), Recorder()
    path = gpu_setup.install_vllm(tmp_path / "v", output=lambda argv: SMI_L, execute=with_gpu, say=lambda line: None)
    gpu_setup.install_vllm(tmp_path / "v", force=True, output=lambda argv: "", execute=forced, say=lambda line: None)
    assert with_gpu.calls == forced.calls == gpu_setup.vllm_install_commands(tmp_path / "v")
    assert path == tmp_path / "v" / "bin" / "vllm"


def test_cli_refuses_vllm_without_gpu_in_one_line(tmp_path):
    """On this machine (no nvidia-smi) the CLI refuses and installs nothing."""
    if gpu_setup.gpu_visible():
        pytest.skip("a GPU is visible here")
    done = subprocess.run([sys.executable, "-m", "kit.cli", "engines", "install", "vllm", "--venv",
                           str(tmp_path / "v")], capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert done.stderr.strip().startswith("kit: error: no NVIDIA GPU") and len(done.stderr.strip().splitlines()) == 1
    assert not Path(tmp_path / "v").exists()
