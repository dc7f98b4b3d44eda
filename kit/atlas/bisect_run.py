"""`kit bisect llamacpp --good N --bad M --protocol P --rung R`, the bisect itself: the two ends built and run
first, then midpoints, until it names the first build where the result R changes.

Each step builds llama-server of one build (or finds it cached), runs the protocol on it, verifies the run
and judges its result (kit.atlas.bisect_steps): `good` when it is the good end's result, `bad` otherwise
(a result that is neither end's counts as changed, and is said so), `skip` when the kit cannot drive the
build (its build failed, its run was refused or its engine could not start), as `git bisect skip`. The
search (kit.atlas.bisect_search) picks the plan's midpoints, a skipped one's nearest untested neighbour.

Everything lies in the bisect folder: the state file (kit.atlas.bisect_state, rewritten after every step),
the step runs under runs/, and atlas.html and atlas.csv of the runs so far, rewritten after every step so a
person can open them mid-bisect. Running the same command again continues where it stopped; no step is
built or run twice. Ctrl-C stops it (exit 130) with the state as the last step left it.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kit.atlas import bisect_state, bisect_steps
from kit.atlas.bisect import plan
from kit.atlas.bisect_search import Outcome, Standing, search, standing
from kit.atlas.bisect_state import FORMAT, RUNS, Role, State, Step
from kit.atlas.bisect_steps import Builds, Judged, Say, Verified, judge
from kit.atlas.sources import AtlasRun
from kit.core.errors import ConfigError, KitError, RunInterrupted
from kit.core.paths import outputs_dir
from kit.core.terminal_text import one_line
from kit.protocols import kinds
from kit.run.preflight import check_out


class NoFirstBuild(KitError):
    """The bisect ended without naming a first changed build: the ends give the same result, or the builds
    that could hold the change could not be driven. Exit 4, as a run with no verdict."""

    exit_code = 4


def default_folder(good: int, bad: int, protocol: str, rung: str, model: str | None = None) -> Path:
    served = "" if model is None else f"-{Path(model).name.removesuffix('.gguf')}"
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", f"bisect-llamacpp-{good}-{bad}-{protocol}-{rung}{served}")
    return outputs_dir() / name


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


@dataclass
class Bisect:
    """One bisect in its folder: its state, how a step finds its engine, and what it says."""

    folder: Path
    state: State
    say: Say
    builds: Builds = field(default_factory=Builds)
    verified: Verified = field(default_factory=Verified)

    @property
    def runs(self) -> Path:
        return self.folder / RUNS

    def _record(self, step: Step) -> None:
        self.state = self.state.recorded(step)
        bisect_state.save(self.folder, self.state)

    def _run_of(self, step: Step) -> AtlasRun:
        return self.verified.get(self.runs / str(step.run), self.say)

    def write_atlas(self) -> tuple[Path, Path]:
        """The atlas of every judged step's run, a row per build, oldest build first."""
        judged = sorted((s for s in self.state.steps if s.outcome != "skip"), key=lambda s: s.build)
        return bisect_steps.write_atlas(self.folder, [self._run_of(step) for step in judged])

    def take(self, build: int, role: Role) -> Step:
        """Build, run, verify and judge one build; the step, recorded and saved."""
        say = lambda line: self.say(f"  {one_line(line)}")  # noqa: E731
        built = self.builds.build(build, say)
        if built.why is not None:
            return self._skip(build, role, built.why, built.cached, built.seconds)
        self.say(f"  build {build}: " + (f"cached (built here in {_minutes(built.earlier_seconds)})"
                                         if built.cached and built.earlier_seconds is not None else "cached"
                                         if built.cached else f"built in {_minutes(built.seconds)}"))
        started = time.monotonic()
        self.runs.mkdir(parents=True, exist_ok=True)
        engine = {**self.builds.engine(build), **({} if self.state.model is None else {"model": self.state.model})}
        ran = bisect_steps.run_protocol(self.state.protocol, engine, self.runs, say)
        seconds = time.monotonic() - started
        self.say(f"  run: {_minutes(seconds)}" + (f" ({ran.run_dir})" if ran.run_dir else ""))
        if ran.skip is not None:
            return self._skip(build, role, ran.skip, built.cached, built.seconds, ran.run_dir, seconds)
        assert ran.run_dir is not None
        run = self.verified.get(ran.run_dir, say)
        good = self.state.step("good end")
        judged = judge(run, self.state.rung, run if good is None else self._run_of(good), ran.no_verdict)
        outcome, said = self._outcome(role, judged)
        step = Step(build=build, role=role, outcome=outcome, result=judged.key, said=said, run=ran.run_dir.name,
                    cached=built.cached, build_seconds=built.seconds, run_seconds=seconds)
        self._record(step)
        return step

    def _outcome(self, role: Role, judged: Judged) -> tuple[Outcome, str]:
        good, bad = self.state.step("good end"), self.state.step("bad end")
        if good is None or judged.key == good.result:
            return "good", judged.said
        if bad is not None and judged.key != bad.result:
            return "bad", f"{judged.said}: neither the good end's result ({good.result}) nor the bad end's " \
                          f"({bad.result}), so it counts as changed"
        return "bad", judged.said

    def _skip(self, build: int, role: Role, why: str, cached: bool, build_seconds: float, run_dir: Path | None = None,
              run_seconds: float | None = None) -> Step:
        step = Step(build=build, role=role, outcome="skip", result=None, said=one_line(why)[:2_000],
                    run=run_dir.name if run_dir else None, cached=cached, build_seconds=build_seconds,
                    run_seconds=run_seconds)
        if role == "midpoint":
            self._record(step)
        return step

    def ends(self) -> None:
        """The good end, then the bad end, built, run and judged (each once); an end the kit cannot drive is
        refused, since a bisect needs both."""
        ends: tuple[tuple[Role, int, str], ...] = (("good end", self.state.good, "--good"),
                                                    ("bad end", self.state.bad, "--bad"))
        for role, build, option in ends:
            if self.state.step(role) is not None:
                continue
            self.say(f"{role}: build {build}")
            step = self.take(build, role)
            if step.outcome == "skip":
                raise ConfigError(f"the {role} {build} cannot be bisected from: {step.said}",
                                  f"fix that, or give another {option} (the same command continues)")
            self._report(step)

    def _report(self, step: Step) -> None:
        self.say(f"  result: {step.said}")
        self.say(f"  verdict: {step.outcome}")

    def midpoints(self) -> Standing:
        """Midpoints tested until done; the standing then."""
        state = self.state

        def step(build: int, now: Standing) -> Outcome:
            done = sum(1 for s in self.state.steps if s.role == "midpoint")
            self.say(f"step {done + 1} (at most {now.steps_left} left): build {build}")
            taken = self.take(build, "midpoint")
            if taken.outcome == "skip":
                self.say(f"  skip: build {build}: {taken.said}")
            else:
                self._report(taken)
            return taken.outcome

        def after(build: int, outcome: Outcome, now: Standing) -> None:
            self.write_atlas()
            self.say(f"  range left: {now.range_text()}")

        return search(state.good, state.bad, state.builds, state.outcomes(), step, after)

    def table(self) -> list[str]:
        """Each step's build and run seconds, result and verdict, one line each."""
        lines = [f"{'build':>7}  {'role':<9}  {'build':<10}  {'run':>9}  {'verdict':<7}  result"]
        for s in self.state.steps:
            build = "cached" if s.cached else f"{s.build_seconds:.0f} s"
            run = "—" if s.run_seconds is None else f"{s.run_seconds:.0f} s"
            lines.append(f"{s.build:>7}  {s.role:<9}  {build:<10}  {run:>9}  {s.outcome:<7}  {s.said}")
        return lines


