"""The run's console reporter redraws its progress bar only where a bar is drawn: on a terminal, ten times a
second; printing to a file, a pipe or a CI log it starts no redrawing thread (a transient bar is never drawn
there, and each redraw built the bar's table all the same), and what it prints is unchanged."""

from __future__ import annotations

import io
import threading
from pathlib import Path

from rich.live import _RefreshThread

from kit.app.console import ConsoleReporter
from kit.core.events import ItemVerdict, RequestDone, RunEnded, RunStarted, SessionEnded, SessionStarted
from kit.core.safe_console import SafeConsole

RUN_DIR = Path("/runs/reset-20260101-000000")
EVENTS = [RunStarted(RUN_DIR, "reset", {"sessions": 1, "items": 1, "requests": 2}),
          SessionStarted("s1", 1, 1, {"build_info": "b1-7e4c0a9"}),
          RequestDone("s1", "item-1", "cold", 1, 0, 12.5, True), RequestDone("s1", "item-1", "warm", 2, 40, 1.5, True),
          ItemVerdict("s1", "item-1", 1, 1, True, True, False, None), SessionEnded("s1", "OK", None),
          RunEnded(RUN_DIR, "finished", None)]


def _redrawing() -> bool:
    """Whether a bar's redrawing thread runs (one told to stop may not have ended yet)."""
    return any(isinstance(thread, _RefreshThread) and not thread.done.is_set() for thread in threading.enumerate())


def _printed(reporter: ConsoleReporter, out: io.StringIO) -> tuple[str, list[bool]]:
    """What the reporter printed for EVENTS, and whether a redrawing thread ran after each event."""
    running = []
    for event in EVENTS:
        reporter(event)
        running.append(_redrawing())
    return out.getvalue(), running


def test_a_reporter_printing_to_a_file_starts_no_redrawing_thread_and_prints_the_same_lines():
    out = io.StringIO()
    text, running = _printed(ConsoleReporter(SafeConsole(file=out, width=200, color_system=None)), out)
    assert not any(running)
    # the same events with the bar redrawn as on a terminal, still printing to a file: the same text
    redrawn_out = io.StringIO()
    redrawn = ConsoleReporter(SafeConsole(file=redrawn_out, width=200, color_system=None))
    redrawn.progress.live.auto_refresh = True
    redrawn_text, redrawn_running = _printed(redrawn, redrawn_out)
    assert redrawn_running[0] and not redrawn_running[-1]  # it ran from the run's start to its end
    assert text == redrawn_text and "s1 1/1 item-1: recompute" in text


def test_on_a_terminal_the_bar_is_redrawn_while_the_run_goes_on():
    out = io.StringIO()
    reporter = ConsoleReporter(SafeConsole(file=out, width=200, color_system=None, force_terminal=True))
    reporter(EVENTS[0])
    try:
        assert _redrawing()
    finally:
        reporter.close()
    assert not _redrawing()
