"""Setup form: engine, model, workload size, repeats, output folder. Checked as the user types; the
defaults run as they are. Start is refused while any field explains a problem."""

from __future__ import annotations

from pathlib import Path

import yaml
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.suggester import SuggestFromList
from textual.widgets import Button, Footer, Header, Input, Label, Select, Static

from kit.tui import form
from kit.tui.catalog import Entry

FIELDS = {  # field -> (label, placeholder)
    "model": ("Model (registry name or GGUF path; empty = SmolLM2-135M Q4_1)", "smollm2-135m-instruct-q4_1"),
    "url": ("Endpoint URL", "http://127.0.0.1:8080"),
    "server_bin": ("llama-server binary of your GPU build", "/path/to/llama-server"),
    "size": ("Items", ""),
    "repeats": ("Sessions (each a fresh server, its own seeded order)", ""),
    "max_tokens": ("Max tokens per answer", ""),
    "out": ("Output folder (the run folder goes inside)", ""),
}


def known_models() -> set[str]:
    try:
        from kit.models import load_registry  # noqa: PLC0415

        return set(load_registry().models)
    except Exception:  # noqa: BLE001 - a broken registry only costs the suggestions
        return set()


class SetupScreen(Screen):
    """The form for one protocol."""

    BINDINGS = [Binding("ctrl+r", "start", "Run", priority=True), Binding("escape", "back", "Back"),
                Binding("question_mark", "app.help", "Help")]
    DEFAULT_CSS = """
    SetupScreen VerticalScroll { padding: 0 1; }
    SetupScreen .field { height: auto; margin-bottom: 1; }
    SetupScreen .field Label { color: $text-muted; }
    SetupScreen .problem { color: $error; height: auto; }
    SetupScreen .problem.-ok { display: none; }
    SetupScreen #buttons { height: 3; }
    SetupScreen #summary { height: auto; color: $text-muted; }
    """

    def __init__(self, entry: Entry, out: Path):
        super().__init__()
        self.entry = entry
        data = yaml.safe_load(entry.path.read_text()) or {}
        self.setup = form.defaults(entry.name, entry.kind, data, out)
        self.models = known_models()

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll():
            yield Static(id="summary")
            with Vertical(classes="field", id="w-engine"):
                yield Label("Engine")
                yield Select([(c.label, c.key) for c in form.ENGINES], value=self.setup.engine, allow_blank=False,
                             id="f-engine")
                yield Static(classes="problem -ok", id="p-engine")
            with Vertical(classes="field", id="w-endpoint_kind"):
                yield Label("Endpoint kind")
                yield Select([(v, k) for k, v in form.ENDPOINT_KINDS.items()], value=self.setup.endpoint_kind,
                             allow_blank=False, id="f-endpoint_kind")
                yield Static(classes="problem -ok", id="p-endpoint_kind")
            for name, (label, placeholder) in FIELDS.items():
                if name in ("repeats", "max_tokens") and self.entry.kind != "reset":
                    continue
                if name == "size" and self.entry.kind == "grid":
                    label = "Episodes"
                with Vertical(classes="field", id=f"w-{name}"):
                    yield Label(label)
                    suggester = SuggestFromList(sorted(self.models)) if name == "model" else None
                    yield Input(value=getattr(self.setup, name), placeholder=placeholder, id=f"f-{name}",
                                suggester=suggester)
                    yield Static(classes="problem -ok", id=f"p-{name}")
            with Horizontal(id="buttons"):
                yield Button("Run (ctrl+r)", variant="success", id="start")
                yield Button("Back (esc)", id="back")
        yield Footer()

    def on_mount(self) -> None:
        self.title, self.sub_title = "kit", f"set up {self.entry.name}"
        self.query_one("#summary", Static).update(f"{self.entry.name}: {self.entry.explanation()}")
        self.refresh_form()

    def on_input_changed(self, event: Input.Changed) -> None:
        setattr(self.setup, event.input.id.removeprefix("f-"), event.value)
        self.refresh_form()

    def on_select_changed(self, event: Select.Changed) -> None:
        setattr(self.setup, event.select.id.removeprefix("f-"), event.value)
        self.refresh_form()

    def refresh_form(self) -> dict[str, str]:
        """Show only the fields the chosen engine uses; put each problem under its field."""
        engine = self.setup.engine
        visible = {"endpoint_kind": engine == "endpoint", "url": engine == "endpoint",
                   "model": engine != "endpoint", "server_bin": engine == "native"}
        for name, shown in visible.items():
            self.query_one(f"#w-{name}").display = shown
        found = form.problems(self.setup, self.app.caps, self.models)
        for widget in self.query(".problem"):
            problem = found.get(widget.id.removeprefix("p-"))
            widget.update(f"✗ {problem}" if problem else "")
            widget.set_class(problem is None, "-ok")
        for name in FIELDS:
            inputs = self.query(f"#f-{name}")
            if inputs:
                inputs.first().set_class(name in found, "-invalid")
        self.query_one("#start", Button).disabled = bool(found)
        return found

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "start":
            self.action_start()
        else:
            self.action_back()

    def action_start(self) -> None:
        found = self.refresh_form()
        if found:
            name, problem = next(iter(found.items()))
            self.notify(problem, title=f"cannot start: {name.replace('_', ' ')}", severity="error")
            return
        self.app.start_run(form.run_options(self.setup))

    def action_back(self) -> None:
        self.app.pop_screen()
