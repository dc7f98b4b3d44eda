"""Which units the grid (its sentinel protocol too) and flag × order hand their executor, without BFCL or an
engine: passes that share a server, or whose servers are up at once, stay in one unit; every other cut falls
between servers. Run locally, the units run the passes in the protocol's order, on the servers a run always
had; a unit ships to another machine without the run's BFCL worker."""

from __future__ import annotations

import pickle

import pytest

from kit.launch.provider import ArmProviders
from kit.protocols import kinds
from kit.protocols.bfcl_passes import drive
from kit.protocols.flag_order import protocol as flag_order
from kit.protocols.grid import protocol as grid
from kit.protocols.procedure import RunContext
from kit.record.manifest import Manifest
from tests.protocols.fake_passes import PREPARED, FakeProvider, RecordingExecutor, fake_passes

PER_ARM_INTERLEAVED = """
protocol: grid
passes: [on, off, on, off]
server: per_arm
"""


def _run(name_or_text, tmp_path, monkeypatch, per_arm=False, done=()):
    """Run the protocol's procedure on fake servers: (protocol, the executor with the units it was handed, passes
    run with their servers' labels, servers started)."""
    protocol = kinds.parse_text(name_or_text, "test") if "\n" in name_or_text else kinds.load(name_or_text)[0]
    started: list = []
    provider = (ArmProviders({arm: FakeProvider(started, arm) for arm in ("on", "off")}) if per_arm
                else FakeProvider(started, None))
    ran = fake_passes(monkeypatch)
    executor = RecordingExecutor()
    ctx = RunContext(tmp_path, Manifest.create(tmp_path, passes={}), provider, lambda _e: None, done=set(done),
                     executor=executor)
    kinds.KINDS[protocol.protocol].run(protocol, PREPARED, ctx)
    plan = grid.pass_plan(protocol) if protocol.protocol == "grid" else flag_order.pass_plan(protocol)
    assert [pass_id for pass_id, _ in ran] == [p.pass_id for p in plan if p.pass_id not in done]  # the local order
    return protocol, executor, ran, started


@pytest.mark.parametrize("name, per_arm, units", [
    ("grid", False, [("grid", ["on1", "off1", "on2", "off2"])]),  # one server for every pass
    ("grid-vllm", True, [("arm-on", ["on1", "on2"]), ("arm-off", ["off1", "off2"])]),  # a server per arm, in turn
    ("grid-vllm-fresh", True, [(p, [p]) for p in ("on1", "on2", "off1", "off2")]),  # a fresh server per pass
    ("sentinel", False, [(p, [p]) for p in ("on1-o0", "off1-o0", "on1-o1", "off1-o1", "on1-o2", "off1-o2")]),
    (PER_ARM_INTERLEAVED, False, [("arm-on+arm-off", ["on1", "off1", "on2", "off2"])]),  # both servers up at once
])
def test_a_grid_hands_over_its_servers_passes_as_units(name, per_arm, units, tmp_path, monkeypatch):
    protocol, executor, ran, started = _run(name, tmp_path, monkeypatch, per_arm)
    assert executor.named() == units
    assert [label for label, _ in started] == [label for unit, _ in units for label in unit.split("+")]
    key = grid.SERVER_KEY[protocol.server]
    assert ran == [(p.pass_id, key(p)) for p in grid.pass_plan(protocol)]  # each pass on its server, in plan order


def test_flag_order_hands_over_one_unit_per_arm_and_one_per_pass_where_an_arm_says_so(tmp_path, monkeypatch):
    _, executor, ran, started = _run("flag-order", tmp_path, monkeypatch)
    cells = ["default-adjacent", "default-between", "disabled-adjacent", "disabled-between"]
    assert [name for name, _ in executor.named()] == cells
    assert started == [(cell, None if cell.startswith("default") else 0) for cell in cells]  # its own --cache-ram
    assert all(pass_id.startswith(f"{label}-") for pass_id, label in ran)
    _, executor, ran, started = _run("flag-order-vllm", tmp_path / "vllm", monkeypatch, per_arm=True)
    assert executor.named() == [
        ("fresh-per-pass-on1", ["fresh-per-pass-on1"]), ("fresh-per-pass-on2", ["fresh-per-pass-on2"]),
        ("one-process-adjacent-on", ["one-process-adjacent-on1", "one-process-adjacent-on2"]),
        # its cache-off pass on a server of its own, up while the cache-on server waits for the arm's second pass
        ("one-process-between-on+one-process-between-off",
         ["one-process-between-on1", "one-process-between-off1", "one-process-between-on2"])]
    assert started[-2:] == [("one-process-between-on", "on"), ("one-process-between-off", "off")]


def test_a_resumed_grid_hands_over_only_the_passes_it_lacks(tmp_path, monkeypatch):
    _, executor, _, _ = _run("sentinel", tmp_path, monkeypatch, done={"on1-o0", "off1-o0", "on1-o1"})
    assert executor.named() == [(p, [p]) for p in ("off1-o1", "on1-o2", "off1-o2")]


def test_together_cuts_only_where_no_server_is_up():
    def key(pass_id):
        return pass_id[0]
    assert drive.together(list("aabbc"), key) == [["a", "a"], ["b", "b"], ["c"]]
    assert drive.together(list("abab"), key) == [list("abab")]
    assert drive.together(list("abacdd"), key) == [list("aba"), ["c"], ["d", "d"]]
    assert drive.together([], key) == []


def test_a_unit_ships_without_the_runs_bfcl_worker(tmp_path, monkeypatch):
    _, executor, _, _ = _run("flag-order", tmp_path, monkeypatch)
    unit = executor.units[1]
    assert unit.payload.worker == "the run's BFCL worker"
    shipped = pickle.loads(pickle.dumps(unit))
    assert shipped.payload.worker is None  # a process handle stays where it was started; the node starts its own
    assert shipped.payload.passes == unit.payload.passes and shipped.payload.server is flag_order.arm_server
    assert shipped.payload.servers == ["default-adjacent", "default-between", "disabled-adjacent", "disabled-between"]
