"""The launcher driven by a scripted run: the runner's own event types for the first session and a half, then a
wait until the run is asked to stop (the live and results screens are views of events; the real engine runs in
test_launcher_run.py). Nothing depends on timing or paths: the run folder is a fixed /runs/... path."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from kit.core.events import ItemVerdict, RequestDone, RunEnded, RunStarted, SessionEnded, SessionStarted
from kit.run.runner import RunOptions, RunResult
from kit.tui.app import KitApp
from kit.tui.catalog import Capabilities
from textual.pilot import Pilot
from tests.tui.conftest import PROTOCOLS, until

RUN_DIR = Path("/runs/reset-20260101-000000")
PLAN = {"sessions": 2, "items": 3, "phases": ["cold", "warm", "cold2", "warm2"], "requests": 24, "max_tokens": 64}

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


def launcher_app(caps: Capabilities, **kwargs) -> KitApp:
    """The launcher over the test protocols folder, writing under the fixed /runs, watching no logs."""
    return KitApp(caps=caps, protocols_folder=PROTOCOLS, outputs=Path("/runs"), watch_logs=False, **kwargs)


@asynccontextmanager
async def scripted_run_started(caps: Capabilities, *, size: tuple[int, int] = (100, 30),
                               clock: Callable[[], float] | None = None, protocol: str = "reset.yaml",
                               run: Callable[[threading.Event], Callable] = scripted_run,
                               ) -> AsyncIterator[tuple[KitApp, Pilot]]:
    """The launcher at `size` with `run(ready)` started on `protocol`, once the run has set `ready`:
    yields (app, pilot)."""
    ready = threading.Event()
    app = launcher_app(caps, run_fn=run(ready), **({"clock": clock} if clock else {}))
    async with app.run_test(size=size) as pilot:
        app.start_run(RunOptions(protocol=str(PROTOCOLS / protocol)))
        await until(pilot, ready.is_set)
        yield app, pilot
