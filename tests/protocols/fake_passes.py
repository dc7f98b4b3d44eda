"""BFCL passes without BFCL or an engine, for what a procedure hands its executor: `bfcl_passes` yields a
stand-in worker and no episodes, `run_pass` notes which pass ran on which server, and sessions of a
`FakeProvider` note which servers were started (label, its `--cache-ram` or arm)."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

from kit.protocols.bfcl_passes import drive
from kit.protocols.procedure import LOCAL, Prepared

PREPARED = Prepared(plan={}, workload={}, payload="BFCL's install")


class FakeProvider:
    """Records which servers were asked for; sessions yield a marker instead of an engine."""

    fresh_servers = True

    def __init__(self, started: list, cache_ram=0):
        self.started, self.cache_ram = started, cache_ram

    def variant(self, cache_ram=None, **_):
        return FakeProvider(self.started, cache_ram)

    @contextmanager
    def session(self, label, log_dir):
        self.started.append((label, self.cache_ram))
        yield SimpleNamespace(launch={"label": label})


class RecordingExecutor:
    """The local executor, noting the units it was handed."""

    name = "recording"

    def __init__(self):
        self.units = []

    def map(self, ctx, run_unit, units):
        self.units.extend(units)
        LOCAL.map(ctx, run_unit, units)

    def named(self) -> list[tuple[str, list[str]]]:
        """(unit name, its pass ids in order) for every unit handed over."""
        return [(unit.name, [plan.pass_id for plan, _ in unit.payload.passes]) for unit in self.units]


def fake_passes(monkeypatch) -> list[tuple[str, str]]:
    """(pass id, the label of the server it ran on) for every pass the procedure runs, in order."""
    ran: list[tuple[str, str]] = []

    @contextmanager
    def bfcl_passes(protocol, prepared, ctx, arms, fresh_server_per_pass, estimate_provider=None):
        yield "the run's BFCL worker", [], None

    def run_pass(protocol, ctx, live, worker, episodes, render, plan, on_episode):
        assert worker == "the run's BFCL worker"  # a unit run in the run's process uses the run's worker
        ran.append((plan.pass_id, live.launch["label"]))

    monkeypatch.setattr(drive, "bfcl_passes", bfcl_passes)
    monkeypatch.setattr(drive, "run_pass", run_pass)
    return ran
