"""llama-server of any llama.cpp build N, built here from that build's sdist (kit.launch.llamacpp.llamacpp_sdist) for
the CPU: `kit engines build llamacpp --build N`, used by `--engine-build N`.

Only the server target is built, statically linked (one self-contained binary), for one backend:
`portable`, the same AVX2 ISA flags as the embedded engine's portable backend, so a newer build compares
with the paper's on the same machine code; or `cuda` where `nvcc` is on PATH (the same CPU flags, plus
GGML_CUDA for the architectures `--archs` names, else those of the GPUs `nvidia-smi` lists, else
DEFAULT_CUDA_ARCHS; BUILD.json records them, where they came from and `nvcc --version`). The backend is
part of the cache key. Each
(build, backend) has its own folder in the cache, `engines/llama-server-b<N>-<backend>/`, holding the
binary and BUILD.json (the sdist's name and sha256, the cmake command, the binary's sha256 and the
extensions its machine code uses); the build log lies beside it and the source and build trees in a
`.work` folder (the sources at `src/`, the same place in every build), so an interrupted build resumes where
it stopped. Where ccache is on PATH it is the compiler launcher (compiler_cache), so a bisect's builds
compile each translation unit that did not change between them once.
"""

from __future__ import annotations

import fcntl
import functools
import json
import os
import shutil
import subprocess
import tarfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from kit import __version__
from kit.core.atomic_file import write_json_atomic
from kit.core.errors import ConfigError, EngineError
from kit.core.paths import cache_dir
from kit.launch import build_tools, gpu_setup
from kit.launch.cpu import cpu_isa
from kit.launch.llamacpp import llamacpp_sdist
from kit.launch.cpu.portable_backend import ISA_FLAGS, run_step
from kit.models.hashing import sha256_file
from kit.models.progress import said

BACKENDS = ("portable", "cuda")  # --cpu-backend of `kit engines build llamacpp --build N` (auto: portable)
BINARY = "llama-server"
BUILD_RECORD = "BUILD.json"
COMMON_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_OPENMP=ON",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_WEBUI=OFF",  # the kit never serves the web UI, and some builds' sdists carry no tools/server/public
)
BACKEND_FLAGS = {"portable": ("-DGGML_NATIVE=OFF", *ISA_FLAGS), "cuda": ("-DGGML_NATIVE=OFF", *ISA_FLAGS, "-DGGML_CUDA=ON")}
DEFAULT_CUDA_ARCHS = "89"  # sm_89 (Ada: L4, RTX 40xx), as the pinned CUDA build's --archs, where nvidia-smi names none


def check_backend(backend: str) -> str:
    """A CPU backend a llama.cpp release is built for here (`auto`: portable, the same machine code as the paper's
    build runs with on a CPU the wheel cannot serve); wheel is refused: a build from source has no wheel."""
    if backend == "auto":
        return BACKENDS[0]
    if backend not in BACKENDS:
        raise ConfigError(f"--cpu-backend {backend} cannot build a llama.cpp release: a build from source has the "
                          f"{' or '.join(BACKENDS)} backend only (wheel names the embedded engine's own)",
                          f"use --cpu-backend {' or '.join(BACKENDS)} or auto with --engine-build")
    return backend


def key(build: int, backend: str) -> str:
    """The cache name of one build on one CPU backend."""
    return f"{BINARY}-b{llamacpp_sdist.check_build(build)}-{check_backend(backend)}"


def install_dir(build: int, backend: str) -> Path:
    return cache_dir() / "engines" / key(build, backend)


def build_records() -> list[Path]:
    """The BUILD.json of every build made here, each build and CPU backend (the install_dir of each key)."""
    return sorted((cache_dir() / "engines").glob(f"{BINARY}-b*-*/{BUILD_RECORD}"))


def builds_here(backend: str) -> list[int]:
    """The build numbers of the finished builds made here for one CPU backend (from their BUILD.json), oldest
    first; an unreadable record names no build (`record` says what is wrong with it when it is used)."""
    found = set()
    for path in build_records():
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        number = data.get("build") if isinstance(data, dict) else None
        if (isinstance(number, int) and not isinstance(number, bool) and data.get("cpu_backend") == backend
                and path.parent.name == f"{BINARY}-b{number}-{backend}"):
            found.add(number)
    return sorted(found)


