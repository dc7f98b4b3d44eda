"""Terminal views of a run: a live progress bar with one line per item verdict, and result tables."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from kit.events import (
    Event,
    ItemVerdict,
    RequestDone,
    RunEnded,
    RunStarted,
    SessionEnded,
    SessionStarted,
)


def _mark(ok: bool) -> str:
    return "[green]reproduces[/]" if ok else "[red]NOT reproduced[/]"


class ConsoleReporter:
    """Shows a run as it happens. Call it with each event; close() when done."""

    def __init__(self, console: Console | None = None):
        self.console = console or Console(highlight=False)
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(),
                                 console=self.console, transient=True)
        self.task = None
        self.started = time.monotonic()
        self.first_verdict: float | None = None

    def __call__(self, event: Event) -> None:
        print_ = self.progress.console.print
        if isinstance(event, RunStarted):
            plan = event.plan
            print_(f"[bold]{event.protocol}[/]: {plan['sessions']} session(s) × {plan['items']} items × "
                   f"{len(plan['phases'])} phases ({', '.join(plan['phases'])}), up to {plan['max_tokens']} tokens "
                   f"each\nrun folder: {event.run_dir}")
            self.progress.start()
            self.task = self.progress.add_task("starting engine", total=plan["requests"])
        elif isinstance(event, SessionStarted):
            launch = event.launch
            build = (launch.get("build_info") or "?")
            startup = launch.get("startup_seconds")
            print_(f"session {event.session} ({event.index}/{event.total}): engine {build}"
                   + (f", started in {startup:.1f} s" if startup is not None else " (external)"))
            self.progress.update(self.task, description=f"session {event.session}")
        elif isinstance(event, RequestDone):
            self.progress.advance(self.task)
            self.progress.update(self.task, description=f"{event.session} {event.unit} {event.phase}")
        elif isinstance(event, ItemVerdict):
            if self.first_verdict is None:
                self.first_verdict = time.monotonic() - self.started
            differ = (f"[yellow]paths differ at token {event.first_difference}[/]" if event.paths_differ
                      else "paths identical")
            print_(f"{event.session} {event.done}/{event.total} {event.unit}: recompute "
                   f"{_mark(event.recompute_reproduces)}, hit {_mark(event.hit_reproduces)}; {differ}")
        elif isinstance(event, SessionEnded):
            style = "green" if event.status == "OK" else "red"
            print_(f"session {event.session}: [{style}]{event.status}[/]" + (f" — {event.reason}" if event.reason else ""))
        elif isinstance(event, RunEnded):
            self.close()

    def close(self) -> None:
        self.progress.stop()


def reset_table(table: dict[str, Any]) -> Table:
    """The restored-state table in the paper's Table IV layout (counts per session)."""
    view = Table(title="Restored-state control (counts of items per session)", title_justify="left")
    for column in ("session", "status", "items", "recompute reproduces", "cache hit reproduces", "paths differ"):
        view.add_column(column, justify="right" if column not in ("session", "status") else "left")
    for row in table["sessions"]:
        if row["status"] == "OK":
            view.add_row(row["session"], "OK", str(row["items"]), str(row["recompute_reproduces"]),
                         str(row["hit_reproduces"]), str(row["paths_differ"]))
        else:
            view.add_row(row["session"], f"[red]{row['status']}[/]", "—", "—", "—", "—")
    across = table["across_sessions"]
    if "items" in across:
        view.caption = (f"same in all {across['sessions']} OK sessions: recompute {across['recompute_same_in_all']}"
                        f"/{across['items']}, cache hit {across['hit_same_in_all']}/{across['items']}")
    else:
        view.caption = f"across sessions: {across['note']}"
    view.caption_justify = "left"
    return view
