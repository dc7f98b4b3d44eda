"""Results screen: the summary tables (as `kit run` prints them), a terminal plot of divergence with
intervals, the run folder and bundle paths, and keys to open the results folder or copy its path."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

from rich.console import Group
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Static

from kit.console import results_view
from kit.terminal_text import one_line
from kit.tui.widgets.divergence_plot import plot

STATUS_STYLE = {"finished": "green", "interrupted": "yellow", "failed": "red"}


def opener() -> list[str] | None:
    """The desktop's "open this" command, if this machine has one."""
    for name in (("open",) if sys.platform == "darwin" else ("xdg-open", "gio")):
        found = shutil.which(name)
        if found:
            return [found, "open"] if name == "gio" else [found]
    return None


def bundles(run_dir: Path) -> list[Path]:
    """Bundles made of this run: archives named after the run folder, beside it or inside it."""
    found = [*run_dir.parent.glob(f"{run_dir.name}*.tar*"), *run_dir.parent.glob(f"{run_dir.name}*.zip"),
             *(run_dir / "bundle").glob("*")] if run_dir.exists() else []
    return sorted(found)


class ResultsScreen(Screen):
    """Shows one finished (or stopped) run."""

    BINDINGS: ClassVar[list[Binding]] = [Binding("o", "open_folder", "Open results"), Binding("c", "copy_path", "Copy path"),
                Binding("n", "new_run", "New run"), Binding("escape", "app.pop_screen", "Back"),
                Binding("question_mark", "app.help", "Help"), Binding("q", "app.quit", "Quit")]
    DEFAULT_CSS = """
    ResultsScreen VerticalScroll { padding: 0 1; }
    ResultsScreen Static { margin-bottom: 1; }
    """

    def __init__(self, result):
        super().__init__()
        self.result = result
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
        for row in (result.table or {}).get("sessions", []) + (result.table or {}).get("passes", []):
            if row.get("status") not in (None, "OK") and row.get("reason"):
                name = row.get("session") or row.get("pass")
                status.append("\n" + one_line(f"{name} {row['status']}: {row['reason']}"), style="red")
        if result.status == "interrupted":
            status.append("\nThe records written so far are complete; the counts below cover them only.",
                          style="dim")
        self.query_one("#status", Static).update(status)
        table = result.table or {}
        view = results_view(table)
        self.query_one("#table", Static).update(view if view is not None else Text("no result table", style="dim"))
        self.query_one("#plot", Static).update(Group(Text("Divergence with 95% intervals", style="bold"),
                                                     plot(table, self.app.size.width - 4)))
        self.query_one("#paths", Static).update(self.paths_text())

    def paths_text(self) -> Text:
        run_dir = self.result.run_dir
        text = Text()
        text.append("run folder: ", style="bold")
        text.append(f"{run_dir}\n")
        files = (self.result.table or {}).get("files", {})
        for name, rel in files.items():
            text.append(f"{name}: ", style="bold")
            text.append(f"{run_dir / rel}\n")
        found = bundles(run_dir)
        text.append("bundle: ", style="bold")
        text.append(", ".join(map(str, found)) if found else "not made yet (make one with the kit's bundle command)")
        return text

    def results_folder(self) -> Path:
        folder = self.result.run_dir / "results"
        return folder if folder.is_dir() else self.result.run_dir

    def action_open_folder(self) -> None:
        folder = self.results_folder()
        command = opener()
        if command is None:
            self.notify(f"no desktop opener on this machine; the folder is {folder} (c copies the path)",
                        title="Open results")
            return
        subprocess.Popen([*command, str(folder)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.notify(f"opened {folder}", title="Open results")

    def action_copy_path(self) -> None:
        self.app.copy_to_clipboard(str(self.result.run_dir))
        self.notify(f"copied {self.result.run_dir}", title="Copy path")

    def action_new_run(self) -> None:
        self.app.back_to_picker()
