"""The launcher asks before a run past an hour on the CPU engine (kit.run.long_runs): Start opens a question
naming the estimate and the CPU-sized protocol beside the file; any answer but yes stays, Esc goes back to the
form with nothing started, yes starts the run. A short setup starts at once. No engine: start_run is recorded."""

from __future__ import annotations

import asyncio

import yaml
from textual.widgets import Input, Static

from kit.tui.app import KitApp
from kit.tui.screens.setup import SetupScreen
from kit.tui.widgets.ask import AskScreen
from tests.tui.conftest import PROTOCOLS


def _folder(tmp_path, items: int):
    folder = tmp_path / "protocols"
    folder.mkdir()
    data = yaml.safe_load((PROTOCOLS / "reset.yaml").read_text())
    (folder / "reset.yaml").write_text(yaml.safe_dump({**data, "workload": {**data["workload"], "items": items},
                                                       "max_tokens": 1024}))
    (folder / "reset-cpu.yaml").write_text(yaml.safe_dump(data))
    return folder


def _start(cpu_caps, tmp_path, items: int, answers: list[str]):
    """Opens reset, presses Start, types each answer (Enter after each); Esc when the answers run out and the
    question is still open. Returns the question's text and why lines, the options started, the screen left."""
    started: list = []

    async def drive():
        app = KitApp(caps=cpu_caps, protocols_folder=_folder(tmp_path, items), outputs=tmp_path / "out",
                     watch_logs=False)
        app.start_run = started.append
        shown, whys = None, []
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            picker = app.screen
            while picker.current().name != "reset":
                await pilot.press("down")
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, SetupScreen)
            await pilot.press("ctrl+r")
            await pilot.pause()
            if isinstance(app.screen, AskScreen):
                question = app.screen
                shown = str(question.query(Static).first().content)
                for answer in answers:
                    question.query_one("#answer", Input).value = answer
                    await pilot.press("enter")
                    await pilot.pause()
                    if app.screen is question:
                        whys.append(str(question.query_one("#why", Static).content))
                if app.screen is question:
                    await pilot.press("escape")
                    await pilot.pause()
            return shown, whys, started, type(app.screen)

    return asyncio.run(drive())


def test_a_long_setup_asks_first_and_starts_only_on_yes(cpu_caps, tmp_path):
    shown, whys, started, _ = _start(cpu_caps, tmp_path, 2000, ["no", "yes"])
    assert shown.startswith("reset would take about ") and "on this machine's CPU engine (16000 requests)" in shown
    assert "run reset-cpu instead, sized for a CPU (16 requests, about" in shown and "type yes to start it" in shown
    assert whys == ["type yes to start it, or press Esc to go back to the form"]
    (options,) = started
    assert options.protocol.endswith("reset.yaml") and options.overrides == {} and options.confirmed


def test_esc_goes_back_to_the_form_with_nothing_started(cpu_caps, tmp_path):
    shown, _, started, screen = _start(cpu_caps, tmp_path, 2000, [])
    assert shown is not None and started == [] and screen is SetupScreen


def test_a_short_setup_starts_without_a_question(cpu_caps, tmp_path):
    shown, _, started, _ = _start(cpu_caps, tmp_path, 2, [])
    assert shown is None and len(started) == 1
