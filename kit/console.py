"""Terminal views of a run: a live progress bar with one line per item verdict, and result tables."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from rich.console import Console, Group
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
)
from kit.terminal_text import shown


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
            print_(f"[bold]{shown(event.protocol)}[/]: {shown(summary)}\nrun folder: {shown(event.run_dir)}")
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
            print_(f"{shown(event.pass_id)} {event.done}/{event.total} {event.unit}: {event.requests} requests, "
                   f"{shown(event.outcome)}, BFCL {valid}")
        elif isinstance(event, EpisodeVerdict):
            a, b = event.passes
            where = (f"[yellow]DIVERGED[/] at request {event.request_index}"
                     + (f", token {event.token_index}" if event.token_index is not None else f" ({event.kind})")
                     if event.diverged else "identical")
            print_(f"  {event.comparison} ({a} vs {b}) {event.unit}: {where}")
        elif isinstance(event, SessionStarted):
            launch = event.launch
            build = launch.get("build_info") or " ".join(str(launch[k]) for k in ("engine", "version") if launch.get(k))
            startup = launch.get("startup_seconds")
            how = (f", started in {startup:.1f} s" if startup is not None
                   else ", in a container" if "container" in launch else " (external)")
            print_(f"session {shown(event.session)} ({event.index}/{event.total}): engine {shown(build or '?')}{how}")
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
            why = f" — {shown(event.reason)}" if event.reason else ""
            print_(f"{shown(event.session)}: [{style}]{shown(event.status)}[/]{why}")
        elif isinstance(event, Notice):
            print_(f"[dim]{shown(event.text, fold=False)}[/]")
        elif isinstance(event, RunEnded):
            self.close()

    def say(self, text: object) -> None:
        """Print a line of the kit's that may quote a file, a path or an engine (escaped, see `shown`)."""
        self.console.print(shown(text, fold=False))

    def close(self) -> None:
        if self.progress.live.is_started:  # stopping a bar never started prints a stray blank line
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
            view.add_row(shown(row["session"]), "OK", str(row["items"]), str(row["recompute_reproduces"]),
                         str(row["hit_reproduces"]), str(row["paths_differ"]), str(row["cache_caused"]))
            if row.get("outcomes"):
                o = row["outcomes"]
                answers.append(f"{shown(row['session'])}: correct recompute {o['recompute_correct']}/{o['items']}, "
                               f"cache hit {o['hit_correct']}/{o['items']}; flips {o['recompute_right_hit_wrong']} "
                               f"right→wrong, {o['recompute_wrong_hit_right']} wrong→right "
                               f"(exact McNemar p={o['mcnemar']['p']:.3g})")
        else:
            view.add_row(shown(row["session"]), f"[red]{shown(row['status'])}[/]", "—", "—", "—", "—", "—")
    across = table["across_sessions"]
    if "items" in across:
        view.caption = (f"same in all {across['sessions']} OK sessions: recompute {across['recompute_same_in_all']}"
                        f"/{across['items']}, cache hit {across['hit_same_in_all']}/{across['items']}")
    else:
        view.caption = f"across sessions: {shown(across['note'])}"
    view.caption = "\n".join([view.caption, *answers])
    view.caption_justify = "left"
    return view


def cut_answers_note(run_dir: Path, table: dict[str, Any] | None) -> str | None:
    """Under a restored-state table whose answers were cut short: why its correct counts read low (e.g. the
    demo's 64 tokens end most answers before their '####' line). None when no scored answer was cut."""
    if not table or table.get("table") != "restored-state control" or not any(
            row.get("outcomes") for row in table.get("sessions", [])):
        return None
    from kit.protocols.reset.results import cut_answers  # noqa: PLC0415

    max_tokens, sessions = cut_answers(run_dir)
    counts = [f"{cut} of {scored} in {session}" for session, (scored, cut) in sessions.items() if cut]
    if not counts:
        return None
    most = any(2 * cut > scored for scored, cut in sessions.values())
    return (f"correctness: answers cut at {max_tokens} tokens before any final answer ('#### n') count as wrong: "
            f"{', '.join(counts)} (recompute and cache-hit answers scored); "
            f"{'so the correct counts above do not measure accuracy; ' if most else ''}"
            "more tokens (--max-tokens) give the answers room")


