"""Snapshots (pytest-textual-snapshot) of the picker, the live screen mid-run and the results screen.

Nothing in them depends on timing or paths: the clock is set by hand, the run folder is a fixed
/runs/... path, and the live screen is fed the scripted sequence of the runner's own event types of
tests/tui/scripted.py (the screen is a view of events; the real engine runs in test_launcher_run.py). Update with
`pytest tests/tui/test_snapshots.py --snapshot-update` after checking the SVGs by eye.
"""

from __future__ import annotations

import threading
from pathlib import Path

from textual.widgets import Input, Select

from kit.app.doctor import DOCKER_WAY
from kit.core.paths import protocols_dir
from kit.protocols.kinds import KINDS
from kit.run.runner import RunOptions, RunResult
from kit.tui.app import KitApp
from kit.tui.catalog import EMBEDDED, Capabilities, entry
from tests.tui.conftest import PROTOCOLS, SetClock
from tests.tui.scripted import RESET_TABLE, RUN_DIR, launcher_app, scripted_run


def test_picker_at_80x24(snap_compare, cpu_caps):
    assert snap_compare(launcher_app(cpu_caps), press=["down"], terminal_size=(80, 24))


def test_picker_in_a_large_terminal(snap_compare, cpu_caps):
    assert snap_compare(launcher_app(cpu_caps), terminal_size=(140, 45))


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

    app = launcher_app(cpu_caps, run_fn=scripted_run(ready), clock=clock)
    assert snap_compare(app, terminal_size=(80, 24), run_before=mid_run)


def test_results_screen(snap_compare, cpu_caps):
    async def show(pilot):
        pilot.app.show_results(RunResult(RUN_DIR, "finished", None, RESET_TABLE))
        await pilot.pause()

    assert snap_compare(launcher_app(cpu_caps), terminal_size=(80, 24), run_before=show)


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
