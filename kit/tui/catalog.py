"""The protocol catalog the launcher shows: every protocols/*.yaml, what it measures and needs, and
whether this machine can run it. A protocol is ready only where an engine way it can use is open in
`kit doctor`'s checks, the embedded engine only once proven by a real completion; a file written for
vLLM (`engine.kind: vllm`) can use only the ways that run vLLM. No Textual here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from kit.app import doctor
from kit.app.doctor import DOCKER_CPU_WAY, DOCKER_WAY, EMBEDDED_WAY, NATIVE_LLAMACPP_WAY, NATIVE_VLLM_WAY, Check
from kit.core.errors import KitError
from kit.core.paths import protocols_dir
from kit.engines import registry as engines

if TYPE_CHECKING:
    from kit.protocols.kind import Kind

EMBEDDED = EMBEDDED_WAY
ENDPOINT = "your own endpoint URL"  # not a doctor way: always there, never proven here
NOT_PROVEN = f"the {EMBEDDED} is not proven on this machine: run `kit doctor`"
CPU_FIGURE = "; vLLM on a GPU takes far less"  # after the CPU estimate of a vLLM file or setup


@dataclass(frozen=True)
class EngineChoice:
    """One way to get an engine: what the doctor must allow for it, and the runner's engine and launcher."""

    key: str
    label: str
    doctor_way: str | None  # the doctor's way that must be open; None: nothing local needed
    engine: str = engines.DEFAULT  # RunOptions.engine (the endpoint's comes from its kind)
    launcher: str = "native"  # RunOptions.launcher
    image: str | None = None  # RunOptions.image and .gpus (--launcher docker)
    gpus: str | None = None

    @property
    def way(self) -> str:
        """The engine way a protocol kind must accept (kind_ways)."""
        return self.doctor_way or ENDPOINT


ENGINES = (
    EngineChoice("embedded", "embedded CPU engine (llama.cpp 7e4c0a9)", EMBEDDED),
    EngineChoice("native", "native GPU build (llama-server binary)", NATIVE_LLAMACPP_WAY),
    EngineChoice("llamacpp-container", "llama.cpp container", DOCKER_WAY, launcher="docker"),
    EngineChoice("llamacpp-cpu-container", "llama.cpp CPU container (kit images build llamacpp)", DOCKER_CPU_WAY,
                 launcher="docker", image="kit/llamacpp:7e4c0a9-cpu", gpus="none"),
    EngineChoice("vllm-container", "vLLM container", DOCKER_WAY, engine=engines.VLLM.name, launcher="docker"),
    EngineChoice("vllm-native", "native vLLM (kit engines install vllm)", NATIVE_VLLM_WAY, engine=engines.VLLM.name),
    EngineChoice("endpoint", "my own endpoint (URL + kind)", None),
)


@dataclass(frozen=True)
class Capabilities:
    """What this machine can run: the engine ways proven or found by `kit doctor`, and for a way it cannot
    use (yet), the one line saying why (not proven, its proof failed, not installed)."""

    ways: tuple[str, ...]
    checked: bool = True  # False while the doctor is still looking
    why_not: Mapping[str, str] = field(default_factory=dict, hash=False)
    report: tuple[str, ...] = ()  # the doctor's lines, as `kit doctor` prints them (empty: not looked)
    blocked: Mapping[str, str] = field(default_factory=dict, hash=False)  # way -> its first failing check, no fix

    @property
    def embedded(self) -> bool:
        return EMBEDDED in self.ways

    @property
    def gpu(self) -> bool:
        return any(way in self.ways for way in (DOCKER_WAY, NATIVE_LLAMACPP_WAY, NATIVE_VLLM_WAY))


def capabilities(checks: Sequence[Check]) -> Capabilities:
    """The doctor's checks as the launcher uses them: an embedded engine counts only once proven; a way
    that is not open says what is missing (the doctor's line for the first check it needs that fails)."""
    waiting = doctor.unproven_ways(checks)
    ways = tuple(way for way in doctor.runnable(checks) if way not in waiting)
    why_not, blocked = {}, {}
    for way in doctor.PATHS:
        if way not in ways and (missing := doctor.blocking(checks, way)) is not None:
            why_not[way], blocked[way] = missing.sentence(), f"{missing.name}: {missing.detail}"
    if EMBEDDED not in ways:
        engine = next(c for c in checks if c.name == "embedded engine")
        why_not[EMBEDDED] = NOT_PROVEN if doctor.unproven(engine) else engine.sentence()
    return Capabilities(ways, why_not=why_not, report=(*(c.line() for c in checks), doctor.can_run_line(checks)),
                        blocked=blocked)


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
    engine: str = engines.DEFAULT  # the engine the file is written for (its engine.kind)

    def explanation(self) -> str:
        return f"{self.measures}.\nNeeds {self.needs}; {self.estimate}."


