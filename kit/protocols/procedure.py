"""What every procedure gets from the runner, and what it gives back before it runs.

A kind's procedure is its `prepare(protocol, inputs) -> Prepared` and `run(protocol, prepared, ctx)`,
registered with its model and its results in one `Kind` (kit.protocols.kind).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from kit.core.events import Emit
from kit.record.files import RecordWriter
from kit.record.manifest import Manifest

if TYPE_CHECKING:  # named in annotations only: reading a kind's records or results loads no engine machinery
    from kit.launch.provider import EngineProvider


@dataclass(frozen=True)
class RunInputs:
    """What a person supplied besides the protocol file (paths to data the kit does not ship)."""

    gsm8k: Path | None = None
    say: Callable[[str], None] | None = None  # where an install step tells its progress (None: stderr)


@dataclass(frozen=True)
class Prepared:
    """A procedure's plan (shown before the run and kept in the manifest), its workload's description
    for the manifest, and whatever it loaded to run with."""

    plan: dict[str, Any]
    workload: dict[str, Any]
    payload: Any = None
    seeds: dict[str, Any] = field(default_factory=dict)


class Stamp(TypedDict):
    """What every record of a pass carries besides its own fields (`RunContext.stamp`; kit.record.model)."""

    run_id: str
    pass_id: str
    protocol: str  # the procedure that writes the record: its record class
    protocol_name: str | None
    protocol_kind: str | None


class RunStopped(Exception):
    """The person asked the run to stop (from a launcher's Stop key); handled like Ctrl-C."""


@dataclass(frozen=True)
class Unit:
    """Passes that share one server (the protocol's server lifetime says which): run together, in order, by
    one call of the procedure's unit function, in this process or elsewhere (an executor). `payload` is
    what that function needs besides the context (picklable: an executor may ship it to another machine);
    `provider`, the provider its server comes from where that is not the run's (a sweep's weight format)."""

    name: str
    payload: Any
    provider: EngineProvider | None = None


UnitFunction = Callable[["RunContext", Unit], None]  # a module-level function: an executor may call it elsewhere


class Executor(Protocol):
    """Where a run's independent units execute (docs/ray.md): `map` runs `run_unit(ctx, unit)` for each unit,
    each with `ctx.provider` the unit's provider; it returns once every unit ended, and raises what ended one."""

    name: str

    def map(self, ctx: "RunContext", run_unit: UnitFunction, units: Sequence[Unit]) -> None: ...


class LocalExecutor:
    """Every unit in order, in this process: the kit's way before executors, unchanged."""

    name = "local"

    def map(self, ctx: "RunContext", run_unit: UnitFunction, units: Sequence[Unit]) -> None:
        for unit in units:
            run_unit(ctx if unit.provider is None else replace(ctx, provider=unit.provider), unit)


LOCAL = LocalExecutor()


@dataclass
class RunContext:
    """Where to write, which engines, whom to tell, which passes a resumed run already has, and
    whether someone asked to stop."""

    run_dir: Path
    manifest: Manifest
    provider: EngineProvider
    emit: Emit
    done: set[str] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)
    executor: Executor = LOCAL

    def records(self, name: str, **context: Any) -> RecordWriter:
        """The writer of the run folder's records file `name` (`records/<pass>.jsonl`), stamping `context` on
        every record it makes: procedures open their records files here, so a unit run elsewhere streams
        them to the one writer (kit.run.ray_executor)."""
        return RecordWriter(self.run_dir / name, **context)

    def stamp(self, pass_id: str, procedure: str) -> Stamp:
        """What every record of a pass carries besides its own fields: the run, the pass, the procedure that
        writes it (`protocol`: its record class, kit.protocols.kinds.record_classes) and the protocol's own name and
        kind, as the manifest has them."""
        protocol = self.manifest.run.protocol
        return {"run_id": self.manifest.run_id, "pass_id": pass_id, "protocol": procedure,
                "protocol_name": protocol.name, "protocol_kind": protocol.kind}

    def checkpoint(self) -> None:
        """Procedures call this between requests: raise RunStopped once a stop was asked for."""
        if self.stop.is_set():
            raise RunStopped()
