"""Snapshots (pytest-textual-snapshot) of the picker, the live screen mid-run and the results screen.

Nothing in them depends on timing or paths: the clock is set by hand, the run folder is a fixed
/runs/... path, and the live screen is fed a scripted sequence of the runner's own event types (the
screen is a view of events; the real engine runs in test_launcher_run.py). Update with
`pytest tests/tui/test_snapshots.py --snapshot-update` after checking the SVGs by eye.
"""

from __future__ import annotations

import threading
from pathlib import Path

from kit.core.events import (
    ItemVerdict,
    RequestDone,
    RunEnded,
    RunStarted,
    SessionEnded,
    SessionStarted,
)
from textual.widgets import Input, Select

from kit.app.doctor import DOCKER_WAY
from kit.core.paths import protocols_dir
from kit.protocols.kinds import KINDS
from kit.run.runner import RunOptions, RunResult
from kit.tui.app import KitApp
from kit.tui.catalog import EMBEDDED, Capabilities, entry
from tests.tui.conftest import PROTOCOLS, SetClock

RUN_DIR = Path("/runs/reset-20260101-000000")
PLAN = {"sessions": 2, "items": 3, "phases": ["cold", "warm", "cold2", "warm2"], "requests": 24, "max_tokens": 64}


def scripted_run(ready: threading.Event):
    """A run that emits the first session and a half, then waits until it is asked to stop."""

    def run(options: RunOptions, emit, say) -> RunResult:
        emit(RunStarted(RUN_DIR, "reset", PLAN))
        emit(SessionStarted("s1", 1, 2, {"build_info": "b1-7e4c0a9", "startup_seconds": 1.5}))
        items = ("arith-20261007-2", "arith-20261007-0", "arith-20261007-1")
        for number, unit in enumerate(items, start=1):
            for index, phase in enumerate(PLAN["phases"]):
                warm = index % 2 == 1
                emit(RequestDone("s1", unit, phase, 4 * number - 3 + index, 83 if warm else 0,
                                 27.0 if warm else 310.0, True))
            emit(ItemVerdict("s1", unit, number, 3, True, number != 3, number == 2, 17 if number == 2 else None))
        emit(SessionEnded("s1", "OK", None))
        emit(SessionStarted("s2", 2, 2, {"build_info": "b1-7e4c0a9", "startup_seconds": 1.4}))
        emit(RequestDone("s2", items[1], "cold", 13, 0, 305.0, True))
        emit(RequestDone("s2", items[1], "warm", 14, None, 30.0, False))
        ready.set()
        options.stop.wait(30)
        emit(RunEnded(RUN_DIR, "interrupted", "stopped by the user; records written so far are kept"))
        return RunResult(RUN_DIR, "interrupted", "stopped by the user", None)

    return run


def _app(cpu_caps, **kwargs) -> KitApp:
    return KitApp(caps=cpu_caps, protocols_folder=PROTOCOLS, outputs=Path("/runs"), watch_logs=False, **kwargs)


def test_picker_at_80x24(snap_compare, cpu_caps):
    assert snap_compare(_app(cpu_caps), press=["down"], terminal_size=(80, 24))


def test_picker_in_a_large_terminal(snap_compare, cpu_caps):
    assert snap_compare(_app(cpu_caps), terminal_size=(140, 45))


def test_live_screen_mid_run(snap_compare, cpu_caps):
    ready, clock = threading.Event(), SetClock()

    async def mid_run(pilot):
        app = pilot.app
        app.start_run(RunOptions(protocol=str(PROTOCOLS / "reset.yaml")))
        await pilot.pause()
        while not ready.is_set() or len(app.live.state.requests) < 14:
            await pilot.pause(0.05)
        clock.now += 95.0  # 14 of 24 requests in 95 s
        app.live.render_state()
        await pilot.pause()

    app = _app(cpu_caps, run_fn=scripted_run(ready), clock=clock)
    assert snap_compare(app, terminal_size=(80, 24), run_before=mid_run)


RESET_TABLE = {
    "table": "restored-state control", "run_id": RUN_DIR.name, "files": {"reset_table": "results/reset_table.json"},
    "sessions": [
        {"session": "s1", "status": "OK", "reason": None, "items": 12, "recompute_reproduces": 12,
         "hit_reproduces": 11, "paths_differ": 3, "cache_caused": 2, "first_difference_tokens": [4, 17, 40]},
        {"session": "s2", "status": "OK", "reason": None, "items": 12, "recompute_reproduces": 12,
         "hit_reproduces": 12, "paths_differ": 0, "cache_caused": 0, "first_difference_tokens": []},
        {"session": "s3", "status": "VOID", "reason": "2 of 48 requests violated the cache-state gate"},
    ],
    "across_sessions": {"sessions": 2, "items": 12, "recompute_same_in_all": 12, "hit_same_in_all": 10},
    "void_sessions": ["s3"],
}


def test_results_screen(snap_compare, cpu_caps):
    async def show(pilot):
        pilot.app.show_results(RunResult(RUN_DIR, "finished", None, RESET_TABLE))
        await pilot.pause()

    assert snap_compare(_app(cpu_caps), terminal_size=(80, 24), run_before=show)


def test_setup_for_a_vllm_endpoint(snap_compare):
    """The form for grid-vllm with a vLLM endpoint: a URL per cache arm, the second one refused."""
    caps = Capabilities((EMBEDDED, DOCKER_WAY))

    async def fill(pilot):
        app = pilot.app
        app.open_setup(entry(protocols_dir() / "grid-vllm.yaml", KINDS, caps))
        await pilot.pause()
        screen = app.screen
        screen.query_one("#f-engine", Select).value = "endpoint"
        screen.query_one("#f-endpoint_kind", Select).value = "vllm"
        screen.query_one("#f-url_on", Input).value = "http://127.0.0.1:8001"
        screen.query_one("#f-url_off", Input).value = "http://127.0.0.1:8001/"
        await pilot.pause()

    app = KitApp(caps=caps, outputs=Path("/runs"), watch_logs=False)
    assert snap_compare(app, terminal_size=(100, 30), run_before=fill)
