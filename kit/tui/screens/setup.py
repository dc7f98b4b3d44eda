"""Setup form: engine, model, workload size, repeats, output folder. Checked as the user types; the
defaults run as they are. Start is refused while any field explains a problem."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

import yaml
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.suggester import SuggestFromList
from textual.widget import Widget
from textual.widgets import Button, Footer, Header, Input, Label, Select, SelectionList, Static

from kit.core.errors import KitError
from kit.engines import registry as engines
from kit.tui import form
from kit.tui.catalog import Capabilities, Entry
from kit.tui.widgets.ask import AskScreen
from kit.tui.launcher_app import launcher

MODEL_HINT = "registry name or .gguf path; empty: SmolLM2-135M Q4_1"
FIELDS = {  # field -> (label, placeholder); None: a number the kind's launcher entry asks for, or not
    "model": ("Model", MODEL_HINT),
    "url": ("Endpoint URL", "http://127.0.0.1:8080"),
    "url_on": ("Cache-on URL", "vLLM server with --enable-prefix-caching, e.g. http://127.0.0.1:8001"),
    "url_off": ("Cache-off URL", "vLLM server with --no-enable-prefix-caching, e.g. http://127.0.0.1:8002"),
    "server_bin": ("Server binary", "llama-server of your GPU build"),
    "size": None,
    "repeats": None,
    "max_tokens": None,
    "ray_address": ("Ray address", "empty: a local Ray on this machine; auto; ray://HOST:PORT"),
    "out": ("Output folder", "the run folder goes inside"),
}
CHECKPOINT_HINT = "vLLM checkpoint: registry name, Org/Name or folder; empty: {}"
SERVER_ARGS = "llama-server flags no fix names, as --server-arg takes them: e.g. --swa-full -ub=32"


def confirm_long_run(found) -> AskScreen[bool]:
    """The question before a run past an hour on the CPU engine (kit.run.long_runs.LongRun): yes starts it."""
    def validate(answer: str) -> bool:
        if answer.lower() in ("y", "yes"):
            return True
        raise KitError("type yes to start it, or press Esc to go back to the form")

    return AskScreen(f"{found.message()}.\n{found.fix('type yes')} (Esc: back to the form).", "yes", validate)


def named(widget: Widget, prefix: str) -> str:
    """A form widget's field name: its id (every one of the form's fields and problem lines has one) less
    its prefix."""
    if widget.id is None:
        raise ValueError(f"a {type(widget).__name__} of the setup form has no id")
    return widget.id.removeprefix(prefix)


class SetupScreen(Screen):
    """The form for one protocol."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("ctrl+r", "start", "Run", priority=True), Binding("escape", "back", "Back"),
                Binding("question_mark", "app.help", "Help")]
    DEFAULT_CSS = """
    SetupScreen VerticalScroll { padding: 0 1; }
    SetupScreen .field { height: auto; }
    SetupScreen .row { height: 1; }
    SetupScreen .row Label { width: 15; color: $text-muted; }
    SetupScreen .row Input { border: none; height: 1; padding: 0 1; width: 1fr; background: $boost; }
    SetupScreen .row Input:focus { background: $primary 30%; }
    SetupScreen .row Input.-invalid { background: $error 20%; }
    SetupScreen .row Select { width: 1fr; }
    SetupScreen .row SelectCurrent { border: none; height: 1; padding: 0 1; background: $boost; }
    SetupScreen .row Select:focus > SelectCurrent { background: $primary 30%; }
    SetupScreen #f-fixes { height: auto; max-height: 6; border: none; padding: 0; background: $boost; }
    SetupScreen #f-fixes:focus { background: $primary 30%; }
    SetupScreen .problem { color: $error; height: auto; padding-left: 15; }
    SetupScreen .problem.-ok { display: none; }
    SetupScreen #buttons { height: 3; margin-top: 1; }
    SetupScreen #summary { height: auto; color: $text-muted; margin-bottom: 1; }
    SetupScreen #estimate { height: auto; margin-top: 1; }
    """

    def __init__(self, entry: Entry, out: Path, caps: Capabilities):
        super().__init__()
        self.entry = entry
        data = yaml.safe_load(entry.path.read_text()) or {}
        self.setup = form.defaults(str(entry.path), entry.kind, data, out)
        # the first engine it can use here: e.g. the endpoint where no engine is proven
        self.setup.engine = form.usable_engine(entry.kind, caps, str(entry.path))
        self.models = set(form.registry_names().models)
        self.shown_for: str | None = None  # the engine (llama.cpp or vLLM) the model field is set up for
        # set before mounting: the Header reads them once it has mounted its parts
        self.title, self.sub_title = "kit", f"set up {self.entry.name}"

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll():
            yield Static(id="summary")
            yield from self.select("engine", "Engine", [(c.label, c.key) for c in form.ENGINES])
            yield from self.select("cpu_backend", "CPU backend",
                                   [(label, key) for key, label in form.CPU_BACKENDS.items()])
            yield from self.field("engine_build", "Engine build", form.PAPER_BUILD)
            yield from self.select("endpoint_kind", "Endpoint kind", [(v, k) for k, v in form.ENDPOINT_KINDS.items()])
            numbers = form.kind_launcher(self.entry.kind).numbers()
            for name, fixed in FIELDS.items():
                if fixed is None and name not in numbers:
                    continue
                if name == "ray_address":  # the fixes, then where passes run (kinds with units only), after the workload
                    yield from self.fix_picker()
                    yield from self.select("executor", "Passes run in",
                                           [(label, key) for key, label in form.EXECUTORS.items()])
                label, placeholder = fixed or (numbers[name].label, numbers[name].placeholder)
                yield from self.field(name, label, placeholder,
                                      SuggestFromList(sorted(self.models)) if name == "model" else None)
            yield Static(id="estimate")
            with Horizontal(id="buttons"):
                yield Button("Run (ctrl+r)", variant="success", id="start")
                yield Button("Back (esc)", id="back")
        yield Footer()

    def field(self, name: str, label: str, placeholder: str, suggester: SuggestFromList | None = None) -> ComposeResult:
        """A field typed in (`name`: the Setup field)."""
        with Vertical(classes="field", id=f"w-{name}"):
            with Horizontal(classes="row"):
                yield Label(label)
                yield Input(value=getattr(self.setup, name), placeholder=placeholder, id=f"f-{name}",
                            suggester=suggester, compact=True)
            yield Static(classes="problem -ok", id=f"p-{name}")

    def fix_picker(self) -> ComposeResult:
        """The registry's named fixes, each with what it is meant to close (space picks one), and its families
        typed by name: together the run's `--fix`; then further llama-server flags, its `--server-arg`s
        (kit.launch.llamacpp.fixes)."""
        with Vertical(classes="field", id="w-fixes"):
            with Horizontal(classes="row"):
                yield Label("Fixes")
                yield Static(Text("none: the engine as the paper ran it; space picks (docs/remedy.md)",
                                  style="dim"))
            yield SelectionList[str](*[(Text(f"{name}: {closes}", no_wrap=True, overflow="ellipsis"), name,
                                        name in self.setup.fixes) for name, closes in form.fix_choices()],
                                     id="f-fixes", compact=True)
            with Horizontal(classes="row"):
                yield Label("More fixes")
                yield Input(value=self.setup.more_fixes, placeholder=form.fix_families(), id="f-more_fixes",
                            compact=True)
            with Horizontal(classes="row"):
                yield Label("Server flags")
                yield Input(value=self.setup.server_args, placeholder=SERVER_ARGS, id="f-server_args", compact=True)
            yield Static(classes="problem -ok", id="p-fixes")

    def select(self, name: str, label: str, choices: list[tuple[str, str]]) -> ComposeResult:
        """A field chosen from a list (`name`: the Setup field)."""
        with Vertical(classes="field", id=f"w-{name}"):
            with Horizontal(classes="row"):
                yield Label(label)
                yield Select(choices, value=getattr(self.setup, name), allow_blank=False, id=f"f-{name}",
                             compact=True)
            yield Static(classes="problem -ok", id=f"p-{name}")

    def on_mount(self) -> None:
        self.query_one("#summary", Static).update(Text(f"{self.entry.name}: {self.entry.measures}."))
        self.refresh_form()
        self.query_one("#f-engine").focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        setattr(self.setup, named(event.input, "f-"), event.value)
        self.refresh_form()

    def on_select_changed(self, event: Select.Changed) -> None:
        setattr(self.setup, named(event.select, "f-"), event.value)
        self.refresh_form()

    def on_selection_list_selected_changed(self, event: SelectionList.SelectedChanged) -> None:
        self.setup.fixes = tuple(event.selection_list.selected)
        self.refresh_form()

    def refresh_form(self) -> dict[str, str]:
        """Show only the fields the chosen engine uses; put each problem under its field."""
        engine, by_arm = self.setup.engine, engines.named(self.setup.endpoint_kind).arm_per_server
        visible = {"cpu_backend": engine == "embedded", "endpoint_kind": engine == "endpoint",
                   "url": engine == "endpoint" and not by_arm, "url_on": engine == "endpoint" and by_arm,
                   "url_off": engine == "endpoint" and by_arm, "model": engine != "endpoint",
                   "server_bin": engine == "native", "engine_build": engine == "embedded",
                   # where passes run: only for kinds whose units may run on Ray (Kind.units)
                   "executor": form.offers_executors(self.entry.kind),
                   "ray_address": form.offers_executors(self.entry.kind) and self.setup.executor == "ray"}
        self.show_model_for(form.choice_of(engine).engine)
        found = form.problems(self.setup, launcher(self).caps, self.models)
        # fixes set llama-server's flags: shown for a llama.cpp engine, or while they explain a problem
        runs = self.setup.endpoint_kind if engine == "endpoint" else form.choice_of(engine).engine
        visible["fixes"] = engines.named(runs).server_flags or "fixes" in found
        for name, shown in visible.items():
            self.query_one(f"#w-{name}").display = shown
        self.show_builds()
        # one walk of the form's widgets, every keystroke (a query per field matched the whole screen for each)
        fields = {f"f-{name}": name for name in (*FIELDS, "engine_build")}
        for widget in self.walk_children():
            if isinstance(widget, Static) and widget.has_class("problem"):
                problem = found.get(named(widget, "p-"))
                widget.update(Text(f"✗ {problem}" if problem else ""))
                widget.set_class(problem is None, "-ok")
            elif widget.id in fields:
                widget.set_class(fields[widget.id] in found, "-invalid")
        self.query_one("#start", Button).disabled = bool(found)
        self.query_one("#estimate", Static).update(
            Text(form.estimate_line(self.setup) if not found else f"{len(found)} problem(s) to fix before it can run"))
        return found

    def show_builds(self) -> None:
        """The llama.cpp build field's hint and suggestions: the builds made here (kit engines build llamacpp)."""
        field = self.query_one("#f-engine_build", Input)
        field.placeholder, built = form.build_hint(self.setup.cpu_backend)
        field.suggester = SuggestFromList(built)

    def show_model_for(self, engine: str) -> None:
        """The model field's hint and suggestions: GGUF models for llama.cpp, checkpoints for vLLM."""
        if engine == self.shown_for:
            return
        self.shown_for = engine
        field = self.query_one("#f-model", Input)
        if engines.named(engine).checkpoint:
            from kit.launch.vllm_launch import DEFAULT_CHECKPOINT  # noqa: PLC0415

            field.placeholder = CHECKPOINT_HINT.format(DEFAULT_CHECKPOINT)
            field.suggester = SuggestFromList(sorted(form.registry_names().checkpoints))
        else:
            field.placeholder = MODEL_HINT
            field.suggester = SuggestFromList(sorted(self.models))

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
        options = form.run_options(self.setup)
        found = form.long_run(options)
        if found is None:
            launcher(self).start_run(options)
            return
        self.app.push_screen(confirm_long_run(found), lambda yes: launcher(self).start_run(options) if yes else None)

    def action_back(self) -> None:
        self.app.pop_screen()
