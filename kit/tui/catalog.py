"""The protocol catalog the launcher shows: every protocols/*.yaml, what it measures and needs, and
whether this machine can run it (from the same checks as `kit doctor`). No Textual here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kit.errors import KitError
from kit.paths import protocols_dir

EMBEDDED = "embedded CPU engine"

# What each kind measures and needs, in two short lines (the protocol's own description follows).
KIND_NOTES: dict[str, dict[str, Any]] = {
    "reset": {"measures": "restored-state control: does recompute / cache hit reproduce, do the paths differ",
              "needs": "any llama.cpp engine; the embedded CPU engine works", "ways": None},
    "grid": {"measures": "BFCL agent episodes, cache on/off x repeats: run-to-run and path divergence",
             "needs": "any llama.cpp engine + BFCL (fetched once); long prompts, slow on a CPU", "ways": None},
    "sweep": {"measures": "path divergence across weight formats x episode histories, a fresh server per pass",
              "needs": "any llama.cpp engine the kit starts (not --engine-url) + BFCL; long prompts, slow on a CPU",
              "ways": None},
    "flag_order": {"measures": "Table III: run-to-run cache-on divergence, server-level prompt cache (default / "
                               "off) x pass order (adjacent / cache-off pass between), a fresh server per arm",
                   "needs": "any llama.cpp engine the kit starts (not --engine-url) + BFCL; long prompts, slow on "
                            "a CPU", "ways": None},
    "sentinel": {"measures": "sentinel prompts that detect hidden cache state", "needs": "any engine", "ways": None},
    "dequant": {"measures": "divergence across weight formats of one model", "needs": "models in several formats",
                "ways": None},
    "pinning": {"measures": "state pinning: the three-state check (cold / hit / checkpoint)",
                "needs": "an engine that reports cache state", "ways": None},
}


@dataclass(frozen=True)
class Capabilities:
    """What this machine can run: the doctor's open ways, plus whether the embedded engine is installed."""

    ways: tuple[str, ...]
    checked: bool = True  # False while the doctor is still looking

    @property
    def embedded(self) -> bool:
        return EMBEDDED in self.ways

    @property
    def gpu(self) -> bool:
        return any("GPU" in way or "CUDA" in way or "vLLM" in way for way in self.ways)


def machine_capabilities() -> Capabilities:
    """The doctor's checks without starting an engine (a few seconds: Docker ping, nvidia-smi)."""
    from kit import doctor
    from kit.launch import embedded

    ways = [w for w in doctor.runnable(doctor.run_checks(doctor.default_probes(), start_engine=False))
            if w != EMBEDDED]
    if embedded.available():
        ways.insert(0, EMBEDDED)
    return Capabilities(tuple(ways))


@dataclass(frozen=True)
class Entry:
    """One protocol file as the picker shows it."""

    name: str
    path: Path
    kind: str
    description: str
    measures: str
    needs: str
    estimate: str
    runnable: bool
    why_not: str | None  # shown when it cannot be started here

    def explanation(self) -> str:
        return f"{self.measures}.\nNeeds {self.needs}; {self.estimate}."


def estimate(kind: str, data: dict[str, Any]) -> str:
    """A rough duration on the embedded CPU engine (two cores): the order of magnitude, not a promise."""
    if kind == "reset":
        items = (data.get("workload") or {}).get("items", 100)
        sessions = data.get("sessions", 3)
        phases = len(data.get("phases") or ()) or 4
        tokens = data.get("max_tokens", 1024)
        seconds = sessions * (5 + items * phases * (0.3 + tokens / 60))
        return f"{sessions * items * phases} requests, about {_duration(seconds)} on a CPU"
    if kind == "grid":
        episodes = bfcl_episodes(data)
        passes = len(data.get("passes") or ()) or 4
        return f"{episodes} episodes x {passes} passes, about {_duration(episodes * passes * 120)} on a CPU"
    if kind == "sweep":
        formats = len(data.get("formats") or {}) or 1
        histories = data.get("histories", 11)
        references = len(data.get("reference_orders") or (0, 1))
        passes = formats * (histories + references) + (formats if data.get("replicate") else 0)
        episodes = bfcl_episodes(data)
        return (f"{episodes} episodes x {passes} passes (a fresh server each), about "
                f"{_duration(episodes * passes * 120 + passes * 5)} on a CPU")
    if kind == "flag_order":
        arms = data.get("arms") or [{"passes": p} for p in (("on", "on"), ("on", "off", "on")) * 2]
        passes = sum(len(arm.get("passes") or ()) for arm in arms)
        episodes = bfcl_episodes(data)
        return (f"{episodes} episodes x {passes} passes in {len(arms)} arms (a fresh server each), about "
                f"{_duration(episodes * passes * 120 + len(arms) * 5)} on a CPU")
    return "duration unknown"


def bfcl_episodes(data: dict[str, Any]) -> int:
    """BFCL episodes a protocol file asks for: its explicit ids (at most `episodes` of them), else `episodes`."""
    workload = data.get("workload") or {}
    ids = workload.get("ids")
    return min(len(ids), workload.get("episodes", len(ids))) if ids else workload.get("episodes", 80)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds / 10) * 10):.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.0f} h"


def entry(path: Path, procedures: Sequence[str], caps: Capabilities) -> Entry:
    """Describe one protocol file; a file the kit cannot read or run is still listed, with the reason."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        return Entry(path.stem, path, "?", "", "unreadable protocol file", "a valid YAML file", "—", False,
                     f"cannot read it: {str(exc).splitlines()[0]}")
    if not isinstance(data, dict):
        data = {}
    kind = str(data.get("protocol", "?"))
    notes = KIND_NOTES.get(kind, {"measures": f"a {kind} protocol", "needs": "see the file", "ways": None})
    description = " ".join(str(data.get("description", "")).split())
    why_not = None
    if kind not in procedures:
        why_not = f"not available yet: this kit cannot run '{kind}' protocols"
    elif not caps.checked:
        why_not = "checking this machine…"
    elif notes["ways"] and not any(need in " ".join(caps.ways) for need in notes["ways"]):
        why_not = f"needs {notes['needs']}, which `kit doctor` does not find here"
    cost = estimate(kind, data)
    if why_not is None and not caps.ways:
        cost += "; no local engine here (see `kit doctor`): give your own endpoint URL"
    return Entry(path.stem, path, kind, description, notes["measures"], notes["needs"], cost,
                 why_not is None, why_not)


def catalog(caps: Capabilities, folder: Path | None = None, procedures: Sequence[str] | None = None) -> list[Entry]:
    """Every protocol file in protocols/, runnable ones first, each group in name order."""
    if procedures is None:
        from kit.protocols import kinds

        procedures = list(kinds.KINDS)
    entries = [entry(path, procedures, caps) for path in sorted((folder or protocols_dir()).glob("*.yaml"))]
    return sorted(entries, key=lambda e: (not e.runnable, e.name))


def validate(name: str) -> str | None:
    """Does this protocol load and validate? None, or the one-line error."""
    from kit.protocols import kinds

    try:
        kinds.load(name)
    except KitError as exc:
        return exc.line()
    return None
