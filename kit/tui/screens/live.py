"""Live run screen: plan and progress with an ETA from measured speed, the divergence table filling in
as comparisons become possible, the cache-state strip, gate status per pass, the engine's log tail,
and a clean stop. The run happens in a thread worker; events come back with `call_from_thread`."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, ProgressBar, RichLog, Static

from kit.core.events import Event, RunEnded
from kit.core.paths import RunPaths
from kit.core.terminal_text import one_line
from kit.tui.live_state import LiveState
from kit.tui.widgets.cache_strip import CacheStrip
from kit.tui.launcher_app import launcher

GATE_STYLE = {"OK": "green", "VOID": "red", "failed": "red", "interrupted": "yellow", "running": "cyan"}


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}" if seconds >= 3600 \
        else f"{seconds // 60}:{seconds % 60:02d}"


def newest_log(run_dir: Path | None) -> Path | None:
    """The engine log written most recently in the run folder's logs/."""
    if run_dir is None or not RunPaths(run_dir).logs.is_dir():
        return None
    logs = sorted(RunPaths(run_dir).logs.glob("*.log"), key=lambda p: p.stat().st_mtime)
    return logs[-1] if logs else None


def tail(path: Path, lines: int = 6, max_bytes: int = 16384) -> list[str]:
    with path.open("rb") as fh:
        fh.seek(0, 2)
        fh.seek(max(0, fh.tell() - max_bytes))
        return fh.read().decode("utf-8", "replace").splitlines()[-lines:]