def cmake_configure(source: Path, tree: Path, backend: str, cuda_archs: str | None = None,
                    launcher: str | None = None) -> list[str]:
    archs = [f"-DCMAKE_CUDA_ARCHITECTURES={cuda_archs}"] if check_backend(backend) == "cuda" and cuda_archs else []
    cached = [f"-DCMAKE_{lang}_COMPILER_LAUNCHER={launcher}" for lang in ("C", "CXX")] if launcher else []
    return ["cmake", "-S", str(source), "-B", str(tree), *COMMON_FLAGS, *BACKEND_FLAGS[backend], *archs, *cached]


def compiler_cache() -> dict[str, Any]:
    """ccache where it is on PATH (and KIT_CCACHE is not 0): every build's sources lie at the same place
    relative to its own work folder (CCACHE_BASEDIR), so a translation unit unchanged between two builds is
    compiled once. Only the compiler's own output for the identical preprocessed input comes back, so the
    machine code is the same; a bisect's later, closer steps rebuild little. BUILD.json records it."""
    found = shutil.which("ccache")
    if found is None or os.environ.get("KIT_CCACHE") == "0":
        return {}
    try:
        version = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=30,
                                 check=False).stdout.splitlines()[:1]
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"compiler_cache": {"path": found, "version": version[0] if version else "unknown"}}


def cuda_toolchain(archs: str | None = None) -> dict[str, Any]:
    """What a `cuda` build is made with, as BUILD.json records it: nvcc (its path, release and `--version`
    text) and the CUDA architectures (`archs` given, else the GPUs nvidia-smi lists, else the default).
    Refused in one line where nvcc is not on PATH, before anything is fetched."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise ConfigError("--cpu-backend cuda needs nvcc (the CUDA toolkit) on PATH, and this machine has none",
                          "install the CUDA toolkit and put its bin/ on PATH, or build --cpu-backend portable")
    if archs is not None and not gpu_setup.ARCHS.match(archs):
        raise ConfigError(f"--archs must be CUDA architectures such as 89 or '86;90', got {archs!r}",
                          "pass e.g. --archs 89 (sm_89) or --archs '80;90', or leave it out")
    release, text = gpu_setup.nvcc_release()
    found = [] if archs is not None else gpu_setup.gpu_archs()
    chosen, source = ((archs, "--archs") if archs is not None else (";".join(found), "nvidia-smi compute_cap")
                      if found else (DEFAULT_CUDA_ARCHS, "default (nvidia-smi named no GPU)"))
    return {"nvcc": {"path": nvcc, "release": release, "version": text.strip()}, "cuda_archs": chosen,
            "cuda_archs_from": source}


def cmake_build(tree: Path, jobs: int) -> list[str]:
    return ["cmake", "--build", str(tree), "--target", BINARY, "-j", str(jobs)]


def built(build: int, backend: str) -> Path | None:
    """The binary of a finished build, if there is one."""
    binary = install_dir(build, backend) / BINARY
    return binary if binary.is_file() and (binary.parent / BUILD_RECORD).is_file() else None


@functools.lru_cache(maxsize=16)
def _digest(path: Path, size: int, mtime_ns: int, inode: int) -> str:
    return sha256_file(path)


def binary_sha256(binary: Path) -> str:
    """The binary's sha256, hashed once per process while the file stays the same file (size, mtime, inode):
    a run's resume check, build check and probe all read one digest."""
    found = binary.stat()
    return _digest(binary, found.st_size, found.st_mtime_ns, found.st_ino)


def record(build: int, backend: str) -> dict[str, Any]:
    """BUILD.json of a finished build, its binary checked against the sha256 it records; else refused."""
    binary = built(build, backend)
    if binary is None:
        raise EngineError(f"llama.cpp build {build} ({backend} CPU backend) is not built here",
                          f"build it first: kit engines build llamacpp --build {build}")
    try:
        data = json.loads((binary.parent / BUILD_RECORD).read_text())
    except (OSError, ValueError) as exc:
        raise EngineError(f"{binary.parent / BUILD_RECORD} is unreadable ({exc})",
                          f"delete {binary.parent} and build it again") from exc
    if not isinstance(data, dict) or data.get("binary_sha256") != binary_sha256(binary):
        raise EngineError(f"{binary} differs from the binary its BUILD.json records",
                          f"delete {binary.parent} and build it again")
    return data


