"""`kit import`: records of other harnesses as kit run folders."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import click


def thresholds(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[float, float] | None:
    """`LOW,HIGH` in ms: two finite numbers, 0 <= LOW <= HIGH <= 10^7."""
    if value is None:
        return None
    try:
        low, high = (float(part) for part in value.split(","))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not LOW,HIGH (two numbers of ms, e.g. 25,30)") from None
    if not (math.isfinite(low) and math.isfinite(high) and 0 <= low <= high <= 1e7):
        raise click.BadParameter(f"{value!r}: give 0 <= LOW <= HIGH <= 10000000 ms")
    return low, high


THRESHOLDS = click.option("--thresholds", callback=thresholds, metavar="LOW,HIGH",
                          help="Fixed prefill classes in ms: calls below LOW, between, above HIGH, per state; "
                               "also the LOW and HIGH of the cache-timing and cache-instance gates (without it: the "
                               "harness's registered 25,30, and only the kit's own classes).")


@contextmanager
def _progress(console) -> Iterator[Callable[[str, int, int], None]]:
    """How far each pass over a large calls file is, as a bar on a terminal (nothing elsewhere)."""
    if not console.is_terminal:
        yield lambda what, done, total: None
        return
    from rich.progress import BarColumn, Progress, TaskID, TaskProgressColumn, TextColumn  # noqa: PLC0415

    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), TaskProgressColumn(), console=console,
                  transient=True) as bar:
        tasks: dict[str, TaskID] = {}

        def update(what: str, done: int, total: int) -> None:
            if what not in tasks:
                tasks[what] = bar.add_task(what, total=total)
            bar.update(tasks[what], completed=done, total=total)

        yield update


@click.group("import")
def import_group() -> None:
    """Bring another harness's records into the kit as a run folder (analyse, bundle, verify)."""


@import_group.command("determinism-harness")
@click.argument("calls", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--report", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="The harness's own analyzer report for this study: kept beside the calls and compared value "
                   "by value with the kit's numbers (each box's values against that box's block).")
@THRESHOLDS
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Parent folder of the run folder (default: outputs/).")
def determinism_harness(calls: tuple[Path, ...], report: Path | None, thresholds: tuple[float, float] | None,
                        out: Path | None) -> None:
    """Import seed 002's determinism-harness run CALLS (its .jsonl; the .manifest.json and .done.json the
    harness writes beside it are read too): every call, in execution order, as a kit run folder. Give
    several CALLS files (the harness writes one per box) to import a study's boxes as one run.

    Prints per box and arm the calls, outputs and prefill times, the gates, the boxes compared with each
    other, and with --report how many of the report's values the kit's own numbers agree with.
    """
    from kit.core.safe_console import SafeConsole  # noqa: PLC0415
    from kit.importers.determinism_harness import HarnessFiles, import_run  # noqa: PLC0415
    from kit.core.paths import outputs_dir  # noqa: PLC0415
    from kit.run.preflight import check_out  # noqa: PLC0415
    from kit.protocols.kinds import KINDS  # noqa: PLC0415

    target = out or outputs_dir()
    check_out(target, "--out")
    console = SafeConsole()
    with _progress(console) as progress:
        run_dir = import_run([HarnessFiles.beside(path, report) for path in calls], target, thresholds, progress)
    harness = KINDS["harness"]
    console.print(harness.render(harness.read(harness.results(run_dir))))
    console.print(f"run folder: {run_dir}  (analyse it with `kit analyze {run_dir}`, bundle it with `kit bundle`)")
