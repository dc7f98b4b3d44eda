"""Long runs ask first: a protocol whose rough duration on the embedded CPU engine is past an hour is
refused before anything is fetched, installed or written, unless the person confirmed it (`--yes` on the
command line, a confirmation in the launcher). The refusal names the estimate and the protocol sized for a
CPU beside it: `<name>-cpu.yaml` in the same folder (protocols/ ships grid-cpu, sweep-cpu, ...), found
there, not from a list kept here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.core.errors import ConfigError
from kit.engines import registry
from kit.protocols import kinds
from kit.protocols.kind import CpuEstimate, rough_duration
from kit.protocols.spec import ProtocolBase
from kit.run.engine_source import engine_source

HOUR = 3600.0  # past this rough CPU duration, a run asks first
CPU_SUFFIX = "-cpu"  # `<name>-cpu.yaml`: the CPU-sized protocol beside `<name>.yaml`


SIZE_OPTIONS = ("items", "episodes", "sessions", "histories")  # the size keys `kit run` has an option for


@dataclass(frozen=True)
class LongRun:
    """A run past the limit: its name, its estimate, the options that size it, and the CPU-sized protocol
    beside it (if any) with its own estimate."""

    name: str
    estimate: CpuEstimate
    sizes: tuple[str, ...]  # e.g. ("--episodes",)
    alternative: str | None
    alternative_estimate: CpuEstimate | None

    def message(self) -> str:
        return (f"{self.name} would take about {rough_duration(self.estimate.seconds)} on this machine's CPU engine "
                f"({self.estimate.what}), longer than an hour")

    def fix(self, confirm: str) -> str:
        """What to do instead, `confirm` naming how to start it anyway (`pass --yes`)."""
        if self.alternative:
            other = self.alternative_estimate
            sized = f" ({other.what}, about {rough_duration(other.seconds)})" if other else ""
            return f"run {self.alternative} instead, sized for a CPU{sized}, or {confirm} to start it anyway"
        smaller = f"make it smaller ({', '.join(self.sizes)}) or " if self.sizes else ""
        return f"{smaller}{confirm} to start it anyway"


def estimate(protocol: ProtocolBase) -> CpuEstimate | None:
    """The kind's rough CPU duration of this protocol (its resolved values), None where the kind has none."""
    launcher = kinds.of(protocol).launcher
    if launcher is None or launcher.estimate is None:
        return None
    return launcher.estimate(protocol.model_dump(mode="json"))


def cpu_sized(path: Path) -> Path | None:
    """The CPU-sized protocol beside `path` (`<stem>-cpu.yaml` in its folder), None where there is none."""
    if path.stem.endswith(CPU_SUFFIX):
        return None
    beside = path.with_name(f"{path.stem}{CPU_SUFFIX}{path.suffix}")
    return beside if beside.is_file() else None


def long_run(protocol: ProtocolBase, path: Path, limit: float = HOUR) -> LongRun | None:
    """What makes this run ask first (its estimate is past `limit` seconds), or None."""
    found = estimate(protocol)
    if found is None or found.seconds <= limit:
        return None
    launcher = kinds.of(protocol).launcher
    numbers = (launcher.size, launcher.repeats) if launcher else ()
    sizes = tuple(f"--{number.key.rsplit('.', 1)[-1]}" for number in numbers
                  if number is not None and number.key and number.key.rsplit(".", 1)[-1] in SIZE_OPTIONS)
    alternative = cpu_sized(path)
    other = estimate(kinds.load(str(alternative))[0]) if alternative else None
    return LongRun(path.stem, found, sizes, alternative.stem if alternative else None, other)


def on_the_cpu_engine(options: Any) -> bool:
    """Whether the run is served by the embedded engine on this machine's CPU, in this process: what the
    rough estimates are about, or a llama.cpp build made here for it (an engine elsewhere, a user's binary, a
    container or a cluster is not)."""
    engine = registry.ENGINES.get(options.engine)
    return (engine_source(options) in ("embedded", "engine-build") and engine is not None
            and registry.EMBEDDED in engine.launch and options.executor == "local")


def asking(options: Any, protocol: ProtocolBase, path: Path, limit: float = HOUR) -> LongRun | None:
    """What makes this run ask first (`limit` seconds past, on the CPU engine here), or None; the launcher
    asks for a confirmation on it, the command line refuses it without --yes."""
    return long_run(protocol, path, limit) if on_the_cpu_engine(options) else None


def refuse_unconfirmed(options: Any, protocol: ProtocolBase, path: Path) -> None:
    """Refuse a run past an hour on the CPU engine unless `options.confirmed` (the person confirmed, or was
    never asked), in one line with the estimate and the CPU-sized protocol."""
    found = None if options.confirmed else asking(options, protocol, path)
    if found is not None:
        raise ConfigError(found.message(), found.fix("pass --yes"))