def build(build: int, backend: str = "portable", say: Callable[[str], None] = print, jobs: int | None = None,
          fetch: Callable[..., llamacpp_sdist.Sdist] = llamacpp_sdist.fetch, archs: str | None = None) -> Path:
    """Build llama-server of llama.cpp build N for one backend once; return the binary. Idempotent;
    resumes an interrupted build. Needs cmake, make and a C++ compiler (minutes to a quarter hour), and for
    `cuda` nvcc (`archs`: its CUDA architectures; see cuda_toolchain)."""
    backend = check_backend(backend)
    done = built(build, backend)
    if done:
        record(build, backend)
        return done
    target = install_dir(build, backend)  # checks build and backend before anything is fetched
    cuda = cuda_toolchain(archs) if backend == "cuda" else {}
    build_tools.require(f"building llama.cpp build {build}")
    with _alone(target, say):
        done = built(build, backend)  # made by the process this one waited for
        if done:
            record(build, backend)
            return done
        return _make(build, backend, target, cuda, say, jobs, fetch)


@contextmanager
def _alone(target: Path, say: Callable[[str], None]) -> Iterator[None]:
    """One build of a (build, backend) at a time: two cmake runs in one `.work` tree would spoil it (a bisect
    and a hand-made `kit engines build` of the same build). A second process waits, saying so."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.with_name(target.name + ".lock").open("a") as held:
        try:
            fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"another process is building {target.name}; waiting for it to finish ...")
            fcntl.flock(held, fcntl.LOCK_EX)
        yield


def _make(build: int, backend: str, target: Path, cuda: dict[str, Any], say: Callable[[str], None],
          jobs: int | None, fetch: Callable[..., llamacpp_sdist.Sdist]) -> Path:
    sdist = fetch(build, say=say)
    work = target.with_name(target.name + ".work")
    log = target.with_name(target.name + ".log")
    work.mkdir(parents=True, exist_ok=True)
    source = work / "src" / "llama.cpp"  # the same relative place in every build's work folder (compiler_cache)
    if not (source / "CMakeLists.txt").is_file():
        say(f"unpacking {sdist.filename} ...")
        shutil.rmtree(work / "src", ignore_errors=True)
        with tarfile.open(sdist.path) as tar:
            tar.extractall(work / "unpacked", filter="data")
        unpacked = work / "unpacked" / sdist.filename.removesuffix(".tar.gz")
        if unpacked.is_dir():
            unpacked.rename(work / "src")
        shutil.rmtree(work / "unpacked", ignore_errors=True)
    if not (source / "CMakeLists.txt").is_file():
        raise EngineError(f"{sdist.filename} has no llama.cpp/CMakeLists.txt",
                          "this sdist does not carry the llama.cpp sources; pick another build")
    tree = work / "tree"
    jobs = jobs or os.cpu_count() or 2
    cache = compiler_cache()
    configure = cmake_configure(source, tree, backend, cuda.get("cuda_archs"),
                                cache["compiler_cache"]["path"] if cache else None)
    env = {**os.environ, "CCACHE_BASEDIR": str(work), "CCACHE_NOHASHDIR": "true"} if cache else None
    say(f"building llama-server of llama.cpp build {build} ({backend} CPU backend, {jobs} jobs"
        f"{', ccache' if cache else ''}; log: {log}) ...")
    started = time.monotonic()
    what = f"llama-server of llama.cpp build {build}"
    run_step(configure, log, "cmake configure", label=what, env=env)
    run_step(cmake_build(tree, jobs), log, "cmake build", said(say), what, env=env)
    binary = tree / "bin" / BINARY
    if not binary.is_file():
        raise EngineError(f"the build made no {binary}", f"see the build log {log}")
    staging = target.with_name(target.name + ".tmp")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    shutil.copy2(binary, staging / BINARY)
    write_json_atomic(staging / BUILD_RECORD, {
        **sdist.identity(), "cpu_backend": backend, "cmake_configure": configure[5:],
        "binary": BINARY, "binary_sha256": sha256_file(staging / BINARY),
        "instructions": cpu_isa.scan(staging / BINARY), "build_seconds": round(time.monotonic() - started),
        "jobs": jobs, "kit_version": __version__, **cuda, **cache})
    shutil.rmtree(target, ignore_errors=True)
    staging.rename(target)
    say(f"built {target / BINARY}")
    return target / BINARY
