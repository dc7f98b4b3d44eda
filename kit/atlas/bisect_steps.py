"""One step of `kit bisect`, the parts that touch the machine: llama-server of build N built (or found cached,
kit.launch.llamacpp.llamacpp_build), the protocol run on it through the runner exactly as `kit run
--engine-build N` runs it, the run verified as the atlas verifies its inputs (kit.atlas.sources), and the
result the bisect is about read from what was verified.

The result (`--rung`) is one of:
- a ladder rung (L0..L7): the rung's verdict in the run's ladder headline (holds, diverges, VOID, not measured);
- a paper measure (`IV:paths_differ`): its value in each of the run's rows of that table (point value and
  counts, per session where the table has sessions; the interval is not compared);
- `outputs`: whether every request the run shares with the good end's run (same pass, seq and request
  digest) got byte-identical outputs, by the atlas's replay identity (kit.atlas.table.identical);
- `logprobs`: the same, the answers' log-probabilities (as the engine sent them) compared too: a build whose
  tokens stay but whose numbers moved (a kernel's summation order) differs here.
A run that finished with no verdict (every pass VOID: `kit run` exits 4) has the result `no verdict`.
"""

from __future__ import annotations

import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kit.atlas.bisect import IDENTITIES, OUTPUTS, measures
from kit.atlas.sources import AtlasRun, verified
from kit.atlas.table import identical
from kit.compare.measures import MEASURES, Measured
from kit.compare.run_rows import FindingsShape, read_rows
from kit.core.errors import ConfigError, EngineError, KitError, RunInterrupted
from kit.launch.llamacpp import llamacpp_build
from kit.protocols.ladder.table import LadderResults
from kit.run import runner

Say = Callable[[str], None]
NO_VERDICT = "no verdict"
BACKEND = "portable"  # the CPU backend every step is built for: the embedded engine's machine code


@dataclass(frozen=True)
class Judged:
    """A run's result: `key` is what is compared with the ends' (equal keys: the same result), `said` the line
    shown."""

    key: str
    said: str


def _value(m: Measured, kind: str) -> str:
    """A measure's point value (percent where it is a rate) and its counts, per session where it has them."""
    if m.sessions:
        return "; ".join(f"s{number} {_value(s, kind)}" for number, s in enumerate(m.sessions, 1))
    if m.value is None:
        return "no value"
    counts = f" ({m.k}/{m.n})" if m.k is not None and m.n is not None else ""
    return f"{m.value:.6g}{'%' if kind == 'rate' else ''}{counts}"


def _measure(run: AtlasRun, rung: str) -> Judged:
    if run.findings is None:
        return Judged("not measured", f"{rung}: not measured (the run's kind has no paper tables)")
    table, quantity = rung.split(":", 1)
    try:
        rows = read_rows(run.findings, measures()[rung])
    except FindingsShape as exc:
        return Judged("not measured", f"{rung}: its analysis is malformed ({exc})")
    kind = MEASURES[measures()[rung]][quantity].kind
    values = [(_value(row.measures[quantity], kind) if quantity in row.measures else
               f"not measured ({row.missing.get(quantity, 'absent')})") for row in rows]
    key = " | ".join(values) if values else "not measured"
    return Judged(key, f"{rung} {key}" if values else f"{rung}: not measured (the run has no Table {table} row)")


def _rung(run: AtlasRun, rung: str) -> Judged:
    held = run.results.get("ladder")
    if not isinstance(held, dict):
        return Judged("not measured", f"{rung}: not measured (the run has no ladder results)")
    status = LadderResults.model_validate(held).headline.rungs.get(rung, "not measured")
    return Judged(status, f"{rung} {status}")


def judge(run: AtlasRun, rung: str, good: AtlasRun, no_verdict: str | None = None) -> Judged:
    """The result `rung` of a verified run; `good` is the good end's run (the reference of `outputs`), and
    `no_verdict` why the run gave no verdict, if it did not."""
    if no_verdict is not None:
        return Judged(NO_VERDICT, f"{NO_VERDICT}: {no_verdict}")
    if rung in IDENTITIES:
        same, shared = identical(*((good.outputs, run.outputs) if rung == OUTPUTS else (good.numbers, run.numbers)))
        if not shared:
            return Judged("no request in common with the good end", f"{rung}: no request in common with the good "
                          "end's run (same pass, seq and request digest)")
        key = "same as good" if same == shared else "differ from good"
        what = "outputs" if rung == OUTPUTS else "outputs and log-probabilities"
        return Judged(key, f"{rung} {key}: {same}/{shared} requests' {what} byte-identical to the good end's")
    return _measure(run, rung) if rung in measures() else _rung(run, rung)


