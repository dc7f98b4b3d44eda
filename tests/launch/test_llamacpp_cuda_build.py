"""The CUDA variant of `kit engines build llamacpp --build N --cpu-backend cuda` (issue #39): refused in one line
where nvcc is not on PATH, before anything is fetched; where it is, the cmake configure command and the
BUILD.json it writes (GGML_CUDA, the architectures from --archs, nvidia-smi or the default, nvcc's version).
No CUDA build runs here: nvcc and nvidia-smi are scripts printing recorded real output, the sdist a minimal
tree, and cmake's two steps are recorded, not run (the build step leaves a real ELF program as its binary)."""

from __future__ import annotations

import io
import json
import shutil
import sys
import tarfile
from pathlib import Path

import pytest

from kit.core.errors import ConfigError
from kit.launch.llamacpp import llamacpp_build, llamacpp_sdist
from tests.bundle.kit_cli import run_here
from tests.test_cli_errors import one_line_error

# `nvcc --version` of the CUDA 13.0 toolkit, recorded on the machine these tests were written on
NVCC_VERSION = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""
COMPUTE_CAP = "9.0\n8.9\n9.0\n"  # `nvidia-smi --query-gpu=compute_cap --format=csv,noheader` of three GPUs


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _tool(folder: Path, name: str, output: str) -> None:
    (folder / name).write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}EOF\n")
    (folder / name).chmod(0o755)


@pytest.fixture
def fake_path(tmp_path, monkeypatch):
    """A folder first on PATH; `tools(nvcc=..., nvidia_smi=...)` puts scripts there printing those."""
    folder = tmp_path / "fakebin"
    folder.mkdir()
    monkeypatch.setenv("PATH", f"{folder}:{Path(shutil.which('cmake') or '/usr/bin/cmake').parent}:/usr/bin:/bin")

    def tools(**outputs: str) -> Path:
        for name, output in outputs.items():
            _tool(folder, name.replace("_", "-"), output)
        return folder
    return tools


def _fetch(tmp_path: Path, fetched: list[int]):
    def fetch(build: int, say=None, **_kw) -> llamacpp_sdist.Sdist:
        fetched.append(build)
        name = llamacpp_sdist.filename(build)
        archive = tmp_path / name
        with tarfile.open(archive, "w:gz") as tar:
            data = b"cmake_minimum_required(VERSION 3.14)\n"
            info = tarfile.TarInfo(f"{name.removesuffix('.tar.gz')}/llama.cpp/CMakeLists.txt")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        return llamacpp_sdist.Sdist(build, name, "ab" * 32, archive)
    return fetch


def _recorded_steps(monkeypatch, envs: list[dict[str, str] | None] | None = None) -> list[list[str]]:
    steps: list[list[str]] = []

    def run_step(cmd, log, what, progress=None, label="", env=None):
        steps.append(cmd)
        if envs is not None:
            envs.append(env)
        if cmd[1] == "--build":  # what the build step leaves: a real ELF program as the server binary
            (Path(cmd[2]) / "bin").mkdir(parents=True, exist_ok=True)
            shutil.copy2(Path(sys.executable).resolve(), Path(cmd[2]) / "bin" / llamacpp_build.BINARY)

    monkeypatch.setattr(llamacpp_build, "run_step", run_step)
    return steps


def test_without_nvcc_the_cuda_build_is_refused_before_anything_is_fetched(cache, tmp_path, fake_path):
    fake_path()  # no nvcc on PATH
    assert shutil.which("nvcc") is None
    fetched: list[int] = []
    with pytest.raises(ConfigError) as refused:
        llamacpp_build.build(11434, "cuda", say=lambda _l: None, fetch=_fetch(tmp_path, fetched))
    assert refused.value.line() == ("--cpu-backend cuda needs nvcc (the CUDA toolkit) on PATH, and this machine has "
                                    "none; install the CUDA toolkit and put its bin/ on PATH, or build --cpu-backend "
                                    "portable")
    assert fetched == [] and not (cache / "engines").exists()


def test_the_cli_refuses_in_one_line(cache, fake_path):
    fake_path()
    one_line_error(run_here("engines", "build", "llamacpp", "--build", "11434", "--cpu-backend", "cuda"),
                   "--cpu-backend cuda needs nvcc")
    one_line_error(run_here("engines", "build", "llamacpp", "--build", "11434", "--archs", "90"),
                   "--archs applies to a CUDA build")
    assert not (cache / "engines").exists()


@pytest.mark.parametrize("archs, smi, chosen, source", [
    (None, COMPUTE_CAP, "90;89", "nvidia-smi compute_cap"),
    (None, None, llamacpp_build.DEFAULT_CUDA_ARCHS, "default (nvidia-smi named no GPU)"),
    (None, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n",
     llamacpp_build.DEFAULT_CUDA_ARCHS, "default (nvidia-smi named no GPU)"),
    ("80;86", COMPUTE_CAP, "80;86", "--archs"),
])
def test_the_cuda_configure_command_and_record(cache, tmp_path, fake_path, monkeypatch, archs, smi, chosen, source):
    bin_dir = fake_path(nvcc=NVCC_VERSION, **({"nvidia_smi": smi} if smi is not None else {}))
    monkeypatch.setenv("KIT_CCACHE", "0")  # whether ccache is installed here or not (test_ccache_... below)
    steps = _recorded_steps(monkeypatch)
    binary = llamacpp_build.build(11434, "cuda", say=lambda _l: None, fetch=_fetch(tmp_path, []), jobs=2, archs=archs)
    assert binary == cache / "engines" / "llama-server-b11434-cuda" / "llama-server"
    configure, build = steps
    assert configure[:3] == ["cmake", "-S", str(cache / "engines" / "llama-server-b11434-cuda.work" / "src" /
                                                 "llama.cpp")]
    for flag in ("-DGGML_CUDA=ON", f"-DCMAKE_CUDA_ARCHITECTURES={chosen}", "-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON",
                 "-DBUILD_SHARED_LIBS=OFF"):
        assert flag in configure
    assert build[-3:] == ["llama-server", "-j", "2"]
    record = json.loads((binary.parent / llamacpp_build.BUILD_RECORD).read_text())
    assert record["cpu_backend"] == "cuda" and record["cmake_configure"] == configure[5:]
    assert record["cuda_archs"] == chosen and record["cuda_archs_from"] == source
    assert record["nvcc"] == {"path": str(bin_dir / "nvcc"), "release": "13.0", "version": NVCC_VERSION.strip()}
    assert llamacpp_build.record(11434, "cuda")["binary_sha256"] == record["binary_sha256"]
    assert llamacpp_build.builds_here("cuda") == [11434] and llamacpp_build.builds_here("portable") == []


def test_the_portable_build_is_unchanged_and_bad_archs_are_refused(cache, tmp_path, fake_path):
    fake_path(nvcc=NVCC_VERSION)
    configure = llamacpp_build.cmake_configure(Path("/src"), Path("/tree"), "portable", "90")
    assert not [flag for flag in configure if "CUDA" in flag]
    with pytest.raises(ConfigError, match="--archs must be CUDA architectures"):
        llamacpp_build.build(11434, "cuda", say=lambda _l: None, fetch=_fetch(tmp_path, []), archs="sm_90; rm")

