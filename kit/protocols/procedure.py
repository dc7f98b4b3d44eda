"""What every procedure gets from the runner, and what it gives back before it runs.

A kind's procedure is its `prepare(protocol, inputs) -> Prepared` and `run(protocol, prepared, ctx)`,
registered with its model and its results in one `Kind` (kit.protocols.kind).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kit.core.events import Emit
from kit.launch.provider import EngineProvider
from kit.record.manifest import Manifest


@dataclass(frozen=True)
class RunInputs:
    """What a person supplied besides the protocol file (paths to data the kit does not ship)."""

    gsm8k: Path | None = None


@dataclass(frozen=True)
class Prepared:
    """A procedure's plan (shown before the run and kept in the manifest), its workload's description
    for the manifest, and whatever it loaded to run with."""

    plan: dict[str, Any]
    workload: dict[str, Any]
    payload: Any = None
    seeds: dict[str, Any] = field(default_factory=dict)


class RunStopped(Exception):
    """The person asked the run to stop (from a launcher's Stop key); handled like Ctrl-C."""


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

    def stamp(self, pass_id: str, procedure: str) -> dict[str, Any]:
        """What every record of a pass carries besides its own fields: the run, the pass, the procedure that
        writes it (`protocol`: its record class, kit.record.model.RECORD_CLASSES) and the protocol's own name and
        kind, as the manifest has them."""
        protocol = self.manifest.run.protocol
        return {"run_id": self.manifest.run_id, "pass_id": pass_id, "protocol": procedure,
                "protocol_name": protocol.name, "protocol_kind": protocol.kind}

    def checkpoint(self) -> None:
        """Procedures call this between requests: raise RunStopped once a stop was asked for."""
        if self.stop.is_set():
            raise RunStopped()
