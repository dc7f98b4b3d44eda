"""Replay a bundle from the launcher: ask for the bundle (or run folder) and the llama.cpp build to replay on
(the paper's, or one made here: `kit replay --engine-build N`), re-execute it in a worker
(kit.replay.run, as `kit replay` does), and show the comparison filling in request by request
(kit.replay.live), then the full comparison of each run (kit.replay.comparison)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, RichLog, Static

from kit.core.errors import KitError, shown_line
from kit.tui import form
from kit.tui.widgets.ask import AskScreen


def ask_for_bundle() -> AskScreen[Path]:
    """Which bundle (or run folder) to replay."""
    return AskScreen("Replay a bundle or run folder on this machine (Enter to start, Esc to cancel):",
                     "path to a .tar.gz bundle or a run folder", _existing_path)


def _existing_path(text: str) -> Path:
    path = Path(text).expanduser()
    if not text or not path.exists():
        raise KitError(f"{path} does not exist")
    return path


@dataclass(frozen=True)
class EngineBuild:
    """The llama.cpp build a replay runs on: `number` None is the paper's (the embedded engine)."""

    number: int | None


def ask_for_build() -> AskScreen[EngineBuild]:
    """Which llama.cpp build to replay on: the setup form's engine build field and checks (kit.tui.form)."""
    placeholder, built = form.build_hint("auto")
    return AskScreen("Replay on which llama.cpp build? (Enter on empty: the paper's build; a build made here: "
                     "its number, as `kit replay --engine-build N`; Esc to cancel)", placeholder, _build_made_here,
                     built)


def _build_made_here(text: str) -> EngineBuild:
    from kit.run.runner import RunOptions  # noqa: PLC0415 - the run machinery loads only when a replay is asked for

    return EngineBuild(form.build_made_here(text, RunOptions(protocol="")))


class ReplayScreen(Screen):
    """Replays `source` into `outputs` and shows the comparison as it fills in."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Back"),
                                         Binding("question_mark", "app.help", "Help")]
    DEFAULT_CSS = """
    ReplayScreen #status { height: auto; padding: 0 1; }
    ReplayScreen #passes { height: auto; max-height: 50%; border: round $primary; }
    ReplayScreen #log { height: 1fr; border: round $panel; }
    """

    def __init__(self, source: Path, outputs: Path, cpu_backend: str | None = None, engine_build: int | None = None):
        super().__init__()
        self.source, self.outputs, self.cpu_backend, self.engine_build = source, outputs, cpu_backend, engine_build
        self.followers: list = []
        self.done: list | None = None
        self.error: str | None = None
        on = f"llama.cpp build {engine_build}" if engine_build is not None else "the paper's build"
        self.title, self.sub_title = "kit", f"replaying {source.name} on {on}"

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text(f"checking {self.source} and what it needs…"), id="status")
        yield DataTable(id="passes", zebra_stripes=True)
        yield RichLog(id="log", max_lines=500, wrap=False, markup=False)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#passes", DataTable)
        table.border_title = "Requests replayed so far, against the original"
        table.add_columns("run", "pass", "replayed", "byte-identical", "first difference")
        self.query_one("#log").border_title = "Request by request"
        self.run_worker(self._work, thread=True, exclusive=True, group="replay")

    def _work(self) -> None:
        from kit.replay.live import Follower  # noqa: PLC0415
        from kit.replay.run import ReplayOptions, replay  # noqa: PLC0415

        def watch(original: Path):
            follower = Follower(original)
            self.app.call_from_thread(self.followers.append, follower)
            return lambda event: self.app.call_from_thread(self.on_lines, follower(event))

        try:
            options = ReplayOptions(self.source, self.outputs, self.cpu_backend, engine_build=self.engine_build)
            done = replay(options, say=lambda line: self.app.call_from_thread(self.on_lines, [line]), watch=watch)
        except Exception as exc:  # noqa: BLE001 - shown to the user
            self.app.call_from_thread(self.on_failed, shown_line(exc))
            return
        self.app.call_from_thread(self.on_finished, done)

    def on_lines(self, lines: list[str]) -> None:
        log = self.query_one("#log", RichLog)
        for line in lines:
            log.write(line)
        self.render_passes()

    def render_passes(self) -> None:
        table = self.query_one("#passes", DataTable)
        table.clear()
        for follower in self.followers:
            for pass_id, so_far in follower.passes.items():
                table.add_row(*map(Text, (follower.original_dir.name, str(pass_id), f"{so_far.replayed}/{so_far.original}",
                                          str(so_far.identical), str(so_far.first_difference or "none so far"))))
        if self.done is None and self.error is None and self.followers:
            self.query_one("#status", Static).update(Text(f"replaying {self.source.name}…"))

    def on_finished(self, done: list) -> None:
        self.done = done
        self.render_passes()
        lines = []
        for item in done:
            lines.append(f"replay of {item.original}: {item.comparison.summary()}")
            lines += [f"  different {d}" for d in item.comparison.differences]
            lines.append(f"  new run folder: {item.result.run_dir}")
        self.query_one("#status", Static).update(Text("\n".join(lines) or "nothing to replay"))

    def on_failed(self, message: str) -> None:
        self.error = message
        self.query_one("#status", Static).update(Text.assemble(("cannot replay: ", "red"), message))
