"""The protocol catalog the launcher shows: every protocols/*.yaml, what it measures and needs, and
whether this machine can run it (from the same checks as `kit doctor`). No Textual here."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from kit.errors import KitError
from kit.paths import protocols_dir

if TYPE_CHECKING:
    from kit.protocols.kind import Kind

EMBEDDED = "embedded CPU engine"


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


def entry(path: Path, known: Mapping[str, Kind], caps: Capabilities) -> Entry:
    """Describe one protocol file from its kind's launcher entry (`known`: the registry,
    kit.protocols.kinds.KINDS); a file the kit cannot read or run is still listed, with the reason."""
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        return Entry(path.stem, path, "?", "", "unreadable protocol file", "a valid YAML file", "—", False,
                     f"cannot read it: {str(exc).splitlines()[0]}")
    if not isinstance(data, dict):
        data = {}
    kind = str(data.get("protocol", "?"))
    launcher = known[kind].launcher if kind in known else None
    measures, needs = (launcher.measures, launcher.needs) if launcher else (f"a {kind} protocol", "see the file")
    description = " ".join(str(data.get("description", "")).split())
    why_not = None
    if launcher is None:
        why_not = f"not available yet: this kit cannot run '{kind}' protocols"
    elif not caps.checked:
        why_not = "checking this machine…"
    elif launcher.doctor_ways and not any(need in " ".join(caps.ways) for need in launcher.doctor_ways):
        why_not = f"needs {needs}, which `kit doctor` does not find here"
    cost = launcher.estimate(data) if launcher and launcher.estimate else "duration unknown"
    if why_not is None and not caps.ways:
        cost += "; no local engine here (see `kit doctor`): give your own endpoint URL"
    return Entry(path.stem, path, kind, description, measures, needs, cost, why_not is None, why_not)


def catalog(caps: Capabilities, folder: Path | None = None, known: Mapping[str, Kind] | None = None) -> list[Entry]:
    """Every protocol file in protocols/, runnable ones first, each group in name order."""
    if known is None:
        from kit.protocols.kinds import KINDS

        known = KINDS
    entries = [entry(path, known, caps) for path in sorted((folder or protocols_dir()).glob("*.yaml"))]
    return sorted(entries, key=lambda e: (not e.runnable, e.name))


def validate(name: str) -> str | None:
    """Does this protocol load and validate? None, or the one-line error."""
    from kit.protocols import kinds

    try:
        kinds.load(name)
    except KitError as exc:
        return exc.line()
    return None
