"""Results screen: the summary tables (as `kit run` prints them), a terminal plot of divergence with
intervals, the run folder and bundle paths, and keys to open the results folder or copy its path."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from kit.app.console import qualitative_lines, read_results, results_note, results_view
from kit.core.paths import RunPaths, shown_path
from kit.core.terminal_text import one_line
from kit.tui.widgets.divergence_plot import plot
from kit.tui.launcher_app import launcher

OPEN_WAIT_S = 5  # xdg-open hands the folder to the file manager and exits; its exit status says if it could
STATUS_STYLE = {"finished": "green", "interrupted": "yellow", "failed": "red"}


def opener(environ: Mapping[str, str] | None = None) -> list[str] | None:
    """The desktop's "open this" command, if this machine has one and a display to show it on (a Linux
    session without DISPLAY or WAYLAND_DISPLAY, e.g. over SSH, has none: xdg-open would only fail)."""
    environ = os.environ if environ is None else environ
    if sys.platform != "darwin" and not (environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY")):
        return None
    for name in (("open",) if sys.platform == "darwin" else ("xdg-open", "gio")):
        found = shutil.which(name)
        if found:
            return [found, "open"] if name == "gio" else [found]
    return None


def bundle_of(run_dir: Path) -> Path | None:
    """The bundle the run ended with (bundles/ beside its folder, where `kit run` and the launcher write it)."""
    from kit.bundle.writer import default_path  # noqa: PLC0415

    found = default_path([run_dir])
    return found if found.is_file() else None


class ResultsScreen(Screen):
    """Shows one finished (or stopped) run."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("o", "open_folder", "Open results"), Binding("c", "copy_path", "Copy path"),
                Binding("n", "new_run", "New run"), Binding("escape", "app.pop_screen", "Back"),
                Binding("question_mark", "app.help", "Help"), Binding("q", "app.quit", "Quit")]
    DEFAULT_CSS = """
    ResultsScreen VerticalScroll { padding: 0 1; }
    ResultsScreen Static { margin-bottom: 1; }
    """

    def __init__(self, result):
        super().__init__()
        self.result = result
        self.typed = read_results(result.table)  # parsed once, by the model of the kind that wrote it
        # set before mounting: the Header reads them once it has mounted its parts
        self.title, self.sub_title = "kit", f"results of {self.result.run_dir.name}"

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll():
            yield Static(id="status")
            yield Static(id="table")
            yield Static(id="plot")
            yield Static(id="paths")
        yield Footer()

    def on_mount(self) -> None:
        result = self.result
        status = Text("run ")
        status.append(result.status, style=f"bold {STATUS_STYLE.get(result.status, '')}")
        if result.reason:
            status.append(f": {one_line(result.reason)}")  # reasons may quote an engine's answer
        typed = self.typed
        for name, ended, reason in typed.not_ok() if typed is not None else []:
            status.append("\n" + one_line(f"{name} {ended}: {reason}"), style="red")
        if result.status == "interrupted":
            status.append("\nThe records written so far are complete; the counts below cover them only.",
                          style="dim")
        self.query_one("#status", Static).update(status)
        view = results_view(typed)
        note = results_note(result.run_dir, typed) if result.run_dir.is_dir() else None
        shown = view if view is not None else Text("no result table", style="dim")
        parts = [shown] + ([Text(note, style="dim")] if note is not None else [])
        if result.status == "finished":  # as `kit run` ends: do the paper's qualitative findings hold here
            parts += [Text(one_line(line), style="bold" if line.startswith("qualitative:") else "")
                      for line in qualitative_lines(result.run_dir, result.table)]
        self.query_one("#table", Static).update(Group(*parts))
        self.query_one("#plot", Static).update(Group(Text("Divergence with 95% intervals", style="bold"),
                                                     plot(typed, self.app.size.width - 4)))
        self.query_one("#paths", Static).update(self.paths_text())

    def paths_text(self) -> Text:
        run_dir = self.result.run_dir
        text = Text()
        text.append("run folder: ", style="bold")
        text.append(f"{run_dir}\n")
        for name, rel in (self.typed.files if self.typed is not None else {}).items():
            text.append(f"{name}: ", style="bold")
            text.append(f"{run_dir / rel}\n")
        found = bundle_of(run_dir)
        text.append("bundle: ", style="bold")
        if found is None:
            text.append(f"none written (make one with `kit bundle {shown_path(run_dir)}`)")
        else:
            text.append(f"{found}\n")
            text.append(f"check it with `kit verify {shown_path(found)}`", style="dim")
        return text

    def results_folder(self) -> Path:
        folder = RunPaths(self.result.run_dir).results
        return folder if folder.is_dir() else self.result.run_dir

    def action_open_folder(self) -> None:
        folder = self.results_folder()
        command = opener()
        if command is None:
            self.notify(f"no display to open it on here; the results folder is {folder}", title="Open results")
            return
        self.run_worker(lambda: self._open(command, folder), thread=True, group="open")

    def _open(self, command: list[str], folder: Path) -> None:
        """Run the opener and wait for it (no defunct child left behind); say what it did (another thread)."""
        name = Path(command[0]).name
        try:
            child = subprocess.Popen([*command, str(folder)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        except OSError as exc:
            self.app.call_from_thread(self.notify, f"{name} did not start ({exc}); the folder is {folder}",
                                      title="Open results")
            return
        try:
            code = child.wait(OPEN_WAIT_S)
        except subprocess.TimeoutExpired:
            code = None  # still handing it over (some openers wait for the application): reaped below
        line = (f"asked the desktop to open {folder}" if not code else
                f"{name} could not open it (exit {code}); the folder is {folder}")
        self.app.call_from_thread(self.notify, line, title="Open results")
        child.wait()  # never left defunct

    def action_copy_path(self) -> None:
        """OSC 52 through Textual: the terminal puts it on the clipboard if it supports that (nothing says
        whether it did), so the path is shown too."""
        self.app.copy_to_clipboard(str(self.result.run_dir))
        self.notify(f"sent to the terminal's clipboard (if it accepts OSC 52): {self.result.run_dir}",
                    title="Copy path")

    def action_new_run(self) -> None:
        launcher(self).back_to_picker()
