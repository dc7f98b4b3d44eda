"""Launcher test helpers: a fixed protocols folder, a settable clock, screen text, and waiting on the app."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual import events
from textual.geometry import Region
from textual.keys import _character_to_key
from textual.widgets import Input

from kit.tui.catalog import EMBEDDED, Capabilities

PROTOCOLS = Path(__file__).resolve().parent / "protocols"


class SetClock:
    """A clock the test moves by hand, so elapsed time and ETA do not depend on the machine."""

    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def cpu_caps() -> Capabilities:
    return Capabilities((EMBEDDED,))


def static_text(screen, selector: str) -> str:
    """The plain text a widget on `screen` shows, line by line, as it is drawn (border and padding included)."""
    widget = screen.query_one(selector)
    lines = widget.render_lines(Region(0, 0, widget.outer_size.width, widget.outer_size.height))
    return "\n".join(strip.text.rstrip() for strip in lines)


async def until(pilot, condition, timeout: float = 240.0, settle: float = 0.0) -> None:
    """Let the app run until `condition()` holds (failing the test after `timeout` seconds), then `settle`
    seconds more (a newly pushed screen finishing its mount before the test reads or leaves it)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the launcher"
        await pilot.pause(0.02)
    if settle:
        await pilot.pause(settle)


async def type_text(pilot, text: str) -> None:
    """Types `text` into the focused widget: a Key event per character, named as Pilot.press names it, all queued in
    order through the app's own key handling, then one wait for the app to go idle (Pilot.press waits twice after
    each key, at least 40 ms: seconds for a temporary path). Where the focused widget is an Input, waits until the
    text is in it."""
    app = pilot.app
    for char in text:
        key = events.Key(_character_to_key(char), char)
        key.set_sender(app)
        app.post_message(key)
    await pilot.pause()
    if isinstance(focused := app.focused, Input):
        await until(pilot, lambda: text in focused.value, timeout=60.0)


async def ask_replay(pilot, app, bundle: Path, build: str = "") -> None:
    """`r` on the picker, `bundle` given, then the llama.cpp build to replay on typed (empty: the paper's) and
    Enter pressed."""
    from kit.tui.widgets.ask import AskScreen  # noqa: PLC0415

    await pilot.press("r")
    await until(pilot, lambda: isinstance(app.screen, AskScreen))
    await pilot.click("#answer")
    await type_text(pilot, str(bundle))
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, AskScreen) and app.screen.prompt.startswith("Replay on"))
    await pilot.click("#answer")
    await type_text(pilot, build)
    await pilot.press("enter")
