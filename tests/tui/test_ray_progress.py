"""A Ray run's progress per node and its overall ETA, from the events the Ray executor emits (UnitProgress;
kit.run.ray_executor): the console's lines, the live state and the live screen. No cluster, no engine."""

from __future__ import annotations

import asyncio
import io
import threading
from pathlib import Path

from kit.app.console import ConsoleReporter
from kit.core.safe_console import SafeConsole
from kit.core.events import RunEnded, RunStarted, UnitProgress, units_eta
from kit.run.runner import RunOptions, RunResult
from kit.tui.live_state import LiveState
from tests.tui.conftest import PROTOCOLS, SetClock, static_text, until
from tests.tui.scripted import launcher_app, scripted_run_started

RUN_DIR = Path("/runs/sweep-20260101-000000")
PLAN = {"episodes": 2, "passes": ["q8-h0-on", "q8-h1-on", "q4-h0-on", "q4-h1-on"]}


def placed(unit: str, node: str, done: int, elapsed: float, attempt: int = 1) -> UnitProgress:
    return UnitProgress(unit, node, f"10.0.0.{node[-1]}", "running", attempt, done, 4, elapsed)


def ended(unit: str, node: str, done: int, elapsed: float) -> UnitProgress:
    return UnitProgress(unit, node, f"10.0.0.{node[-1]}", "done", 1, done, 4, elapsed)


# four units on two nodes: two run side by side, the first ends after 60 s
EVENTS = [placed("q8-h0-on", "node-1", 0, 1.0), placed("q8-h1-on", "node-2", 0, 1.5),
          placed("q4-h0-on", "node-1", 0, 1.6), ended("q8-h0-on", "node-1", 1, 60.0),
          placed("q4-h1-on", "node-1", 1, 61.0, attempt=2)]


def test_the_overall_eta_is_the_pace_of_the_units_done():
    assert units_eta(0, 4, 30.0) is None  # nothing ended yet: no pace
    assert units_eta(1, 4, 60.0) == 180.0 and units_eta(3, 4, 90.0) == 30.0 and units_eta(4, 4, 99.0) == 0.0
    assert EVENTS[3].eta_s() == 180.0


def test_the_console_says_which_node_runs_which_unit_and_the_eta():
    out = io.StringIO()
    reporter = ConsoleReporter(SafeConsole(file=out, width=200, color_system=None))
    reporter(RunStarted(RUN_DIR, "sweep", PLAN))
    for event in (*EVENTS, ended("q8-h1-on", "node-2", 2, 90.0)):
        reporter(event)
    reporter(RunEnded(RUN_DIR, "interrupted", "stopped"))
    lines = out.getvalue().splitlines()
    assert "unit q8-h0-on runs on node node-1 (10.0.0.1)" in lines
    assert "unit q8-h1-on runs on node node-2 (10.0.0.2)" in lines
    assert "unit q4-h1-on runs on node node-1 (10.0.0.1), attempt 2" in lines
    assert "unit q8-h0-on done on node node-1 (10.0.0.1): 1/4 units, eta 3.0 min" in lines
    assert "unit q8-h1-on done on node node-2 (10.0.0.2): 2/4 units, eta 1.5 min" in lines


def test_the_live_state_keeps_the_units_per_node_and_the_overall_eta():
    clock = SetClock(1000.0)
    state = LiveState(clock=clock)
    state.apply(RunStarted(RUN_DIR, "sweep", PLAN))
    assert state.units_line() == "" and state.units_eta_seconds() is None  # not a Ray run (yet)
    clock.now += 1.0
    for event in EVENTS[:3]:
        state.apply(event)
    assert state.units_line() == "units 0/4 done · node-1: q8-h0-on, q4-h0-on · node-2: q8-h1-on"
    assert state.units_eta_seconds() is None  # no unit ended, no estimate measured
    clock.now += 59.0
    for event in EVENTS[3:]:
        state.apply(event)
    assert state.units_line() == "units 1/4 done · node-1: q4-h0-on, q4-h1-on · node-2: q8-h1-on"
    assert state.units_eta_seconds() == 180.0  # 60 s for 1 of 4 units
    clock.now += 30.0
    assert state.units_eta_seconds() == 270.0  # the same pace, measured on the screen's clock


async def stopped(app, pilot) -> None:
    """Stop the scripted run and wait until the screen has taken its result (not racing the app's exit)."""
    live = app.live
    live.stop.set()
    await until(pilot, lambda: live.finished)
    await pilot.pause()


def ray_run(ready: threading.Event):
    def run(options: RunOptions, emit, say) -> RunResult:
        emit(RunStarted(RUN_DIR, "sweep", PLAN))
        for event in EVENTS:
            emit(event)
        ready.set()
        options.stop.wait(30)
        emit(RunEnded(RUN_DIR, "interrupted", "stopped by the user"))
        return RunResult(RUN_DIR, "interrupted", "stopped by the user", None)

    return run


def test_the_live_screen_shows_the_nodes_and_the_eta_only_for_a_ray_run(cpu_caps):
    clock = SetClock()

    async def drive():
        async with scripted_run_started(cpu_caps, clock=clock, run=ray_run) as (app, pilot):
            await until(pilot, lambda: app.live.state.units == (1, 4))
            clock.now += 59.0  # the first unit was handed out 1 s before the first event: 60 s for 1 of 4
            app.live.render_state()
            await pilot.pause()
            units = app.live.query_one("#units")
            assert units.display
            text = static_text(app.live, "#units")
            assert "units 1/4 done · node-1: q4-h0-on, q4-h1-on · node-2: q8-h1-on · eta 3:00" in text
            await stopped(app, pilot)

    asyncio.run(drive())


def local_run(options: RunOptions, emit, say) -> RunResult:
    emit(RunStarted(RUN_DIR, "sweep", PLAN))
    options.stop.wait(30)
    return RunResult(RUN_DIR, "interrupted", "stopped", None)


def test_the_live_screen_hides_the_units_line_of_a_local_run(cpu_caps):
    async def drive():
        app = launcher_app(cpu_caps, run_fn=local_run)
        async with app.run_test(size=(100, 30)) as pilot:
            app.start_run(RunOptions(protocol=str(PROTOCOLS / "reset.yaml")))
            while app.live.state.run_dir is None:
                await pilot.pause(0.05)
            assert not app.live.query_one("#units").display
            await stopped(app, pilot)

    asyncio.run(drive())
