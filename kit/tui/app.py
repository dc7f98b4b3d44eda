"""The launcher app: picker → setup → live run → results. A thin shell over the runner (which never
imports Textual), the doctor's checks and the result tables the CLI prints."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from rich.segment import Segment
from textual.app import App
from textual.binding import Binding, BindingType
from textual.color import Color
from textual.filter import LineFilter

from kit.core.paths import outputs_dir
from kit.core.safe_console import SafeConsole, printable_segments
from kit.tui.catalog import EMBEDDED, Capabilities, Entry, machine_capabilities
from kit.tui.screens.help import HelpScreen
from kit.tui.screens.live import LiveScreen
from kit.tui.screens.picker import PickerScreen
from kit.tui.screens.replay import EngineBuild, ReplayScreen, ask_for_build, ask_for_bundle
from kit.tui.screens.results import ResultsScreen
from kit.tui.screens.setup import SetupScreen

DEFAULT_THEME = "ansi-dark"  # the terminal's own palette and background


class PrintableLines(LineFilter):
    """Every line the launcher draws, made printable (kit.core.terminal_text): Textual draws Rich Text and
    its own Content without a console, so this is where no control character of an engine's, a file's or a
    run's text reaches the terminal, whichever widget shows it."""

    def apply(self, segments: list[Segment], background: Color) -> list[Segment]:
        return list(printable_segments(segments))


class KitApp(App):
    """The launcher. Tests pass `caps` (skip the doctor), `clock`, `run_fn` and folders. Its Rich console is a
    SafeConsole (strings in the kit's tables are literal text), its notifications never read markup, and
    every line it draws passes PrintableLines."""

    TITLE = "kit"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("question_mark", "help", "Help", show=False),
                                             Binding("ctrl+q", "quit", "Quit", show=False, priority=True)]

    def __init__(self, caps: Capabilities | None = None, run_fn: Callable | None = None,
                 clock: Callable[[], float] = time.monotonic, protocols_folder: Path | None = None,
                 outputs: Path | None = None, watch_logs: bool = True):
        super().__init__()
        SafeConsole.adopt(self.console)
        self._printable = PrintableLines()
        self.caps = caps or Capabilities((), checked=False)
        self._look = caps is None
        self.run_fn = run_fn
        self.clock = clock
        self.protocols_folder = protocols_folder
        self.outputs = outputs or outputs_dir()
        self.watch_logs = watch_logs
        self.live: LiveScreen | None = None
        self.quit_after_run = False

    def get_line_filters(self):
        return [*super().get_line_filters(), self._printable]

    def notify(self, message: str, *, title: str = "", severity="information", timeout: float | None = None,
               markup: bool = False) -> None:
        """A notification, its text always literal (it often quotes an error, a path or an engine)."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    def on_mount(self) -> None:
        self.theme = os.environ.get("KIT_TUI_THEME", DEFAULT_THEME)
        self.push_screen(PickerScreen(self.caps))
        if self._look:
            self.run_worker(self._look_at_machine, thread=True, group="doctor")

    def _look_at_machine(self) -> None:
        """The doctor's checks, the embedded engine proven (its kept proof, else one short completion now)."""
        try:
            caps = machine_capabilities()
        except Exception as exc:  # noqa: BLE001 - the picker still works; say why it could not look
            self.call_from_thread(self.notify, f"could not check this machine: {exc}", severity="warning")
            caps = Capabilities((), why_not={EMBEDDED: f"could not check this machine: {exc}"})
        self.call_from_thread(self.set_capabilities, caps)

    def set_capabilities(self, caps: Capabilities) -> None:
        self.caps = caps
        for screen in self.screen_stack:
            if isinstance(screen, PickerScreen):
                screen.set_capabilities(caps)

    # -- navigation ------------------------------------------------------------------------

    def open_setup(self, entry: Entry) -> None:
        self.push_screen(SetupScreen(entry, self.outputs, self.caps))

    def start_run(self, options) -> None:
        if self.run_fn is None:
            from kit.run.runner import run  # noqa: PLC0415 - the launcher opens before the run machinery loads

            self.run_fn = run
        self.live = LiveScreen(options, self.run_fn, self.clock, self.watch_logs)
        self.push_screen(self.live)

    def action_open_replay(self) -> None:
        """Ask for a bundle (or run folder) and the llama.cpp build to replay on, then replay it and watch the
        comparison fill in."""
        def opened(path: Path | None) -> None:
            if path is not None:
                self.push_screen(ask_for_build(), lambda build: on_build(path, build))

        def on_build(path: Path, build: EngineBuild | None) -> None:
            if build is not None:
                self.push_screen(ReplayScreen(path, self.outputs, engine_build=build.number))

        self.push_screen(ask_for_bundle(), opened)

    def action_open_watch(self) -> None:
        """Ask for an engine's URL, then proxy it and show its calls' cache states (kit watch)."""
        from kit.tui.screens.watch import WatchScreen, ask_for_engine  # noqa: PLC0415

        def opened(url: str | None) -> None:
            if url is not None:
                self.push_screen(WatchScreen(url, self.outputs))

        self.push_screen(ask_for_engine(), opened)

    def show_results(self, result) -> None:
        if self.quit_after_run:
            self.exit(result)
            return
        self.push_screen(ResultsScreen(result))

    def back_to_picker(self) -> None:
        while len(self.screen_stack) > 2:
            self.pop_screen()
        self.live = None

    def running(self) -> bool:
        return self.live is not None and not self.live.finished

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    async def action_quit(self) -> None:
        if self.live is not None and self.running():
            self.quit_after_run = True
            self.live.action_stop()
            self.notify("quitting once the run has stopped cleanly", title="Quit")
            return
        self.exit()


def main() -> None:
    """`kit` with no arguments in a terminal."""
    KitApp().run()