@dataclass(frozen=True)
class Built:
    """A build looked up: found cached, or built now in `seconds`; `why` when the kit could not build it."""

    cached: bool
    seconds: float
    earlier_seconds: float | None = None  # a cached build: how long BUILD.json says it took
    why: str | None = None


def build_step(build: int, say: Say) -> Built:
    """llama-server of `build` for the portable CPU backend: the cached one (checked against its BUILD.json),
    else built now (kit.launch.llamacpp.llamacpp_build.build)."""
    cached = llamacpp_build.built(build, BACKEND) is not None
    started = time.monotonic()
    try:
        llamacpp_build.build(build, BACKEND, say=say)
        held = llamacpp_build.record(build, BACKEND).get("build_seconds")
    except (KitError, OSError, tarfile.TarError, ValueError) as exc:
        why = exc.line() if isinstance(exc, KitError) else f"{type(exc).__name__}: {exc}"
        return Built(cached, time.monotonic() - started, why=f"its build failed: {why}")
    earlier = float(held) if isinstance(held, (int, float)) and not isinstance(held, bool) else None
    return Built(cached, 0.0 if cached else time.monotonic() - started, earlier)


def engine_options(build: int) -> dict[str, Any]:
    """The run options that choose build N's llama-server, as `kit run --engine-build N` passes them."""
    return {"engine_build": build, "cpu_backend": BACKEND}


@dataclass(frozen=True)
class Builds:
    """How a step finds its engine: `make` builds (or finds) build N, `options` gives the run options that run
    it. Unset: the real ones (build_step, engine_options: built from the sdist, run with --engine-build N); a
    test may substitute them."""

    make: Callable[[int, Say], Built] | None = None
    options: Callable[[int], dict[str, Any]] | None = None

    def build(self, build: int, say: Say) -> Built:
        return (self.make or build_step)(build, say)

    def engine(self, build: int) -> dict[str, Any]:
        return (self.options or engine_options)(build)


@dataclass(frozen=True)
class Ran:
    """A step's run: its folder, and why the build was skipped (the run refused: `kit run` exits 2; its engine
    could not start: 3) or gave no verdict (4), if so."""

    run_dir: Path | None
    skip: str | None = None
    no_verdict: str | None = None


def run_protocol(protocol: str, engine: dict[str, Any], runs: Path, say: Say) -> Ran:
    """The protocol run on the engine `engine` chooses, into a new folder under `runs`, through the runner as
    `kit run` runs it (a bisect is asked for whole: a long protocol is not asked about again)."""
    options = runner.RunOptions(protocol=protocol, out=runs, confirmed=True, **engine)
    try:
        result = runner.run(options, say=say)
    except EngineError as exc:
        return Ran(None, skip=f"its engine could not start: {exc.line()}")
    except KitError as exc:
        return Ran(None, skip=f"its run was refused: {exc.line()}")
    if result.status == "interrupted":
        raise RunInterrupted(f"the run {result.run_dir} was interrupted: {result.reason}")
    if result.status != "finished":
        return Ran(result.run_dir, skip=f"its run {result.status}: {result.reason}")
    return Ran(result.run_dir, no_verdict=result.no_verdict())


@dataclass
class Verified:
    """The step runs verified so far in this process (a run folder is verified once), by folder."""

    runs: dict[Path, AtlasRun] = field(default_factory=dict)

    def get(self, run_dir: Path, say: Say) -> AtlasRun:
        if run_dir not in self.runs:
            with verified([run_dir], say=say) as found:
                if len(found) != 1:
                    raise ConfigError(f"{run_dir} holds {len(found)} runs, not the one a bisect step made",
                                      "delete the bisect folder and start over")
                self.runs[run_dir] = found[0]
        return self.runs[run_dir]


def write_atlas(folder: Path, runs: list[AtlasRun]) -> tuple[Path, Path]:
    """The bisect folder's atlas of its step runs (one row per build), as `kit atlas -o --csv` writes it."""
    from kit.atlas import render, table  # noqa: PLC0415
    from kit.core.atomic_file import write_text_atomic  # noqa: PLC0415

    built = table.build(runs)
    html, csv = folder / "atlas.html", folder / "atlas.csv"
    write_text_atomic(html, render.html_page(built, title=f"kit bisect: {folder.name}"))
    write_text_atomic(csv, render.csv_text(built))
    return html, csv

