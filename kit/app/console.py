"""Terminal views of a run: a live progress bar with one line per item verdict, and result tables."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from kit.core.events import (
    EpisodeDone,
    EpisodeVerdict,
    Event,
    Notice,
    ItemVerdict,
    PassSummary,
    PinningCall,
    PlanEstimate,
    RequestDone,
    RunEnded,
    RunStarted,
    SessionEnded,
    SessionStarted,
    UnitProgress,
)
from kit.core.safe_console import SafeConsole

if TYPE_CHECKING:
    from kit.protocols.results_model import Results


def _plain(value: Any) -> str:
    return ", ".join(map(str, value)) if isinstance(value, list | tuple) else str(value)


def _mark(ok: bool) -> tuple[str, str]:
    return ("reproduces", "green") if ok else ("NOT reproduced", "red")


def units_line(event: UnitProgress) -> Text:
    """A Ray run's unit placed on a node, or ended there with the overall ETA (units done / total × elapsed)."""
    where = f"node {event.node}" + (f" ({event.node_ip})" if event.node_ip else "")
    again = f", attempt {event.attempt}" if event.attempt > 1 else ""
    if event.state == "running":
        return Text(f"unit {event.unit} runs on {where}{again}", style="dim")
    eta = event.eta_s()
    left = f"eta {eta / 60:.1f} min" if eta is not None and event.done < event.total else "all units done"
    return Text(f"unit {event.unit} done on {where}: {event.done}/{event.total} units, {left}")


class ConsoleReporter:
    """Shows a run as it happens. Call it with each event; close() when done."""

    def __init__(self, console: SafeConsole | None = None):
        if console is not None and not isinstance(console, SafeConsole):
            raise TypeError("a reporter prints on a SafeConsole (kit.core.safe_console)")
        self.console = console or SafeConsole()
        # the bar is redrawn ten times a second on a terminal; elsewhere (a file, a pipe, a CI log) a transient
        # bar is never drawn, and redrawing it would only cost a thread's waking and a table built each time
        self.progress = Progress(TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), TextColumn("eta", markup=False), TimeRemainingColumn(),
                                 console=self.console, transient=True,
                                 auto_refresh=self.console.is_terminal or self.console.is_interactive)
        self.task: TaskID | None = None  # the bar's task, added when the run starts
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
            print_(Text.assemble((str(event.protocol), "bold"), f": {summary}\nrun folder: {event.run_dir}"))
            self.unit = "requests" if "requests" in plan else "episodes"
            total = plan.get("requests") or plan.get("episodes", 0) * len(plan.get("passes", [])) or None
            self.progress.start()
            self.task = self.progress.add_task("starting engine", total=total)
        elif isinstance(event, PlanEstimate):
            print_(f"estimated duration ≈ {event.seconds / 60:.1f} min (prefill {event.prefill_tokens_per_s:.0f} tok/s, "
                   f"decode {event.decode_tokens_per_s:.0f} tok/s, {event.measured()}; assumes {event.basis})")
        elif isinstance(event, EpisodeDone):
            if self.unit == "episodes":
                self._advance()
            valid = {True: "valid", False: "invalid", None: "unscored"}[event.valid]
            print_(f"{event.pass_id} {event.done}/{event.total} {event.unit}: {event.requests} requests, "
                   f"{event.outcome}, BFCL {valid}")
        elif isinstance(event, EpisodeVerdict):
            a, b = event.passes
            where = (Text.assemble(("DIVERGED", "yellow"), f" at request {event.request_index}",
                                   f", token {event.token_index}" if event.token_index is not None else f" ({event.kind})")
                     if event.diverged else "identical")
            print_(Text.assemble(f"  {event.comparison} ({a} vs {b}) {event.unit}: ", where))
        elif isinstance(event, SessionStarted):
            launch = event.launch
            build = launch.get("build_info") or " ".join(str(launch[k]) for k in ("engine", "version") if launch.get(k))
            startup = launch.get("startup_seconds")
            how = (f", started in {startup:.1f} s" if startup is not None
                   else ", in a container" if "container" in launch else " (external)")
            print_(f"session {event.session} ({event.index}/{event.total}): engine {build or '?'}{how}")
            self._describe(f"session {event.session}")
        elif isinstance(event, RequestDone):
            if self.unit == "requests":
                self._advance()
            self._describe(f"{event.session} {event.unit} {event.phase}")
        elif isinstance(event, ItemVerdict):
            differ = ((f"paths differ at token {event.first_difference}", "yellow") if event.paths_differ
                      else "paths identical")
            print_(Text.assemble(f"{event.session} {event.done}/{event.total} {event.unit}: recompute ",
                                 _mark(event.recompute_reproduces), ", hit ", _mark(event.hit_reproduces), "; ", differ))
        elif isinstance(event, SessionEnded):
            style = "green" if event.status == "OK" else "red"
            why = f" — {event.reason}" if event.reason else ""
            print_(Text.assemble(f"{event.session}: ", (str(event.status), style), why))
        elif isinstance(event, Notice):
            print_(Text(str(event.text), style="dim"))
        elif isinstance(event, UnitProgress):
            print_(units_line(event))
        elif isinstance(event, RunEnded):
            self.close()

    def _advance(self) -> None:
        if self.task is not None:  # an event before RunStarted has no bar to move
            self.progress.advance(self.task)

    def _describe(self, description: str) -> None:
        if self.task is not None:
            self.progress.update(self.task, description=description)

    def say(self, text: object) -> None:
        """Print a line of the kit's that may quote a file, a path or an engine (literal text: a SafeConsole)."""
        self.console.print(str(text))

    def close(self) -> None:
        if self.progress.live.is_started:  # stopping a bar never started prints a stray blank line
            self.progress.stop()


