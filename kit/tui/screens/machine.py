"""The machine screen (`d` in the picker): every check `kit doctor` made, with its fix, as the doctor
prints it, and what this machine can run."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from kit.app.doctor import MISSING, OK, WARN
from kit.tui.catalog import Capabilities

STATUS_STYLE = {OK: "green", MISSING: "red", WARN: "yellow"}


def report_text(caps: Capabilities) -> Text:
    """The doctor's lines, each status coloured (plain text: nothing in them is read as markup)."""
    text = Text()
    text.append("kit doctor (Esc closes; `kit doctor` in a shell prints the same)\n\n", style="bold")
    for line in caps.report:
        status = line.split(" ", 1)[0]
        text.append(line[:len(status)], style=f"bold {STATUS_STYLE.get(status, '')}")
        text.append(line[len(status):] + "\n")
    return text


class MachineScreen(ModalScreen):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,d,q", "dismiss", "Close")]
    DEFAULT_CSS = """
    MachineScreen { align: center middle; }
    MachineScreen VerticalScroll { width: 95%; height: 90%; border: round $primary; background: $surface;
                                   padding: 0 1; }
    """

    def __init__(self, caps: Capabilities):
        super().__init__()
        self.caps = caps

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(report_text(self.caps), id="report")
