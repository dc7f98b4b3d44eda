"""Quitting during a run stops it cleanly first: the stop is asked for, the run ends, then the app exits.
The run here is the scripted event sequence of tests/tui/scripted.py (the screen is a view of events)."""

from __future__ import annotations

import asyncio

from tests.tui.conftest import until
from tests.tui.scripted import scripted_run_started


def test_ctrl_q_during_a_run_stops_it_then_exits(cpu_caps):
    async def drive():
        async with scripted_run_started(cpu_caps, size=(80, 24)) as (app, pilot):
            live = app.live
            assert not live.stop.is_set()
            await pilot.press("ctrl+q")
            assert live.stop.is_set()  # asked to stop; the app waits for the run to end
            await until(pilot, lambda: app.return_value is not None)
        return app.return_value, live

    result, live = asyncio.run(drive())
    assert result is not None and result.status == "interrupted"
    assert live.state.ended is not None and live.state.ended.status == "interrupted"
