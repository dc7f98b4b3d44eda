"""The launcher driven with Textual's Pilot, no engine: the picker refuses protocols it cannot run, and
the setup form refuses an invalid URL or model path inline, with the reason under the field."""

from __future__ import annotations

import asyncio

from textual.widgets import Button, Input, OptionList, Select

from kit.app.doctor import DOCKER_WAY
from kit.core.errors import KitError
from kit.core.paths import protocols_dir
from kit.protocols.kinds import KINDS
from kit.tui import form
from kit.tui.app import KitApp
from kit.tui.catalog import EMBEDDED, NOT_PROVEN, Capabilities, entry
from kit.tui.screens.picker import PickerScreen
from kit.tui.screens.setup import SetupScreen
from tests.tui.conftest import PROTOCOLS, static_text, type_text


def _app(caps, tmp_path) -> KitApp:
    return KitApp(caps=caps, protocols_folder=PROTOCOLS, outputs=tmp_path, watch_logs=False)


def test_a_protocol_of_a_kind_the_kit_cannot_run_is_shown_explained_and_not_started(cpu_caps, tmp_path):
    async def drive():
        app = _app(cpu_caps, tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            await pilot.press("down", "down")  # grid-cpu, reset, batch
            screen = app.screen
            assert screen.current().name == "batch"
            assert "not available yet" in static_text(screen, "#detail")
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, PickerScreen)  # not started
            await pilot.press("up")
            assert screen.current().name == "reset"
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, SetupScreen) and app.screen.entry.name == "reset"

    asyncio.run(drive())