class PinningReporter(ConsoleReporter):
    """Shows a pinning run: one line per pass with its measured outputs (A, B, ... in order of first
    appearance) and the cache state of each call."""

    def __init__(self, console: Console | None = None):
        super().__init__(console)
        self.names: dict[str, str] = {}
        self.calls: list[str] = []

    def _name(self, digest: str) -> str:
        return self.names.setdefault(digest, chr(ord("A") + len(self.names)) if len(self.names) < 26 else "?")

    def __call__(self, event: Event) -> None:
        print_ = self.progress.console.print
        if isinstance(event, RunStarted):
            plan = event.plan
            print_(f"[bold]{shown(event.protocol)}[/]: {plan['calibration_rounds']} calibration round(s), {plan['cycles']} "
                   f"cycle(s) × 2 arms × {plan['per_arm']} calls, {plan['always_fresh']} always-fresh call(s), "
                   f"{plan['steady']} steady-state call(s); up to {plan['max_tokens']} tokens each\n"
                   f"run folder: {shown(event.run_dir)}")
            self.progress.start()
            self.task = self.progress.add_task("starting engine", total=plan["requests"])
        elif isinstance(event, PinningCall):
            self.progress.advance(self.task)
            self.progress.update(self.task, description=f"{event.session} {event.role}")
            ms = f"{event.prefill_ms:.0f}ms" if event.prefill_ms is not None else "?ms"
            label = self._name(event.output_sha256) if event.output_sha256 else "·"
            self.calls.append(f"{label}[dim]({shown(event.state or '?')} {ms})[/]")
        elif isinstance(event, PassSummary):
            reload = "[green]reload confirmed[/]" if event.reload_confirmed else "[red]reload NOT confirmed[/]"
            print_(f"{shown(event.session)} ({shown(event.phase)}, {reload}): " + " ".join(self.calls))
            self.calls = []
        elif isinstance(event, SessionStarted):
            self.progress.update(self.task, description=f"{event.session}")
        elif isinstance(event, SessionEnded):
            if event.status != "OK":
                print_(f"{shown(event.session)}: [red]{shown(event.status)}[/] — {shown(event.reason)}")
        elif isinstance(event, RunEnded):
            self.close()


def _share(summary: dict[str, Any]) -> str:
    if not summary.get("n"):
        return "—"
    lo, hi = summary["wilson95"]
    return f"{summary['modal_count']}/{summary['n']} [{lo:.2f}, {hi:.2f}]"


def pinning_verdict(table: dict[str, Any]) -> Group:
    """The short verdict of `kit check`: states with their prefill signatures, determinism per state,
    the gate, whether the arms differ and where they fork, the pinned regimes, and the advice."""
    states = Table(title="Cache states found (cycle calls of the measured prompt)", title_justify="left")
    for column in ("state", "calls", "prefill ms median [min–max]", "outputs", "modal share [95% CI]"):
        states.add_column(column)
    for s in table["states"]:
        ms = s.get("prefill_ms")
        sig = f"{ms['median']:.1f} [{ms['min']:.1f}–{ms['max']:.1f}]" if ms else "—"
        states.add_row(shown(s["state"]), shown(", ".join(s["roles"])), sig,
                       f"{s['distinct']} (modal {shown(s['modal_output'])})", _share(s))
    gate = table["gate"]
    style = "green" if gate["status"] == "PASS" else "red"
    lines = [f"gate: [{style}]{shown(gate['status'])}[/] — reloads confirmed {gate['reloads_confirmed'][0]}/"
             f"{gate['reloads_confirmed'][1]}; arm states {shown(gate['arm_states'])}"
             + (f"; {shown('; '.join(gate['reasons']))}" if gate["reasons"] else "")]
    arms = table["arms"]
    if arms.get("differ") is None:
        lines.append(f"arms: {shown(arms.get('withheld', 'not measured'))}")
    else:
        fork = arms.get("fork")
        lines.append(f"arms: pure {_share(arms['pure'])} output {shown(arms['pure'].get('modal_output'))}, "
                     f"contaminated {_share(arms['contaminated'])} output "
                     f"{shown(arms['contaminated'].get('modal_output'))}; "
                     + (f"[yellow]differ[/], fork at character {fork['char']}, token {fork['token']}"
                        if arms["differ"] else "identical"))
        flips = [c for c in table["cycles"] if c["flip_at_interposed_only"]]
        lines.append(f"flip at the interposed call (and nowhere else in the arms): {len(flips)} of "
                     f"{len(table['cycles'])} cycles")
    regimes = table["regimes"]
    lines.append(f"pinned regimes: always-fresh {_share(regimes['always_fresh'])}, "
                 f"steady-state {_share(regimes['steady'])}")
    lines += [f"• {shown(line)}" for line in table["verdict"]["advice"]]
    return Group(states, *lines)


