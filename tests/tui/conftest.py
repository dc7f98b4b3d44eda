"""Launcher test helpers: a fixed protocols folder, a settable clock, and screen text."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

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


def static_text(screen, selector: str, width: int = 120) -> str:
    """The plain text a Static on `screen` shows."""
    console = Console(width=width, record=True, file=open("/dev/null", "w"), color_system=None)  # noqa: SIM115
    console.print(screen.query_one(selector).visual)
    return console.export_text()
