"""A run that has finished in the launcher: its elapsed time stops where the run ended, Esc leaves the
finished run screen for the picker, and the picker's footer lists every key its help names (`w` included)."""

from __future__ import annotations

import asyncio
import re

from textual.widgets._footer import FooterKey

from kit.run.runner import RunResult
from kit.tui.screens.help import HELP
from kit.tui.screens.live import LiveScreen
from kit.tui.screens.picker import PickerScreen
from kit.tui.screens.results import ResultsScreen
from tests.tui.conftest import SetClock, static_text, until
from tests.tui.scripted import RESET_TABLE, RUN_DIR, launcher_app, scripted_run_started


def footer_keys(screen) -> list[tuple[str, str]]:
    """(key, description) of each key the screen's footer shows, as drawn."""
    return [(key.key_display, key.description) for key in screen.query(FooterKey)]


def test_elapsed_stops_when_the_run_ends_and_esc_goes_back_to_the_picker(cpu_caps):
    clock = SetClock()

    async def drive():
        async with scripted_run_started(cpu_caps, clock=clock) as (app, pilot):
            live = app.live
            clock.now += 95.0
            live.render_numbers()
            running = static_text(live, "#stage").strip()
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ResultsScreen))
            clock.now += 600.0  # ten minutes after the end: the counter must not move
            live.render_numbers()  # as the screen's one-second timer does (no wait for its tick)
            ended = static_text(live, "#stage").strip()
            await pilot.press("escape")  # the results screen: back to the finished run
            await until(pilot, lambda: isinstance(app.screen, LiveScreen))
            back_on_live = app.screen is live
            footer = footer_keys(live)
            await pilot.press("escape")  # the finished run screen: back to the picker
            await until(pilot, lambda: isinstance(app.screen, PickerScreen))
            return running, ended, back_on_live, footer, app.live

    running, ended, back_on_live, footer, live_after = asyncio.run(drive())
    assert running.startswith("elapsed 1:35 ·")
    assert ended.startswith("elapsed 1:35 ·") and "interrupted" in ended
    assert back_on_live and ("esc", "Back") in footer
    assert live_after is None


def test_esc_does_nothing_while_the_run_is_still_going(cpu_caps):
    async def drive():
        async with scripted_run_started(cpu_caps) as (app, pilot):
            await pilot.press("escape")
            await pilot.pause()  # the key handled: the app idle again
            still = app.screen is app.live
            await pilot.press("s")
            await until(pilot, lambda: isinstance(app.screen, ResultsScreen))
            return still

    assert asyncio.run(drive()) is True


def test_the_picker_footer_shows_every_key_its_help_lists(cpu_caps):
    async def drive():
        app = launcher_app(cpu_caps)
        async with app.run_test(size=(160, 30)) as pilot:
            await pilot.pause()
            return footer_keys(app.screen)

    footer = asyncio.run(drive())
    picker_keys = re.findall(r"^\| picker \| `(\w)` \|", HELP, re.M)
    assert picker_keys == ["d", "r", "w"]
    for key, label in (("d", "Machine"), ("r", "Replay"), ("w", "Watch"), ("q", "Quit")):
        assert (key, label) in footer, footer
    assert "| live run | `esc` | back to the picker (once the run has ended) |" in HELP


def test_a_finished_run_s_results_say_whether_the_paper_s_findings_hold(cpu_caps):
    async def drive():
        app = launcher_app(cpu_caps)
        async with app.run_test(size=(100, 60)) as pilot:
            app.show_results(RunResult(RUN_DIR, "finished", None, RESET_TABLE))
            await pilot.pause()
            return " ".join(static_text(app.screen, "#table").split())

    text = asyncio.run(drive())
    # RESET_TABLE: s1's cache-hit path reproduced 11 of 12 items, so two of the paper's four findings fail
    assert "Table IV, each path reproduces itself: does not hold (this run: recompute s1 12/12, s2 12/12, " \
           "cache hit s1 11/12, s2 12/12)" in text
    assert "qualitative: 1 of the paper's 4 measured findings hold on this run (4 claims measured: Table IV 1/4)" \
        in text
