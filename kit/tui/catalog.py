"""The protocol catalog the launcher shows: every protocols/*.yaml, what it measures and needs, and
whether this machine can run it. A protocol is ready only where an engine way it can use is open in
`kit doctor`'s checks, the embedded engine only once proven by a real completion. No Textual here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kit import doctor
from kit.doctor import DOCKER_WAY, EMBEDDED_WAY, NATIVE_LLAMACPP_WAY, NATIVE_VLLM_WAY, Check
from kit.errors import KitError
from kit.paths import protocols_dir

EMBEDDED = EMBEDDED_WAY
ENDPOINT = "your own endpoint URL"  # not a doctor way: always there, never proven here
STARTED_LLAMACPP = (EMBEDDED, NATIVE_LLAMACPP_WAY, DOCKER_WAY)  # llama.cpp engines the kit starts itself
ANY_LLAMACPP = (*STARTED_LLAMACPP, ENDPOINT)
NOT_PROVEN = f"the {EMBEDDED} is not proven on this machine: run `kit doctor`"

# What each kind measures and needs, in two short lines (the protocol's own description follows), and
# the engine ways it can use.
KIND_NOTES: dict[str, dict[str, Any]] = {
    "reset": {"measures": "restored-state control: does recompute / cache hit reproduce, do the paths differ",
              "needs": "any llama.cpp engine; the embedded CPU engine works", "ways": ANY_LLAMACPP},
    "grid": {"measures": "BFCL agent episodes, cache on/off x repeats: run-to-run and path divergence",
             "needs": "any llama.cpp engine + BFCL (fetched once); long prompts, slow on a CPU", "ways": ANY_LLAMACPP},
    "sweep": {"measures": "path divergence across weight formats x episode histories, a fresh server per pass",
              "needs": "any llama.cpp engine the kit starts (not --engine-url) + BFCL; long prompts, slow on a CPU",
              "ways": STARTED_LLAMACPP},
    "flag_order": {"measures": "Table III: run-to-run cache-on divergence, server-level prompt cache (default / "
                               "off) x pass order (adjacent / cache-off pass between), a fresh server per arm",
                   "needs": "any llama.cpp engine the kit starts (not --engine-url) + BFCL; long prompts, slow on "
                            "a CPU", "ways": STARTED_LLAMACPP},
    "sentinel": {"measures": "sentinel prompts that detect hidden cache state", "needs": "any engine",
                 "ways": (*ANY_LLAMACPP, NATIVE_VLLM_WAY)},
    "dequant": {"measures": "divergence across weight formats of one model", "needs": "models in several formats",
                "ways": STARTED_LLAMACPP},
    "pinning": {"measures": "state pinning: the three-state check (cold / hit / checkpoint)",
                "needs": "an engine that reports cache state", "ways": ANY_LLAMACPP},
}


def kind_ways(kind: str) -> tuple[str, ...]:
    """The engine ways a kind can use (an unknown kind: any llama.cpp engine)."""
    return KIND_NOTES.get(kind, {}).get("ways") or ANY_LLAMACPP


@dataclass(frozen=True)
class Capabilities:
    """What this machine can run: the engine ways proven or found by `kit doctor`, and for a way it cannot
    use (yet), the one line saying why (not proven, its proof failed, not installed)."""

    ways: tuple[str, ...]
    checked: bool = True  # False while the doctor is still looking
    why_not: Mapping[str, str] = field(default_factory=dict, hash=False)

    @property
    def embedded(self) -> bool:
        return EMBEDDED in self.ways

    @property
    def gpu(self) -> bool:
        return any(way in self.ways for way in (DOCKER_WAY, NATIVE_LLAMACPP_WAY, NATIVE_VLLM_WAY))


def capabilities(checks: Sequence[Check]) -> Capabilities:
    """The doctor's checks as the launcher uses them: an embedded engine counts only once proven."""
    waiting = doctor.unproven_ways(checks)
    ways = tuple(way for way in doctor.runnable(checks) if way not in waiting)
    why_not = {}
    if EMBEDDED not in ways:
        engine = next(c for c in checks if c.name == "embedded engine")
        why_not[EMBEDDED] = NOT_PROVEN if doctor.unproven(engine) else engine.sentence()
    return Capabilities(ways, why_not=why_not)


def machine_capabilities() -> Capabilities:
    """The doctor's checks with the embedded engine proven: its kept proof, else one short completion now
    (kept for next time). Well under a second with a kept proof, a few seconds without."""
    return capabilities(doctor.run_checks(doctor.default_probes(), start_engine=True))


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
    runnable: bool  # can be started here (ready, or with the user's own endpoint URL only)
    why_not: str | None  # shown when it is not ready here
    ready: bool = False  # an engine way it can use is proven here

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
    runnable, ready, why_not = readiness(kind, procedures, caps)
    return Entry(path.stem, path, kind, description, notes["measures"], notes["needs"], estimate(kind, data),
                 runnable, why_not, ready)


def readiness(kind: str, procedures: Sequence[str], caps: Capabilities) -> tuple[bool, bool, str | None]:
    """(can start, ready, why not ready) for a kind on this machine: ready where an engine way it can use is
    open; startable without one only where the user's own endpoint URL will do."""
    if kind not in procedures:
        return False, False, f"not available yet: this kit cannot run '{kind}' protocols"
    if not caps.checked:
        return False, False, "checking this machine…"
    ways = kind_ways(kind)
    if any(way in caps.ways for way in ways):
        return True, True, None
    reason = next((caps.why_not[way] for way in ways if way in caps.why_not),
                  f"needs {KIND_NOTES.get(kind, {}).get('needs', 'an engine')}, which `kit doctor` does not find here")
    return ENDPOINT in ways, False, reason  # with no proven engine, an endpoint URL can still be given


def catalog(caps: Capabilities, folder: Path | None = None, procedures: Sequence[str] | None = None) -> list[Entry]:
    """Every protocol file in protocols/, runnable ones first, each group in name order."""
    if procedures is None:
        from kit.protocols import kinds

        procedures = list(kinds.PROCEDURES)
    entries = [entry(path, procedures, caps) for path in sorted((folder or protocols_dir()).glob("*.yaml"))]
    return sorted(entries, key=lambda e: (not e.ready, not e.runnable, e.name))


def validate(name: str) -> str | None:
    """Does this protocol load and validate? None, or the one-line error."""
    from kit.protocols import kinds

    try:
        kinds.load(name)
    except KitError as exc:
        return exc.line()
    return None