def test_an_invalid_url_is_refused_inline_with_an_explanation(cpu_caps, tmp_path):
    async def drive():
        app = _app(cpu_caps, tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("down", "enter")  # grid-cpu, reset
            await pilot.pause()
            assert app.screen.entry.name == "reset"
            screen = app.screen
            assert app.focused is screen.query_one("#f-engine", Select)
            await pilot.press("enter")  # open the engine list
            await pilot.press(*["down"] * (len(form.ENGINES) - 1), "enter")  # "my own endpoint", the last choice
            await pilot.pause()
            assert screen.setup.engine == "endpoint"
            assert screen.query_one("#w-url").display and not screen.query_one("#w-model").display
            screen.query_one("#f-url", Input).focus()
            await type_text(pilot, "localhost:8080")
            await pilot.pause()
            assert "not an http(s) URL" in static_text(screen, "#p-url")
            assert screen.query_one("#start", Button).disabled
            await pilot.press("ctrl+r")
            await pilot.pause()
            assert app.screen is screen and app.live is None  # refused: no run started
            await pilot.press("ctrl+u")
            await type_text(pilot, "http://127.0.0.1:8080")
            await pilot.pause()
            assert static_text(screen, "#p-url").strip() == ""
            assert not screen.query_one("#start", Button).disabled

    asyncio.run(drive())


def test_an_invalid_model_path_is_refused_inline_with_an_explanation(cpu_caps, tmp_path, monkeypatch):
    not_gguf = tmp_path / "weights.gguf"
    not_gguf.write_text("these are not weights")
    monkeypatch.chdir(tmp_path)  # paths typed relative to it: a few keys each, not a long temporary path's

    async def drive():
        app = _app(cpu_caps, tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("down", "enter")
            await pilot.pause()
            screen = app.screen
            await pilot.press("tab", "tab", "tab")  # engine -> CPU backend -> engine build -> model
            assert app.focused is screen.query_one("#f-model", Input)
            await type_text(pilot, "./nowhere.gguf")
            await pilot.pause()
            assert "no file at" in static_text(screen, "#p-model")
            assert screen.query_one("#start", Button).disabled
            await pilot.press("ctrl+u")
            await type_text(pilot, f"./{not_gguf.name}")
            await pilot.pause()
            assert "is not a GGUF file" in static_text(screen, "#p-model")
            await pilot.press("ctrl+r")
            await pilot.pause()
            assert app.screen is screen and app.live is None

    asyncio.run(drive())


def test_every_protocol_file_is_visible_at_120x40_without_scrolling(cpu_caps, tmp_path):
    names = sorted(path.stem for path in protocols_dir().glob("*.yaml"))

    async def drive():
        app = KitApp(caps=cpu_caps, outputs=tmp_path, watch_logs=False)  # the kit's own protocols/
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            options = app.screen.query_one("#protocols", OptionList)
            assert options.option_count == len(names) >= 13
            assert app.screen.region.contains_region(options.region)
            assert options.max_scroll_y == 0 and options.scroll_y == 0
            shown = static_text(app.screen, "#protocols").splitlines()
            return [next((row for row in shown if row.strip("│ ").split()[:1] == [name]), None) for name in names]

    rows = asyncio.run(drive())
    assert all(rows), dict(zip(names, rows))


def test_the_cpu_backend_is_chosen_for_the_embedded_engine_only(cpu_caps, tmp_path):
    async def drive():
        app = _app(cpu_caps, tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("down", "enter")  # reset
            await pilot.pause()
            screen = app.screen
            assert screen.query_one("#w-cpu_backend").display and screen.setup.cpu_backend == "auto"
            await pilot.press("tab", "enter")  # open the CPU backend list: auto, wheel, portable
            await pilot.press("down", "down", "enter")
            await pilot.pause()
            chosen = form.run_options(screen.setup).cpu_backend
            screen.query_one("#f-engine", Select).value = "endpoint"
            await pilot.pause()
            return chosen, screen.query_one("#w-cpu_backend").display, form.run_options(screen.setup).cpu_backend

    chosen, shown_for_endpoint, endpoint_backend = asyncio.run(drive())
    assert chosen == "portable"
    assert not shown_for_endpoint and endpoint_backend == "auto"


def test_an_unproven_embedded_engine_leaves_only_the_endpoint_and_says_why(tmp_path):
    caps = Capabilities((), why_not={EMBEDDED: NOT_PROVEN})

    async def drive():
        app = _app(caps, tmp_path)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            picker = app.screen
            assert "endpoint URL only" in static_text(picker, "#protocols")
            assert NOT_PROVEN in static_text(picker, "#detail").replace("\n", " ")
            await pilot.press("down", "enter")  # reset: startable with an endpoint URL
            await pilot.pause()
            return app.screen.setup.engine, static_text(app.screen, "#p-engine")

    engine, problem = asyncio.run(drive())
    assert engine == "endpoint" and problem.strip() == ""  # the form starts on the one engine it can use


def test_a_vllm_endpoint_asks_for_a_server_per_cache_arm_and_refuses_the_same_one_twice(tmp_path):
    caps = Capabilities((EMBEDDED, DOCKER_WAY))
    started = []

    def run_fn(options, emit, say):
        started.append(options)
        raise KitError("stopped by the test")

    async def drive():
        app = KitApp(caps=caps, run_fn=run_fn, outputs=tmp_path, watch_logs=False)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.pause()
            app.open_setup(entry(protocols_dir() / "grid-vllm.yaml", KINDS, caps))
            await pilot.pause()
            screen = app.screen
            screen.query_one("#f-engine", Select).value = "vllm-container"
            await pilot.pause()
            shown = {name: screen.query_one(f"#w-{name}").display for name in ("model", "url", "url_on", "url_off")}
            hint = screen.query_one("#f-model", Input).placeholder
            screen.query_one("#f-engine", Select).value = "endpoint"
            screen.query_one("#f-endpoint_kind", Select).value = "vllm"
            await pilot.pause()
            assert screen.query_one("#w-url_on").display and screen.query_one("#w-url_off").display
            assert not screen.query_one("#w-url").display and not screen.query_one("#w-model").display
            assert "--enable-prefix-caching" in static_text(screen, "#p-url_on")
            screen.query_one("#f-url_on", Input).focus()
            await type_text(pilot, "http://127.0.0.1:8001")
            await pilot.press("tab")
            await type_text(pilot, "http://127.0.0.1:8001")
            await pilot.pause()
            same = static_text(screen, "#p-url_off").replace("\n", " ")
            refused = screen.query_one("#start", Button).disabled
            await pilot.press("backspace", "2")
            await pilot.pause()
            assert static_text(screen, "#p-url_off").strip() == ""
            await pilot.press("ctrl+r")
            await pilot.pause()
            return shown, hint, same, refused

    shown, hint, same, refused = asyncio.run(drive())
    assert shown == {"model": True, "url": False, "url_on": False, "url_off": False}
    assert hint.startswith("vLLM checkpoint") and "qwen2.5-7b-instruct" in hint
    assert "cache-on server again" in same and refused
    [options] = started
    assert options.engine == "vllm" and options.engine_urls == {"on": "http://127.0.0.1:8001",
                                                                "off": "http://127.0.0.1:8002"}


def test_a_vllm_choice_for_a_shared_server_grid_says_which_protocols_to_pick(tmp_path):
    caps = Capabilities((EMBEDDED, DOCKER_WAY))

    async def drive():
        app = KitApp(caps=caps, protocols_folder=PROTOCOLS, outputs=tmp_path, watch_logs=False)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("enter")  # grid-cpu: server: shared
            await pilot.pause()
            screen = app.screen
            screen.query_one("#f-engine", Select).value = "vllm-container"
            await pilot.pause()
            return static_text(screen, "#p-engine").replace("\n", " "), screen.query_one("#start", Button).disabled

    line, refused = asyncio.run(drive())
    assert "server: shared" in line and "grid-vllm" in line and "grid-vllm-fresh" in line and refused
