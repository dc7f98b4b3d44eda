"""The launcher's replay asks for the llama.cpp build to replay on with the setup form's engine build checks
(kit.tui.form.build_made_here): the builds made here offered, a build not made here or not a build number
refused inline with the line `kit replay --engine-build` gives, Esc leaving without a replay. No engine:
nothing is replayed (the replay itself, on a real build: tests/tui/test_launcher_replay.py)."""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets import Input

from kit.tui.app import KitApp
from kit.tui.screens.replay import ReplayScreen
from kit.tui.widgets.ask import AskScreen
from tests.launch.test_llamacpp_build import _built
from tests.tui.conftest import PROTOCOLS, ask_replay, static_text, type_text


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_replay_asks_for_a_build_made_here_and_refuses_others_inline(cpu_caps, cache, tmp_path):
    _built(cache, 11434)
    bundle = tmp_path / "demo.tar.gz"
    bundle.write_bytes(b"not read before the build is chosen")
    said: dict[str, str] = {}

    async def answer(pilot, app, text: str, key: str) -> None:
        app.screen.query_one("#answer", Input).value = ""
        await pilot.click("#answer")
        await type_text(pilot, text)
        await pilot.press("enter")
        await pilot.pause()
        said[key] = " ".join(static_text(app.screen, "#why").split())  # as one line, however it wraps

    async def drive():
        app = KitApp(caps=cpu_caps, protocols_folder=PROTOCOLS, outputs=tmp_path / "replays")
        async with app.run_test(size=(120, 40)) as pilot:
            await ask_replay(pilot, app, bundle, "11435")
            await pilot.pause()
            said["not built"] = " ".join(static_text(app.screen, "#why").split())
            said["placeholder"] = app.screen.query_one("#answer", Input).placeholder
            await answer(pilot, app, "b11434", "not a number")
            asking = isinstance(app.screen, AskScreen)
            await pilot.press("escape")
            await pilot.pause()
            return asking, app.screen

    asking, last = asyncio.run(drive())
    assert "built here: 11434" in said["placeholder"] and "empty: the paper's" in said["placeholder"]
    assert "llama.cpp build 11435 (portable CPU backend) is not built here" in said["not built"]
    assert "kit engines build llamacpp --build 11435" in said["not built"]
    assert "'b11434' is not a llama.cpp build number" in said["not a number"]
    assert asking and not isinstance(last, (AskScreen, ReplayScreen))  # refused inline; Esc replays nothing
    assert not (tmp_path / "replays").exists()
