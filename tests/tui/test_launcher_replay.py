"""The launcher replays a bundle: `r` on the picker asks for it, the replay runs on the real engine and
the comparison fills in request by request, then the summary matches `kit replay`'s."""

from __future__ import annotations

import asyncio

import pytest

from kit.tui.app import KitApp
from kit.tui.screens.replay import ReplayScreen
from kit.tui.widgets.ask import AskScreen
from tests.tui.conftest import PROTOCOLS, static_text, type_text, until

pytestmark = pytest.mark.engine


def test_r_replays_a_bundle_and_the_comparison_fills_in(cpu_caps, tmp_path, shared_demo_bundle):
    bundle = shared_demo_bundle.path  # the session's demo bundle (tests/shared_runs.py): 2 items x 2 sessions

    async def drive():
        app = KitApp(caps=cpu_caps, protocols_folder=PROTOCOLS, outputs=tmp_path / "replays")
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("r")
            await until(pilot, lambda: isinstance(app.screen, AskScreen))
            await pilot.click("#answer")
            await type_text(pilot, str(bundle))
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, ReplayScreen))
            screen = app.screen
            await until(pilot, lambda: screen.done is not None or screen.error is not None)
            await pilot.pause()
            return screen, static_text(screen, "#status"), static_text(screen, "#passes")

    screen, status, passes = asyncio.run(drive())
    assert screen.error is None, screen.error
    (done,) = screen.done
    assert "16/16 requests byte-identical; every verdict identical" in status
    assert done.comparison.requests == (16, 16)
    (follower,) = screen.followers  # the live view compared every request as it came in
    assert {p: (s.replayed, s.identical) for p, s in follower.passes.items()} == {"s1": (8, 8), "s2": (8, 8)}
    assert "8/8" in passes and "none so far" in passes
