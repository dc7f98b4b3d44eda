"""Writing a procedure's results into its run folder: one JSON (the whole table, written through its model) and
one CSV (its rows)."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kit.core.atomic_file import write_json_atomic, writing
from kit.core.paths import RunPaths
from kit.protocols.results_model import JsonObject, Results


def write_results(run_dir: Path, table: Results, json_name: str, csv_name: str, fields: Sequence[str],
                  rows: Iterable[Mapping[str, Any]]) -> JsonObject:
    """results/<json_name>.json holds `table`; results/<csv_name>.csv holds `rows` (only `fields`). Returns the
    table as written (its JSON values)."""
    out = RunPaths(run_dir).results
    out.mkdir(exist_ok=True)
    written = table.to_json()
    write_json_atomic(out / f"{json_name}.json", written)
    with writing(out / f"{csv_name}.csv") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(fields), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return written
