"""The launcher draws a stranger's text as written and without control characters: every line passes
PrintableLines, its Rich console is a SafeConsole (kit tables' strings are literal), and a notification
quoting an engine's text never reads it as markup (docs/security.md rule 6)."""

from __future__ import annotations

import asyncio
import re

from rich.segment import Segment
from rich.table import Table
from textual.color import Color
from textual.widgets import Static

from kit.core.events import RunStarted
from kit.core.safe_console import SafeConsole
from kit.core.terminal_text import printable
from kit.tui.app import KitApp, PrintableLines
from kit.run.runner import RunOptions, RunResult
from kit.tui.catalog import Capabilities
from kit.tui.screens.results import ResultsScreen
from tests.adversarial.cases_console import HOSTILE, SHOWN
from tests.tui.conftest import PROTOCOLS, static_text, until
from tests.tui.scripted import PLAN, launcher_app

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def test_every_line_the_launcher_draws_is_made_printable(tmp_path):
    app = KitApp(caps=Capabilities(()), protocols_folder=PROTOCOLS, outputs=tmp_path, watch_logs=False)
    filters = [f for f in app.get_line_filters() if isinstance(f, PrintableLines)]
    assert filters and isinstance(app.console, SafeConsole)
    drawn = filters[0].apply([Segment("engine "), Segment(HOSTILE, None), Segment("\x1b[2J", None)], Color(0, 0, 0))
    assert "".join(s.text for s in drawn) == "engine " + printable(HOSTILE)


def test_a_table_and_a_notification_quoting_hostile_text_show_it_as_written(tmp_path):
    table = Table(title=f"of {HOSTILE}")
    table.add_column("what")
    table.add_row(HOSTILE)

    async def drive():
        app = KitApp(caps=Capabilities(()), protocols_folder=PROTOCOLS, outputs=tmp_path, watch_logs=False)
        async with app.run_test(size=(200, 30)) as pilot:
            widget = Static(table)
            await app.screen.mount(widget)
            app.notify(f"the run failed: {HOSTILE}")  # would raise a MarkupError if read as markup
            await pilot.pause()
            lines = [line.text for line in widget.render_lines(widget.region.reset_offset)]
            return lines, [n.message for n in app._notifications]

    lines, notes = asyncio.run(drive())
    drawn = "\n".join(lines)
    assert "b1-fake[/] [bold red]owned[/] \\[x] :smile:" in drawn and not CONTROL.search(drawn)
    assert notes == [f"the run failed: {HOSTILE}"]


def test_the_live_screen_draws_an_engine_log_s_hostile_line_without_its_controls(cpu_caps, tmp_path):
    """The engine log's tail is written to its RichLog as read; the app cleans it as it is drawn (its SafeConsole
    renders the RichLog's lines, PrintableLines filters every drawn line), no widget cleans it again."""
    run_dir = tmp_path / "reset-1"
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "logs" / "s1.log").write_text(f"loading model\n{HOSTILE}\n", encoding="utf-8")

    def run(options, emit, say):
        emit(RunStarted(run_dir, "reset", PLAN))
        options.stop.wait(30)
        return RunResult(run_dir, "interrupted", "stopped", None)

    async def drive():
        app = launcher_app(cpu_caps, run_fn=run)
        async with app.run_test(size=(200, 30)) as pilot:
            app.start_run(RunOptions(protocol=str(PROTOCOLS / "reset.yaml")))
            await until(pilot, lambda: app.live.state.run_dir == run_dir)
            app.live.show_log()
            await pilot.pause()
            drawn = static_text(app.live, "#log")
            app.live.stop.set()
            # the results screen up and the app idle: the live screen's header has taken its last sub-title
            # (leaving while that update waits made Textual's Header raise NoMatches on a busy machine)
            await until(pilot, lambda: isinstance(app.screen, ResultsScreen))
            await pilot.pause()
            return drawn

    drawn = asyncio.run(drive())
    assert "Engine log (s1.log)" in drawn and "loading model" in drawn
    assert SHOWN.rstrip() in drawn and "red" in drawn and " end" in drawn and not CONTROL.search(drawn)
