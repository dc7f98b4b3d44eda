"""The launcher watches an engine: `w` on the picker asks for its URL, the proxy starts, a call sent through
it shows up with its cache state, and Esc stops the proxy with the run folder finished."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from kit.tui.app import KitApp
from kit.tui.screens.watch import WatchScreen
from kit.tui.widgets.ask import AskScreen
from tests.tui.conftest import PROTOCOLS, static_text, type_text, until

pytestmark = pytest.mark.engine


def test_w_watches_an_engine_and_shows_each_call_with_its_state(cpu_caps, tmp_path, llama_server_url):
    body = {"prompt": "One, two, three,", "n_predict": 4, "temperature": 0, "cache_prompt": False}

    async def drive():
        app = KitApp(caps=cpu_caps, protocols_folder=PROTOCOLS, outputs=tmp_path / "watch")
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("w")
            await until(pilot, lambda: isinstance(app.screen, AskScreen))
            await pilot.click("#answer")
            await type_text(pilot, "ftp://x")
            await pilot.press("enter")
            refused = static_text(app.screen, "#why")
            app.screen.query_one("#answer").value = llama_server_url
            await pilot.press("enter")
            await until(pilot, lambda: isinstance(app.screen, WatchScreen) and app.screen.proxy_url is not None)
            screen = app.screen
            answer = await asyncio.to_thread(httpx.post, screen.proxy_url + "/completion", json=body, timeout=120)
            await until(pilot, lambda: screen.calls == 1)
            calls = static_text(screen, "#calls")
            await pilot.press("escape")
            await until(pilot, lambda: screen.ended or screen.error is not None)
            return refused, answer, calls, screen

    refused, answer, calls, screen = asyncio.run(drive())
    assert "is not an http(s) URL" in refused
    assert answer.status_code == 200 and "full_eval" in calls and "/completion" in calls
    assert screen.error is None
    manifest = json.loads((screen.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "finished" and manifest["passes"]["calls-0001"]["records"] == 1
