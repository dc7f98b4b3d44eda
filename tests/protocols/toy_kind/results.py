"""The toy kind's results, from the run folder's files only: the answers and how many differ, as its typed model
(`ToyResults`, which its view reads)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kit.core.atomic_file import write_json_atomic
from kit.core.paths import RunPaths
from kit.record.files import read_records, require_whole
from kit.record.manifest import Manifest
from kit.protocols.results_model import Count, Results

TABLE = "toy answers"
FILE = "results/toy.json"


class ToyResults(Results):
    """results/toy.json: how many answers, how many distinct, the first."""

    answers: Count
    distinct: Count
    first: str | None = None


def toy_results(run_dir: Path) -> ToyResults:
    """The results table, read from the run folder."""
    passes = Manifest.load(run_dir).run.passes
    require_whole(run_dir, passes)
    answers = [record["completion"]["text"] for info in passes.values() if info.status == "OK" and info.file
               for record in read_records(run_dir / info.file).records]
    return ToyResults(table=TABLE, files={"toy": FILE}, answers=len(answers), distinct=len(set(answers)),
                      first=answers[0] if answers else None)


def toy_table(run_dir: Path) -> dict[str, Any]:
    """The results table's JSON values (what `kit analyze` keeps for a toy run)."""
    return toy_results(run_dir).to_json()


def results(run_dir: Path) -> ToyResults:
    table = toy_results(run_dir)
    RunPaths(run_dir).results.mkdir(exist_ok=True)
    write_json_atomic(run_dir / FILE, table.to_json())
    return table
