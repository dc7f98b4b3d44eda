"""Quitting during a run stops it cleanly first: the stop is asked for, the run ends, then the app exits.
The run here is the scripted event sequence of test_snapshots (the screen is a view of events)."""

from __future__ import annotations

import asyncio
import threading

from kit.run.runner import RunOptions
from tests.tui.conftest import PROTOCOLS
from tests.tui.test_snapshots import _app, scripted_run


def test_ctrl_q_during_a_run_stops_it_then_exits(cpu_caps):
    ready = threading.Event()

    async def drive():
        app = _app(cpu_caps, run_fn=scripted_run(ready))
        async with app.run_test(size=(80, 24)) as pilot:
            app.start_run(RunOptions(protocol=str(PROTOCOLS / "reset.yaml")))
            while not ready.is_set():
                await pilot.pause(0.05)
            live = app.live
            assert not live.stop.is_set()
            await pilot.press("ctrl+q")
            assert live.stop.is_set()  # asked to stop; the app waits for the run to end
            for _ in range(100):
                if app.return_value is not None:
                    break
                await pilot.pause(0.05)
        return app.return_value, live

    result, live = asyncio.run(drive())
    assert result is not None and result.status == "interrupted"
    assert live.state.ended is not None and live.state.ended.status == "interrupted"
