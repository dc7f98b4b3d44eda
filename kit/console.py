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
    EpisodeDone,
    EpisodeVerdict,
    Event,
    ItemVerdict,
    PlanEstimate,
    RequestDone,
    RunEnded,
    RunStarted,
    SessionEnded,
    SessionStarted,
)


def _plain(value: Any) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


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
        self.unit = "requests"

    def __call__(self, event: Event) -> None:
        print_ = self.progress.console.print
        if isinstance(event, ItemVerdict | EpisodeVerdict) and self.first_verdict is None:
            self.first_verdict = time.monotonic() - self.started
        if isinstance(event, RunStarted):
            plan = event.plan
            summary = ", ".join(f"{k.replace('_', ' ')} {_plain(v)}" for k, v in plan.items() if v not in (None, []))
            print_(f"[bold]{event.protocol}[/]: {summary}\nrun folder: {event.run_dir}")
            self.unit = "requests" if "requests" in plan else "episodes"
            total = plan.get("requests") or plan.get("episodes", 0) * len(plan.get("passes", [])) or None
            self.progress.start()
            self.task = self.progress.add_task("starting engine", total=total)
        elif isinstance(event, PlanEstimate):
            print_(f"estimated duration ≈ {event.seconds / 60:.1f} min (measured here: prefill "
                   f"{event.prefill_tokens_per_s:.0f} tok/s, decode {event.decode_tokens_per_s:.0f} tok/s; "
                   f"assumes {event.basis})")
        elif isinstance(event, EpisodeDone):
            if self.unit == "episodes":
                self.progress.advance(self.task)
            valid = {True: "valid", False: "invalid", None: "unscored"}[event.valid]
            print_(f"{event.pass_id} {event.done}/{event.total} {event.unit}: {event.requests} requests, "
                   f"{event.outcome}, BFCL {valid}")
        elif isinstance(event, EpisodeVerdict):
            a, b = event.passes
            where = (f"[yellow]DIVERGED[/] at request {event.request_index}"
                     + (f", token {event.token_index}" if event.token_index is not None else f" ({event.kind})")
                     if event.diverged else "identical")
            print_(f"  {event.comparison} ({a} vs {b}) {event.unit}: {where}")
        elif isinstance(event, SessionStarted):
            launch = event.launch
            build = (launch.get("build_info") or "?")
            startup = launch.get("startup_seconds")
            print_(f"session {event.session} ({event.index}/{event.total}): engine {build}"
                   + (f", started in {startup:.1f} s" if startup is not None else " (external)"))
            self.progress.update(self.task, description=f"session {event.session}")
        elif isinstance(event, RequestDone):
            if self.unit == "requests":
                self.progress.advance(self.task)
            self.progress.update(self.task, description=f"{event.session} {event.unit} {event.phase}")
        elif isinstance(event, ItemVerdict):
            differ = (f"[yellow]paths differ at token {event.first_difference}[/]" if event.paths_differ
                      else "paths identical")
            print_(f"{event.session} {event.done}/{event.total} {event.unit}: recompute "
                   f"{_mark(event.recompute_reproduces)}, hit {_mark(event.hit_reproduces)}; {differ}")
        elif isinstance(event, SessionEnded):
            style = "green" if event.status == "OK" else "red"
            why = f" — {event.reason}" if event.reason else ""
            print_(f"{event.session}: [{style}]{event.status}[/]{why}")
        elif isinstance(event, RunEnded):
            self.close()

    def close(self) -> None:
        self.progress.stop()


def reset_table(table: dict[str, Any]) -> Table:
    """The restored-state table in the paper's Table IV layout (counts per session)."""
    view = Table(title="Restored-state control (counts of items per session)", title_justify="left")
    for column in ("session", "status", "items", "recompute reproduces", "cache hit reproduces", "paths differ",
                   "cache-caused"):
        view.add_column(column, justify="right" if column not in ("session", "status") else "left")
    answers = []
    for row in table["sessions"]:
        if row["status"] == "OK":
            view.add_row(row["session"], "OK", str(row["items"]), str(row["recompute_reproduces"]),
                         str(row["hit_reproduces"]), str(row["paths_differ"]), str(row["cache_caused"]))
            if row.get("outcomes"):
                o = row["outcomes"]
                answers.append(f"{row['session']}: correct recompute {o['recompute_correct']}/{o['items']}, "
                               f"cache hit {o['hit_correct']}/{o['items']}; flips {o['recompute_right_hit_wrong']} "
                               f"right→wrong, {o['recompute_wrong_hit_right']} wrong→right "
                               f"(exact McNemar p={o['mcnemar']['p']:.3g})")
        else:
            view.add_row(row["session"], f"[red]{row['status']}[/]", "—", "—", "—", "—", "—")
    across = table["across_sessions"]
    if "items" in across:
        view.caption = (f"same in all {across['sessions']} OK sessions: recompute {across['recompute_same_in_all']}"
                        f"/{across['items']}, cache hit {across['hit_same_in_all']}/{across['items']}")
    else:
        view.caption = f"across sessions: {across['note']}"
    view.caption = "\n".join([view.caption, *answers])
    view.caption_justify = "left"
    return view


def _rate(comparison: dict[str, Any]) -> tuple[str, str, str]:
    if "skipped" in comparison:
        return "—", "—", comparison["skipped"]
    interval = comparison["interval"]
    if interval is None:
        return "0/0", "—", ""
    return (f"{comparison['diverged']}/{comparison['episodes']}", f"{100 * interval['rate']:.1f}%",
            f"[{100 * interval['lo']:.1f}, {100 * interval['hi']:.1f}]")


def grid_table(table: dict[str, Any]) -> Table:
    """Divergence per comparison (Wilson 95% intervals), then BFCL outcomes per pass."""
    view = Table(title="Grid: episodes whose trajectory changed", title_justify="left")
    for column in ("comparison", "passes", "diverged", "rate", "95% CI (Wilson)", "first request"):
        view.add_column(column)
    for name, comparison in table["comparisons"].items():
        firsts = comparison.get("first_request_index") or []
        view.add_row(name, " vs ".join(comparison["passes"]), *_rate(comparison),
                     ", ".join(map(str, firsts[:8])) + (" …" if len(firsts) > 8 else ""))
    outcomes = []
    for row in table["passes"]:
        if "outcomes" in row:
            outcomes.append(f"{row['pass']} {row['outcomes']['valid']}/{row['outcomes']['episodes']} valid")
        else:
            outcomes.append(f"{row['pass']} {row['status']}" + (f" ({row['reason']})" if row.get("reason") else ""))
    identity = table["comparisons"].get("run-to-run cache-off", {}).get("identity")
    caption = "BFCL outcomes: " + "; ".join(outcomes)
    if identity:
        caption += (f"\ncache-off repeat: {identity['episodes_identical']}/{identity['episodes']} episodes identical, "
                    f"{identity['logprobs_identical']}/{identity['logprob_records']} log-probabilities identical")
    view.caption, view.caption_justify = caption, "left"
    return view


RENDERERS = {"restored-state control": reset_table, "grid": grid_table}
