"""Watch an engine from the launcher: ask for its URL, run `kit watch` in this process (kit.watch.serve's
`in_thread`, quiet) and show every call as it ends (its cache state, latency and alarms), with the counts
of states and alarms; Esc stops the proxy (the run ends `finished`, as after Ctrl-C on `kit watch`)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, Static

from kit.core.errors import shown_line
from kit.core.safe_console import SafeConsole
from kit.tui.widgets.ask import AskScreen

ROWS_KEPT = 500  # calls the table keeps (the records keep them all)


def ask_for_engine() -> AskScreen[str]:
    """Which engine to watch: its base URL, checked as `kit watch --upstream` checks it."""
    return AskScreen("Watch an engine: its base URL (Enter to start the proxy on 127.0.0.1, Esc to cancel):",
                     "http://127.0.0.1:8080", _upstream_url)


def _upstream_url(text: str) -> str:
    from kit.watch.cli import upstream_url  # noqa: PLC0415

    return upstream_url(text)


class WatchScreen(Screen):
    """Proxies `upstream`, recording into a run folder under `outputs`, and shows the calls as they end."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "stop", "Stop watching"),
                                         Binding("question_mark", "app.help", "Help")]
    DEFAULT_CSS = """
    WatchScreen #status { height: auto; padding: 0 1; }
    WatchScreen #counts { height: auto; padding: 0 1; }
    WatchScreen #calls { height: 1fr; border: round $primary; }
    """

    def __init__(self, upstream: str, outputs: Path):
        super().__init__()
        self.upstream, self.outputs = upstream, outputs
        self.stopping = threading.Event()
        self.proxy_url: str | None = None
        self.run_dir: Path | None = None
        self.error: str | None = None
        self.ended = False
        self.calls = 0
        self.title, self.sub_title = "kit", f"watching {upstream}"

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(Text(f"asking {self.upstream} what it is…"), id="status")
        yield Static("", id="counts")
        yield DataTable(id="calls", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#calls", DataTable)
        table.border_title = "Generation calls, as they end"
        table.add_columns("time", "endpoint", "state", "ms", "request", "output", "alarms")
        self.run_worker(self._work, thread=True, exclusive=True, group="watch")

    def _work(self) -> None:
        from kit.watch.console import Live  # noqa: PLC0415
        from kit.watch.serve import in_thread  # noqa: PLC0415

        screen = self

        class ToScreen(Live):
            def call(self, fields: dict[str, Any]) -> None:
                super().call(fields)
                screen.app.call_from_thread(screen.on_call, fields, self.summary())

        live = ToScreen(SafeConsole(quiet=True), quiet=True)
        try:
            with in_thread(self.upstream, self.outputs, live=live) as watch:
                self.app.call_from_thread(self.on_started, watch.url, watch.recorder.run_dir)
                self.stopping.wait()
        except Exception as exc:  # noqa: BLE001 - shown to the user
            self.app.call_from_thread(self.on_failed, shown_line(exc))
            return
        self.app.call_from_thread(self.on_ended, live.summary())

    def on_started(self, url: str, run_dir: Path) -> None:
        self.proxy_url, self.run_dir = url, run_dir
        self.query_one("#status", Static).update(Text(
            f"point your clients at {url} (for {self.upstream}); recording into {run_dir}; Esc stops"))

    def on_call(self, fields: dict[str, Any], summary: str) -> None:
        self.calls += 1
        table = self.query_one("#calls", DataTable)
        if table.row_count >= ROWS_KEPT:
            table.remove_row(next(iter(table.rows)))
        alarms = ", ".join(fields["alarms"])
        table.add_row(*map(Text, (str(fields["started"])[11:23], str(fields["endpoint"]),
                                  str(fields["state"].get("state") or "unknown"), f"{fields['wall_seconds'] * 1000:.1f}",
                                  str(fields["request_sha256"])[:12], str(fields["output_sha256"] or "—")[:12])),
                      Text(alarms, style="bold red"))
        self.query_one("#counts", Static).update(Text(summary))

    def on_failed(self, message: str) -> None:
        self.error = message
        self.query_one("#status", Static).update(Text.assemble(("cannot watch: ", "red"), message))

    def on_ended(self, summary: str) -> None:
        self.ended = True
        self.query_one("#status", Static).update(Text(f"stopped; {summary}; run folder {self.run_dir}"))

    def action_stop(self) -> None:
        """Stop the proxy (first Esc), then go back (the next)."""
        if self.stopping.is_set() or self.error is not None or self.ended:
            self.app.pop_screen()
            return
        self.stopping.set()
