"""Imported determinism-harness runs (seed 002's harness, `kit import determinism-harness`): a kind that
is read, never run.

Its run folders are written by kit.importers.determinism_harness, not by a protocol file: `prepare`
refuses with the command to use. Its results are kit.protocols.harness.results (the harness's own report
values, recomputed from the imported calls), which `kit import`, `kit analyze` and `kit verify` reach
through this one registration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from kit.core.errors import ConfigError
from kit.protocols.harness.calls import NAME
from kit.protocols.kind import Analysis, Kind, Launcher, Lazy, Number, Table
from kit.protocols.procedure import Prepared, RunContext, RunInputs
from kit.protocols.spec import ProtocolBase
from kit.protocols.harness.table import HarnessResults
from kit.record.model import HarnessRecord


class HarnessProtocol(ProtocolBase):
    """What an imported run's manifest says of it (`protocol.resolved`)."""

    protocol: Literal["harness"]
    mode: str = "unknown"
    box: str | None = None
    boxes: list[str] | None = None  # every box of the study (imports since several boxes import as one run)
    thresholds: list[float] | None = None
    report: str | None = None
    definitions: int | None = None  # kit.protocols.harness.results.DEFINITIONS; absent: imported before, the first table


def prepare(protocol: HarnessProtocol, inputs: RunInputs) -> Prepared:
    raise ConfigError("harness runs are imported, not run",
                      "use `kit import determinism-harness FILE.jsonl` on the harness's records")


def run(protocol: HarnessProtocol, prepared: Prepared, ctx: RunContext) -> None:
    prepare(protocol, RunInputs())


def results(run_dir: Path) -> Table:
    from kit.protocols.harness.results import results as harness_results  # noqa: PLC0415

    return harness_results(run_dir).to_json()


KIND = Kind(
    results_model=HarnessResults,
    name="harness", model=HarnessProtocol, prepare=prepare, run=run, results=results, table="harness",
    imported_from=NAME,
    render=Lazy("kit.protocols.harness.view:harness_table"),
    launcher=Launcher(measures="seed 002's determinism-harness calls, imported: arms, states, cycles, gates",
                      needs="nothing: `kit import determinism-harness FILE.jsonl` makes the run folder",
                      estimate=None, size=Number("Calls", None, 0)),
    analysis=Analysis("harness"), record=HarnessRecord, from_files=False,
    headline=Lazy("kit.protocols.harness.view:headline"))