class LiveScreen(Screen):
    """Runs `options` with `run_fn` (the runner's `run`) in a worker and shows it as it happens."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("s", "stop", "Stop"), Binding("r", "results", "Results"),
                Binding("escape", "back", "Back"), Binding("question_mark", "app.help", "Help")]
    DEFAULT_CSS = """
    LiveScreen #plan { height: auto; padding: 0 1; }
    LiveScreen #progress-row { height: 1; padding: 0 1; }
    LiveScreen #progress-row ProgressBar { width: auto; }
    LiveScreen #numbers { width: 1fr; padding-left: 1; }
    LiveScreen #stage { height: 1; padding: 0 1; color: $text-muted; }
    LiveScreen #units { height: auto; max-height: 3; padding: 0 1; display: none; }
    LiveScreen #divergence { height: 2fr; min-height: 5; border: round $primary; overflow-x: hidden; }
    LiveScreen CacheStrip { border: round $secondary; height: 5; padding: 0 1; }
    LiveScreen #gates { height: auto; max-height: 4; padding: 0 1; }
    LiveScreen #log { height: 1fr; min-height: 4; max-height: 24; border: round $panel; overflow-x: hidden; }
    """

    def __init__(self, options, run_fn: Callable, clock: Callable[[], float], watch_logs: bool = True):
        super().__init__()
        self.options = options
        self.run_fn = run_fn
        self.state = LiveState(clock=clock)
        self.stop = threading.Event()
        options.stop = self.stop
        self.watch_logs = watch_logs
        self.result = None
        self.error: str | None = None
        self._log_seen: tuple[Path | None, list[str]] = (None, [])
        # set before mounting: the Header reads them once it has mounted its parts
        self.title, self.sub_title = "kit", f"running {Path(self.options.protocol).stem}"

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("preparing the run…", id="plan")
        with Horizontal(id="progress-row"):
            yield ProgressBar(show_eta=False, show_percentage=True, id="bar")
            yield Static(id="numbers")
        yield Static(id="stage")
        yield Static(id="units")  # a Ray run only: which node runs which unit, the overall ETA
        yield DataTable(id="divergence", cursor_type="row", zebra_stripes=True)
        yield CacheStrip(id="strip")
        yield Static(id="gates")
        yield RichLog(id="log", max_lines=200, wrap=False, markup=False)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#divergence", DataTable)
        table.border_title = "Divergence (fills in as comparisons become possible)"
        table.border_subtitle = "waiting for the first comparison"
        table.add_columns("pass", "unit", "verdict")
        self.query_one("#strip").border_title = "Cache state per request"
        self.query_one("#log").border_title = "Engine log"
        self.render_state()
        self.run_worker(self._work, thread=True, exclusive=True, group="run")
        if self.watch_logs:
            self.set_interval(1.0, self.show_log)
        self.set_interval(1.0, self.render_numbers)

    # -- the worker (another thread) -------------------------------------------------------

    def _work(self) -> None:
        emit = lambda event: self.app.call_from_thread(self.on_run_event, event)  # noqa: E731 - a one-line callback
        say = lambda line: self.app.call_from_thread(self.on_say, line)  # noqa: E731 - a one-line callback
        try:
            try:
                result = self.run_fn(self.options, emit=emit, say=say)
            except Exception as exc:  # noqa: BLE001 - shown to the user; the runner already wrote the manifest
                self.app.call_from_thread(self.on_failed, f"{type(exc).__name__}: {exc}")
                return
            if result.run_dir.is_dir():  # as after `kit run`: the run ends with its bundle
                from kit.bundle.writer import bundle_after_run  # noqa: PLC0415

                bundle_after_run(result.run_dir, say)
            self.app.call_from_thread(self.on_finished, result)
        except RuntimeError:  # the app closed while the run was stopping: nothing left to show it on
            pass

    def on_unmount(self) -> None:
        self.stop.set()  # leaving the app stops the run cleanly (records kept, manifest says interrupted)

    # -- on the UI thread -------------------------------------------------------------------

    def on_run_event(self, event: Event) -> None:
        self.state.apply(event)
        if type(event).__name__ in ("ItemVerdict", "EpisodeVerdict"):
            row = self.state.verdicts[-1]
            verdict = Text(row.verdict, style="yellow" if row.diverged else "green")
            table = self.query_one("#divergence", DataTable)
            table.add_row(Text(str(row.where)), Text(str(row.unit)), verdict)
            table.move_cursor(row=table.row_count - 1)
            diverged, compared = self.state.diverged_count()
            table.border_subtitle = f"{diverged} of {compared} differ"
        if isinstance(event, RunEnded):
            self.stop.set()
            self.sub_title = f"{self.name_of_run()} {event.status}"
        self.render_state()

    def on_say(self, line: str) -> None:
        self.query_one("#log", RichLog).write(Text(f"kit: {line}"))

    def name_of_run(self) -> str:
        return Path(self.options.protocol).stem

    def on_failed(self, message: str) -> None:
        self.error = message
        self.state.stop_clock()
        self.refresh_bindings()
        self.sub_title = f"{self.name_of_run()} failed"
        self.notify(message, title="the run failed", severity="error", timeout=30)
        self.render_state()

    def on_finished(self, result) -> None:
        self.result = result
        self.state.stop_clock()
        self.sub_title = f"{self.name_of_run()} {result.status}"
        self.render_state()
        self.refresh_bindings()
        launcher(self).show_results(result)

    def render_state(self) -> None:
        state = self.state
        plan = ", ".join(f"{k.replace('_', ' ')} {', '.join(map(str, v)) if isinstance(v, list) else v}"
                         for k, v in state.plan.items() if v not in (None, []))
        where = f"\nrun folder: {state.run_dir}" if state.run_dir else ""
        self.query_one("#plan", Static).update(Text.assemble(
            (str(state.protocol or Path(self.options.protocol).stem), "bold"), f": {plan or 'preparing'}{where}"))
        self.query_one("#bar", ProgressBar).update(total=state.total, progress=state.done)
        self.query_one("#strip", CacheStrip).show(state.requests)
        gates = Text("gates: ", style="bold")
        for gate in state.gates.values():
            gates.append(f"{gate.name} ", style="bold")
            gates.append(gate.status, style=GATE_STYLE.get(gate.status, ""))
            if gate.reason:
                gates.append(f" ({one_line(gate.reason)})")
            elif gate.violations:
                gates.append(f" ({gate.violations}/{gate.requests} requests violated)", style="red")
            gates.append("   ")
        if not state.gates:
            gates.append("no pass started yet", style="dim")
        self.query_one("#gates", Static).update(gates)
        self.render_numbers()

    def render_numbers(self) -> None:
        state = self.state
        diverged, compared = state.diverged_count()
        if self.stop.is_set() and state.ended is None and self.error is None:
            status = "stopping after the current request…"
        elif state.ended is not None:
            status = f"{state.ended.status}"
        else:
            status = state.stage
        self.query_one("#numbers", Static).update(
            Text(f"{state.done}/{state.total or '?'} {state.unit_name}  eta {_clock(state.eta_seconds())}"))
        self.query_one("#stage", Static).update(
            Text(f"elapsed {_clock(state.elapsed())} · diverged {diverged}/{compared} · {status}"))
        if units := state.units_line():
            units_view = self.query_one("#units", Static)
            units_view.display = True
            units_view.update(Text(f"{units} · eta {_clock(state.units_eta_seconds())}"))

    def show_log(self) -> None:
        path = newest_log(self.state.run_dir)
        if path is None:
            return
        log = self.query_one("#log", RichLog)
        lines = tail(path, max(2, log.size.height))
        if (path, lines) == self._log_seen:
            return
        self._log_seen = (path, lines)
        log.clear()
        log.border_title = f"Engine log ({path.name})"
        for line in lines:
            log.write(line)  # the engine's own log, drawn through the app's PrintableLines

    def action_stop(self) -> None:
        if self.state.ended is None and not self.stop.is_set():
            self.stop.set()
            self.notify("stopping after the current request; records so far are kept", title="Stop")
            self.render_numbers()

    def check_action(self, action: str, parameters) -> bool | None:
        """Stop only while running; Results only once there are some; Back (to the picker) once it is over."""
        if action == "stop":
            return not self.finished and self.state.ended is None
        if action == "results":
            return self.result is not None
        if action == "back":
            return self.finished
        return True

    @property
    def finished(self) -> bool:
        """The run's worker is over: it returned a result or failed with an error."""
        return self.result is not None or self.error is not None

    def action_back(self) -> None:
        if self.finished:
            launcher(self).back_to_picker()

    def action_results(self) -> None:
        if self.result is not None:
            launcher(self).show_results(self.result)
