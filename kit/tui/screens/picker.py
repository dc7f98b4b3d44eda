"""Protocol picker: every protocol file with what it measures, needs and costs, and whether this machine
can run it. Protocols that cannot run here are listed and explained but not startable."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, OptionList, Static
from textual.widgets.option_list import Option

from kit.tui.catalog import EMBEDDED, Capabilities, Entry, catalog
from kit.tui.launcher_app import launcher


def _label(entry: Entry) -> Text:
    text = Text()
    text.append(f"{entry.name:<15}", style="bold" if entry.runnable else "dim")
    text.append(f" {entry.kind:<10}", style="dim")
    why = entry.why_not or ""
    if entry.ready:
        text.append(" ready", style="green")
    elif entry.runnable:
        text.append(" endpoint URL only", style="yellow")
    elif why.startswith("checking"):
        text.append(" checking this machine…", style="dim")
    else:
        text.append(" not available yet" if "not available" in why else " cannot run here", style="yellow")
    return text


class PickerScreen(Screen):
    """Choose a protocol; Enter opens its setup form."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "choose", "Set up", priority=True), Binding("d", "doctor", "Machine"),
                Binding("r", "app.open_replay", "Replay"),
                Binding("w", "app.open_watch", "Watch"), Binding("question_mark", "app.help", "Help"),
                Binding("q", "app.quit", "Quit")]
    # The list takes the rows it needs, up to 62% of the screen (every protocol file at 120x40; at 80x24
    # the list scrolls); the description gets the rest and scrolls when it must.
    DEFAULT_CSS = """
    PickerScreen #protocols { height: auto; max-height: 62%; border: round $primary; }
    PickerScreen #details { height: 1fr; border: round $secondary; padding: 0 1; }
    PickerScreen #machine { height: auto; color: $text-muted; padding: 0 1; }
    """

    def __init__(self, caps: Capabilities):
        super().__init__()
        self.caps = caps
        self.entries: list[Entry] = []
        # set before mounting: the Header reads them once it has mounted its parts
        self.title, self.sub_title = "kit", "pick a protocol"

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="machine")
        yield OptionList(id="protocols")
        with VerticalScroll(id="details"):
            yield Static(id="detail")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#protocols", OptionList).border_title = "Protocols"
        self.query_one("#details").border_title = "What it does"
        self.set_capabilities(self.caps)

    def set_capabilities(self, caps: Capabilities) -> None:
        self.caps = caps
        self.entries = catalog(caps, launcher(self).protocols_folder)
        options = self.query_one("#protocols", OptionList)
        highlighted = options.highlighted or 0
        options.clear_options()
        options.add_options([Option(_label(e), id=e.name) for e in self.entries])
        if self.entries:
            options.highlighted = min(highlighted, len(self.entries) - 1)
        self.query_one("#machine", Static).update(machine_line(caps))
        self._show_detail()

    def on_option_list_option_highlighted(self, _event: OptionList.OptionHighlighted) -> None:
        self._show_detail()

    def on_option_list_option_selected(self, _event: OptionList.OptionSelected) -> None:
        self.action_choose()

    def current(self) -> Entry | None:
        index = self.query_one("#protocols", OptionList).highlighted
        return self.entries[index] if index is not None and index < len(self.entries) else None

    def _show_detail(self) -> None:
        entry = self.current()
        text = Text()
        if entry is not None:
            text.append(f"{entry.name}", style="bold")
            text.append(f"  ({entry.kind}, {entry.path.name})\n", style="dim")
            text.append(entry.explanation() + "\n")
            if entry.description:
                text.append(entry.description + "\n", style="italic")
            if entry.ready:
                text.append("Enter: set it up and run", style="green")
            elif entry.runnable:
                text.append(f"Not ready here: {entry.why_not}\nEnter: set it up with your own endpoint URL",
                            style="yellow")
            else:
                text.append(f"Cannot start: {entry.why_not}", style="yellow")
        self.query_one("#detail", Static).update(text)

    def action_choose(self) -> None:
        entry = self.current()
        if entry is None:
            return
        if not entry.runnable:
            self.notify(entry.why_not or "cannot run here", title=f"{entry.name} cannot start", severity="warning")
            return
        launcher(self).open_setup(entry)

    def action_doctor(self) -> None:
        """Every check of `kit doctor` and its fix (the line above the list only sums them up)."""
        if not self.caps.report:
            self.notify("the machine is still being checked; `kit doctor` in a shell shows every check and its fix"
                        if not self.caps.checked else "`kit doctor` in a shell shows every check and its fix",
                        title="Machine")
            return
        from kit.tui.screens.machine import MachineScreen  # noqa: PLC0415

        self.app.push_screen(MachineScreen(self.caps))


def machine_line(caps: Capabilities) -> str:
    """What this machine can run, and why the embedded engine is not ready when it is not (what each GPU way
    lacks is said where it is chosen, in the setup form)."""
    if not caps.checked:
        return "this machine: checking what it can run (kit doctor: one short completion on the embedded engine)…"
    line = "this machine: " + (", ".join(caps.ways) or "no proven local engine (an endpoint URL still works)")
    return "; ".join((line, *([caps.why_not[EMBEDDED]] if EMBEDDED in caps.why_not else [])))