def kind_ways(kind: str, known: Mapping[str, Kind] | None = None, engine: str = engines.DEFAULT) -> tuple[str, ...]:
    """The engine ways a protocol of this kind written for `engine` can use: the doctor's ways that start that
    engine (`ENGINES`), and a server of it by URL unless the kind needs servers the kit starts itself."""
    known = _registry() if known is None else known
    launcher = known[kind].launcher if kind in known else None
    started_only = launcher is not None and launcher.started_engine_only
    started = tuple(choice.way for choice in ENGINES if choice.doctor_way and choice.engine == engine)
    return started if started_only or not engines.named(engine).endpoint_label else (*started, ENDPOINT)


def kind_needs(kind: str, known: Mapping[str, Kind] | None = None, engine: str = engines.DEFAULT) -> str:
    if needs := engines.named(engine).launcher_needs:  # a file written for it needs that engine itself
        return needs
    known = _registry() if known is None else known
    return known[kind].launcher.needs if kind in known else "an engine"


def _registry() -> Mapping[str, Kind]:
    from kit.protocols.kinds import KINDS  # noqa: PLC0415 - the protocol registry loads when the catalog is first read

    return KINDS


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
    engine = written_for(data)
    launcher = known[kind].launcher if kind in known else None
    measures, needs = (launcher.measures, launcher.needs) if launcher else (f"a {kind} protocol", "see the file")
    description = " ".join(str(data.get("description", "")).split())
    if engines.named(engine).launcher_needs:
        needs = kind_needs(kind, known, engine)
    runnable, ready, why_not = readiness(kind, known, caps, engine)
    cost = str(launcher.estimate(data)) if launcher and launcher.estimate else "duration unknown"
    if engines.named(engine).needs_gpu and launcher and launcher.estimate:
        cost += CPU_FIGURE
    return Entry(path.stem, path, kind, description, measures, needs, cost, runnable, why_not, ready, engine)


def written_for(data: Mapping) -> str:
    """The engine a protocol file (as read from YAML) is written for: its `engine.kind` where that is an engine the
    kit runs, else the default (llama.cpp)."""
    engine = data.get("engine")
    kind = engine.get("kind") if isinstance(engine, Mapping) else None
    return kind if isinstance(kind, str) and kind in engines.run_choices() else engines.DEFAULT


def readiness(kind: str, known: Mapping[str, Kind], caps: Capabilities,
              engine: str = engines.DEFAULT) -> tuple[bool, bool, str | None]:
    """(can start, ready, why not ready) for a kind written for `engine` on this machine: ready where an
    engine way it can use is open; startable without one only where the user's own endpoint URL will do."""
    if kind not in known:
        return False, False, f"not available yet: this kit cannot run '{kind}' protocols"
    if not caps.checked:
        return False, False, "checking this machine…"
    ways = kind_ways(kind, known, engine)
    if any(way in caps.ways for way in ways):
        return True, True, None
    missing = {way: caps.why_not[way] for way in ways if way in caps.why_not}
    written = engines.named(engine)
    native = next((c.way for c in ENGINES if c.engine == engine and c.launcher == "native" and c.doctor_way), None)
    if written.needs_gpu and native is not None and native in caps.blocked:  # the most telling way: its GPU, then its executable
        reason = (f"written for {written.label}, which `kit doctor` does not find here ({native}: "
                  f"{caps.blocked[native]}; `d` shows every check and its fix)")
    elif missing:
        reason = next(iter(missing.values()))
    else:
        reason = f"needs {kind_needs(kind, known, engine)}, which `kit doctor` does not find here"
    return ENDPOINT in ways, False, reason  # with no proven engine, an endpoint URL can still be given


def catalog(caps: Capabilities, folder: Path | None = None, known: Mapping[str, Kind] | None = None) -> list[Entry]:
    """Every protocol file in protocols/, ready ones first, then startable ones, each group in name order."""
    known = _registry() if known is None else known
    entries = [entry(path, known, caps) for path in sorted((folder or protocols_dir()).glob("*.yaml"))]
    return sorted(entries, key=lambda e: (not e.ready, not e.runnable, e.name))


def validate(name: str) -> str | None:
    """Does this protocol load and validate? None, or the one-line error."""
    from kit.protocols import kinds  # noqa: PLC0415 - the protocol registry loads when the catalog is first read

    try:
        kinds.load(name)
    except KitError as exc:
        return exc.line()
    return None