def resolved(good: int, bad: int, protocol: str, rung: str, out: Path | None,
             available: Callable[[], list[int]], model: str | None = None) -> tuple[Path, State, list[str]]:
    """The bisect the command line asks for: its folder, its state (a new one, or the folder's own, checked)
    and its plan's lines. Refused in one line before anything is written."""
    if good >= bad:
        raise ConfigError(f"--good {good} is not before --bad {bad}", "give the older build as --good")
    _, path, digest = kinds.load(protocol)
    folder = out or default_folder(good, bad, path.stem, rung, model)
    check_out(folder)
    wanted = State(format=FORMAT, engine="llamacpp", good=good, bad=bad, protocol=protocol, protocol_sha256=digest,
                   rung=rung, cpu_backend="portable", model=model, builds=[])
    held = bisect_state.load(folder, wanted)
    listed = available() if held is None else [good, *held.builds, bad]
    planned = plan(good, bad, protocol, rung, listed)
    state = held or wanted.model_copy(update={"builds": planned.between})
    return folder, state, planned.lines()


def bisect(good: int, bad: int, protocol: str, rung: str, out: Path | None, say: Say,
           available: Callable[[], list[int]], builds: Builds | None = None, model: str | None = None) -> str:
    """Run (or continue) the bisect; the first build where the result changes, as the final line says it.
    NoFirstBuild (exit 4) when none can be named; RunInterrupted (exit 130) when stopped."""
    folder, state, lines = resolved(good, bad, protocol, rung, out, available, model)
    for line in lines:
        say(line)
    work = Bisect(folder, state, say, builds or Builds())
    if state.steps:
        say(f"continuing the bisect in {folder}: {len(state.steps)} step(s) done")
    else:
        folder.mkdir(parents=True, exist_ok=True)
        bisect_state.save(folder, state)
    try:
        work.ends()
        good_step, bad_step = work.state.step("good end"), work.state.step("bad end")
        assert good_step is not None and bad_step is not None
        if bad_step.outcome == "good":
            html, csv = work.write_atlas()
            for line in work.table():
                say(line)
            raise NoFirstBuild(f"nothing changed between {good} and {bad} on {rung}: both give {good_step.result}"
                               f" (atlas: {html}, {csv})", "bisect another result (--rung), or other builds")
        work.write_atlas()
        say(f"range: {standing(good, bad, state.builds, work.state.outcomes()).range_text()}")
        found = work.midpoints()
    except (KeyboardInterrupt, RunInterrupted) as exc:
        raise RunInterrupted(f"the bisect was stopped ({exc if isinstance(exc, RunInterrupted) else 'Ctrl-C'}); "
                             f"{bisect_state.path_of(folder)} keeps the {len(work.state.steps)} step(s) done",
                             "run the same command to continue") from None
    html, csv = work.write_atlas()
    for line in work.table():
        say(line)
    say(f"atlas: {html}  {csv}")
    say(f"state: {bisect_state.path_of(folder)}")
    if found.skipped:
        raise NoFirstBuild(f"no first build where {rung} changes could be named: {found.answer()}",
                           f"fix what kept those builds from running, then delete {bisect_state.path_of(folder)} and run the same "
                           "command (steps are rerun; builds stay cached)")
    answer = f"first build where {rung} changes: {found.answer()}"
    say(answer)
    return answer