class PinningReporter(ConsoleReporter):
    """Shows a pinning run: one line per pass with its measured outputs (A, B, ... in order of first
    appearance) and the cache state of each call. `first_line` (what answers at the URL) is said when the run
    starts, after every option was checked, so a refusal stays the one line printed."""

    def __init__(self, console: SafeConsole | None = None, first_line: str | None = None):
        super().__init__(console)
        self.first_line = first_line
        self.names: dict[str, str] = {}
        self.calls: list[Text] = []

    def _name(self, digest: str) -> str:
        return self.names.setdefault(digest, chr(ord("A") + len(self.names)) if len(self.names) < 26 else "?")

    def __call__(self, event: Event) -> None:
        print_ = self.progress.console.print
        if isinstance(event, RunStarted):
            plan = event.plan
            if self.first_line:
                print_(self.first_line)
            print_(Text.assemble((str(event.protocol), "bold"), f": {plan['calibration_rounds']} calibration round(s), "
                                 f"{plan['cycles']} cycle(s) × 2 arms × {plan['per_arm']} calls, {plan['always_fresh']} "
                                 f"always-fresh call(s), {plan['steady']} steady-state call(s); up to "
                                 f"{plan['max_tokens']} tokens each\nrun folder: {event.run_dir}"))
            self.progress.start()
            self.task = self.progress.add_task("starting engine", total=plan["requests"])
        elif isinstance(event, PinningCall):
            self._advance()
            self._describe(f"{event.session} {event.role}")
            ms = f"{event.prefill_ms:.0f}ms" if event.prefill_ms is not None else "?ms"
            label = self._name(event.output_sha256) if event.output_sha256 else "·"
            self.calls.append(Text.assemble(label, (f"({event.state or '?'} {ms})", "dim")))
        elif isinstance(event, PassSummary):
            reload = ("reload confirmed", "green") if event.reload_confirmed else ("reload NOT confirmed", "red")
            print_(Text.assemble(f"{event.session} ({event.phase}, ", reload, "): ", Text(" ").join(self.calls)))
            self.calls = []
        elif isinstance(event, SessionStarted):
            self._describe(f"{event.session}")
        elif isinstance(event, SessionEnded):
            if event.status != "OK":
                print_(Text.assemble(f"{event.session}: ", (str(event.status), "red"), f" — {event.reason}"))
        elif isinstance(event, RunEnded):
            self.close()


def read_results(table: Results | dict[str, Any] | None) -> Results | None:
    """A results table as the model of the kind that wrote it (`Kind.read`: NotResults, one line, for a table of
    another shape), or None for a table no registered kind made. A model is returned as it is: parse once, then
    hand it to `results_view`, `results_note` and the launcher's plot."""
    from kit.protocols import kinds  # noqa: PLC0415 - the live views need no registry

    kind = kinds.for_table(table)
    return kind.read(table) if kind is not None and table is not None else None


def results_view(table: Results | dict[str, Any] | None) -> Any:
    """A results table as its kind renders it (the `render` of its registration), or None for a table
    no registered kind made."""
    from kit.protocols import kinds  # noqa: PLC0415 - the live views need no registry

    typed = read_results(table)
    kind = kinds.for_table(typed)
    return kind.render(typed) if kind is not None and typed is not None else None


def results_note(run_dir: Path, table: Results | dict[str, Any] | None) -> str | None:
    """The line its kind prints under a results table (the `note` of its registration), or None."""
    from kit.protocols import kinds  # noqa: PLC0415 - the live views need no registry

    typed = read_results(table)
    kind = kinds.for_table(typed)
    return kind.note(run_dir, typed) if kind is not None and kind.note and typed is not None else None


def qualitative_lines(run_dir: Path, table: dict[str, Any] | None) -> list[str]:
    """Whether the paper's qualitative findings hold on this run (kit.compare.claims): each claim it measures,
    then the summary line; from the run's analysis/findings.json when it has one, else its results table.
    Empty when it measures none (a kind whose results the claims do not read)."""
    import json  # noqa: PLC0415

    from kit.compare import claims  # noqa: PLC0415
    from kit.compare.evidence import from_run  # noqa: PLC0415
    from kit.core.paths import RunPaths  # noqa: PLC0415

    findings_file = RunPaths(run_dir).findings
    try:
        findings = json.loads(findings_file.read_text(encoding="utf-8")) if findings_file.is_file() else None
        evidence = from_run(findings, [table], "this run")
    except (OSError, ValueError) as exc:  # FindingsShape is a ValueError
        return [f"qualitative: not judged ({exc})"]
    if evidence is None:
        return []
    judged = claims.judge(evidence)
    return ["the paper's findings on this run (judged whatever the model or scale; numbers: `kit analyze`, then "
            "`kit compare`):", *claims.claim_lines(judged, measured_only=True), claims.summary_line(judged)]
