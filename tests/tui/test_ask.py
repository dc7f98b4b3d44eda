"""The launcher's one-question modal (AskScreen) as the replay and watch keys use it: an answer its check
refuses stays on screen with the check's why line, a fixed answer dismisses with the checked value, Esc
dismisses with None."""

from __future__ import annotations

import asyncio
import socket

from textual.app import App
from textual.widgets import Input, Static

from kit.tui.catalog import Capabilities
from kit.tui.screens.replay import ask_for_bundle
from kit.tui.screens.watch import ask_for_engine
from kit.tui.widgets.ask import AskScreen


def _ask(screen: AskScreen, answers: list[str]) -> tuple[list[str], list, type]:
    """Types each answer (Enter after each, Esc when none is left) and returns the why lines shown after
    each refused answer, the values the modal was dismissed with, and the screen left on top."""
    dismissed: list = []

    async def drive():
        app = App()
        whys = []
        async with app.run_test(size=(100, 20)) as pilot:
            await app.push_screen(screen, dismissed.append)
            await pilot.pause()
            for answer in answers:
                screen.query_one("#answer", Input).value = answer
                await pilot.press("enter")
                await pilot.pause()
                if app.screen is screen:
                    whys.append(str(screen.query_one("#why", Static).content))  # as set, unwrapped
            if app.screen is screen:
                await pilot.press("escape")
                await pilot.pause()
            return whys, type(app.screen)

    whys, top = asyncio.run(drive())
    return whys, dismissed, top


def test_the_watch_question_refuses_a_non_http_url_then_takes_the_engines_url():
    whys, dismissed, top = _ask(ask_for_engine(), ["ftp://x", "  http://127.0.0.1:8080  "])
    assert len(whys) == 1 and "'ftp://x' is not an http(s) URL with a host" in whys[0]
    assert "e.g. --upstream http://127.0.0.1:8080" in whys[0]
    assert dismissed == ["http://127.0.0.1:8080"] and not issubclass(top, AskScreen)


def test_the_replay_question_refuses_a_missing_path_then_takes_an_existing_one(tmp_path):
    bundle = tmp_path / "run.tar.gz"
    bundle.write_bytes(b"")
    whys, dismissed, _ = _ask(ask_for_bundle(), ["", str(tmp_path / "nope.tar.gz"), str(bundle)])
    assert whys == [". does not exist", f"{tmp_path / 'nope.tar.gz'} does not exist"]
    assert dismissed == [bundle]


def test_esc_dismisses_with_none_and_a_refused_answer_never_dismisses():
    whys, dismissed, top = _ask(ask_for_engine(), ["not a url"])
    assert len(whys) == 1 and "is not an http(s) URL" in whys[0]
    assert dismissed == [None] and not issubclass(top, AskScreen)


def _failure_shown(screen, outputs) -> tuple[str | None, str]:
    """Runs `screen` (its worker fails at once) on a launcher app; its error and its status line."""
    from kit.tui.app import KitApp
    from tests.tui.conftest import PROTOCOLS, until

    async def drive():
        app = KitApp(caps=Capabilities(()), protocols_folder=PROTOCOLS, outputs=outputs, watch_logs=False)
        async with app.run_test(size=(160, 30)) as pilot:
            await app.push_screen(screen)
            await until(pilot, lambda: screen.error is not None, timeout=60)
            return screen.error, str(screen.query_one("#status", Static).content)

    return asyncio.run(drive())


def test_a_watch_or_replay_that_cannot_start_shows_the_kits_one_line_error(tmp_path):
    from kit.tui.screens.replay import ReplayScreen
    from kit.tui.screens.watch import WatchScreen

    with socket.socket() as closed:  # a port nothing listens on
        closed.bind(("127.0.0.1", 0))
        url = "http://127.0.0.1:%d" % closed.getsockname()[1]
    error, status = _failure_shown(WatchScreen(url, tmp_path / "watch"), tmp_path)
    assert error == f"--upstream {url} does not answer; start the engine first, or fix the URL"
    assert status == f"cannot watch: {error}" and not (tmp_path / "watch").exists()
    not_a_bundle = tmp_path / "notes.txt"
    not_a_bundle.write_text("not a bundle")
    error, status = _failure_shown(ReplayScreen(not_a_bundle, tmp_path / "replays"), tmp_path)
    assert error.startswith(f"{not_a_bundle} is not a gzip file") and "get the bundle again" in error  # its line
    assert status.startswith(f"cannot replay: {not_a_bundle} is not a gzip file")