def _rate(comparison: dict[str, Any]) -> tuple[str, str, str]:
    if "skipped" in comparison:
        return "—", "—", shown(comparison["skipped"])
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
        view.add_row(shown(name), shown(" vs ".join(comparison["passes"])), *_rate(comparison),
                     ", ".join(map(str, firsts[:8])) + (" …" if len(firsts) > 8 else ""))
    outcomes = []
    for row in table["passes"]:
        if "outcomes" in row:
            outcomes.append(f"{shown(row['pass'])} {row['outcomes']['valid']}/{row['outcomes']['episodes']} valid")
        else:
            outcomes.append(f"{shown(row['pass'])} {shown(row['status'])}"
                            + (f" ({shown(row['reason'])})" if row.get("reason") else ""))
    identity = table["comparisons"].get("run-to-run cache-off", {}).get("identity")
    caption = "BFCL outcomes: " + "; ".join(outcomes)
    if identity:
        caption += (f"\ncache-off repeat: {identity['episodes_identical']}/{identity['episodes']} episodes identical, "
                    f"{identity['logprobs_identical']}/{identity['logprob_records']} log-probabilities identical")
    view.caption, view.caption_justify = caption, "left"
    return view


def sweep_table(table: dict[str, Any]) -> Table:
    """Path divergence per weight format over histories, then the reference and replicate checks."""
    view = Table(title="Sweep: path divergence (cache-on pass vs the format's cache-off reference)",
                 title_justify="left")
    for column in ("format", "diverged per history", "mean", "SD", "range", "status varies"):
        view.add_column(column)
    for label, row in table["formats"].items():
        if "skipped" in row:
            view.add_row(shown(label), shown(row["skipped"]), "—", "—", "—", "—")
            continue
        cells = {c["history"]: c for c in table["cells"].values() if c["format"] == label and "skipped" not in c}
        per_history = "  ".join(f"h{h} {c['diverged']}/{c['episodes']}" for h, c in sorted(cells.items()))
        view.add_row(shown(label), shown(per_history), f"{100 * row['mean']:.1f}%", f"{100 * row['sd']:.1f}",
                     f"{100 * row['min']:.0f}–{100 * row['max']:.0f}%", f"{row['episodes_status_varies']}/{row['episodes']}")
    notes = []
    for label, check in table["reference_check"].items():
        if "skipped" in check:
            notes.append(f"{shown(label)} reference: {shown(check['skipped'])}")
        else:
            verdict = "identical" if check["identical"] else f"[yellow]{check['diverged']} episodes differ[/]"
            notes.append(f"{shown(label)} reference under two orders: {verdict}")
    for label, check in table["replicates"].items():
        if "diverged" in check:
            notes.append(f"{shown(label)} second process, canonical history: {check['diverged']}/{check['episodes']} differ")
    if table["void_passes"]:
        notes.append("not analysed: " + shown(", ".join(f"{v['pass']} ({v['status']})" for v in table["void_passes"])))
    view.caption, view.caption_justify = "\n".join(notes), "left"
    return view


