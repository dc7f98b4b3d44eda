"""Launcher test helpers: a fixed protocols folder, a settable clock, and screen text."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.geometry import Region

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
