"""Live calls recorded by `kit watch` (kit.watch): a kind that is watched, never run from a protocol file.

Its run folders are written by the proxy: one records file per rotation (`records/calls-NNNN.jsonl`, a pass
each), `WatchRecord`s (kit.record.model). `prepare` refuses with the command to use. Its results
(kit.protocols.watch.results) recompute the calls by state and the alarms from the records, which
`kit analyze`, `kit bundle`, `kit verify` and `kit show` reach through this one registration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from kit.core.errors import ConfigError
from kit.protocols.kind import Analysis, Kind, Launcher, Lazy, Number
from kit.protocols.procedure import Prepared, RunContext, RunInputs
from kit.protocols.spec import ProtocolBase, Strict
from kit.protocols.watch.results import WatchResults
from kit.record.model import WatchRecord


class TimingClass(Strict):
    """One timing class of the calibration the proxy labelled calls with (kit.record.cache_state.ClassFit)."""

    states: list[str]
    n: int
    min_ms: float
    max_ms: float
    median_ms: float
    log_mean: float
    name: str


class FittedCalibration(Strict):
    """The calibration the proxy ran with, as `Calibration.to_json()` writes it (from `kit check`)."""

    classes: list[TimingClass]
    boundaries_ms: list[float]
    log_sd: float
    separated: bool
    merged: list[list[str]]


class WatchProtocol(ProtocolBase):
    """What a watch run's manifest says of it (`protocol.resolved`)."""

    protocol: Literal["watch"]
    upstream: str | None = None  # credentials redacted
    engine_kind: str | None = None
    store_bodies: bool = False
    pinned: bool = False
    rotate: int | None = None
    reuse_tolerance: int | None = None
    calibration: FittedCalibration | None = None


def prepare(protocol: WatchProtocol, inputs: RunInputs) -> Prepared:
    raise ConfigError("watch runs are recorded by the proxy, not run from a protocol file",
                      "use `kit watch --upstream URL` and point your clients at it")


def run(protocol: WatchProtocol, prepared: Prepared, ctx: RunContext) -> None:
    prepare(protocol, RunInputs())


def results(run_dir: Path) -> WatchResults:
    from kit.protocols.watch.results import results as watch_results  # noqa: PLC0415

    return watch_results(run_dir)


KIND = Kind(
    results_model=WatchResults,
    name="watch", model=WatchProtocol, prepare=prepare, run=run, results=results, table="watch",
    render=Lazy("kit.protocols.watch.view:watch_table"), headline=Lazy("kit.protocols.watch.view:headline"),
    launcher=Launcher(measures="live traffic through `kit watch`: cache state per call, same request answered "
                               "differently (alarms)",
                      needs="nothing: `kit watch --upstream URL` makes the run folder while clients use it",
                      estimate=None, size=Number("Calls", None, 0)),
    analysis=Analysis("watch", table=Lazy("kit.protocols.watch.results:watch_table")), record=WatchRecord, from_files=False)