def flag_order_table(table: dict[str, Any]) -> Table:
    """Table III from one run: run-to-run cache-on divergence per cell (setting × pass order), the
    quartile split of the divergent episodes, then whether the two orders agree per setting."""
    view = Table(title="Flag × order: cache-on passes repeated (run-to-run divergence)", title_justify="left")
    for column in ("prompt cache", "order", "diverged", "rate", "95% CI (Wilson)", "per quartile", "trend p",
                   "path", "requests (1st pass)"):
        view.add_column(column)
    for cell in table["cells"].values():
        r2r = cell["run_to_run"]
        quartiles = r2r.get("quartiles") or {}
        path = cell.get("path")
        view.add_row(shown(cell["prompt_cache"]), shown(cell["order"]), *_rate(r2r),
                     " ".join(map(str, quartiles.get("diverged") or [])) or "—",
                     f"{quartiles['trend']['p']:.2g}" if quartiles else "—",
                     "—" if path is None else _rate(path)[0] if "skipped" not in path else "skipped",
                     str(cell["requests_first_pass"] if cell["requests_first_pass"] is not None else "—"))
    notes = []
    for name, check in table["orders"].items():
        verdict = {True: "identical token for token", False: "[yellow]differ[/]", None: "not compared"}[
            check["identical"]]
        counts = "; ".join(f"{k} {c['episodes_identical']}/{c['episodes']} episodes, {c['tokens']} tokens"
                           for k, c in check["cache_on"].items() if "skipped" not in c)
        notes.append(f"{shown(name)}: cache-on passes {verdict}" + (f" ({shown(counts)})" if counts else ""))
    servers = table.get("fresh_server_per_arm")
    notes.append({True: "every arm ran on its own fresh server", False: "[red]arms did not each run on one "
                  "fresh server of their own[/]", None: "no servers recorded"}[servers])
    if table["void_passes"]:
        notes.append("not analysed: " + shown(", ".join(f"{v['pass']} ({v['status']})" for v in table["void_passes"])))
    view.caption, view.caption_justify = "\n".join(notes), "left"
    return view


def results_view(table: dict[str, Any] | None) -> Any:
    """A results table as its kind renders it (the `render` of its registration), or None for a table
    no registered kind made."""
    from kit.protocols import kinds  # noqa: PLC0415 - the live views need no registry

    kind = kinds.for_table(table)
    return kind.render(table) if kind else None


def harness_table(table: dict[str, Any]) -> Group:
    """An imported determinism-harness run: per arm its outputs and prefill, the gates, the report's verdict."""
    arms = Table(title=f"Imported harness run ({shown(table.get('mode'))}): measured calls per arm",
                 title_justify="left")
    for column in ("arm", "n (of raw)", "distinct outputs", "modal share", "modal output",
                   "prefill ms median [min–max]"):
        arms.add_column(column)
    for arm, m in table["arms"].items():
        ms = m.get("prefill_ms")
        share = f"{m['modal_share']:.3f}" if m["modal_share"] is not None else "—"
        prefill = f"{ms['median']:.1f} [{ms['min']:.1f}–{ms['max']:.1f}]" if ms else "—"
        arms.add_row(shown(arm), f"{m['n']} ({m['n_raw']})", str(m["distinct_count"]), share,
                     shown((m["modal_sha256"] or "—")[:12]), prefill)
    parts: list[Any] = [arms]
    if table.get("by_state"):
        low, high = table["thresholds_ms"]
        states = Table(title=f"Per prefill state (below {low:g} ms, between, above {high:g} ms)", title_justify="left")
        for column in ("arm", "state", "n", "distinct outputs", "modal share", "prefill ms median"):
            states.add_column(column)
        for arm, by_state in table["by_state"].items():
            for state, m in by_state.items():
                median = f"{m['prefill_ms']['median']:.1f}" if m.get("prefill_ms") else "—"
                share = f"{m['modal_share']:.3f}" if m["modal_share"] is not None else "—"
                states.add_row(shown(arm), shown(state), str(m["n"]), str(m["distinct_count"]), share, median)
        parts.append(states)
    gate = table["gates"]["manipulation"]
    lines = [f"manipulation gate: {_verdict(gate.get('pass'))} ({shown(gate['rule'])})",
             f"arms differ: {_arms_differ(table['arms_differ'], gate.get('pass'))}",
             "prefill classes (kit): " + shown("; ".join("+".join(c) for c in table["prefill_classes"]["classes"]))]
    if table.get("cycles"):
        flips = sum(1 for c in table["cycles"] if c["flips"])
        lines.append(f"cycles: {len(table['cycles'])}, output flips at the interposed call in {flips}")
    report = table.get("report_comparison")
    if report:
        lines.append(f"the harness's report: {report['agree']} of {report['compared']} values agree"
                     + (f"; differ: {shown(', '.join(report['differ']))}" if report["differ"] else ""))
    return Group(*parts, *lines)


def _arms_differ(differ: bool | None, passed: bool | None) -> str:
    if differ is not None:
        return str(differ).lower()
    return "not judged (" + ("the gate did not pass)" if passed is False else "no manipulation gate for this mode)")


def _verdict(passed: bool | None) -> str:
    return "not evaluated" if passed is None else "[green]PASS[/]" if passed else "[red]FAIL[/]"
