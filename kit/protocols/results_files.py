"""Writing a procedure's results into its run folder: one JSON (the whole table) and one CSV (its rows)."""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from kit.core.atomic_file import write_json_atomic, writing
from kit.core.paths import RunPaths


def write_results(run_dir: Path, table: dict[str, Any], json_name: str, csv_name: str, fields: Sequence[str],
                  rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """results/<json_name>.json holds `table`; results/<csv_name>.csv holds `rows` (only `fields`)."""
    out = RunPaths(run_dir).results
    out.mkdir(exist_ok=True)
    write_json_atomic(out / f"{json_name}.json", table)
    with writing(out / f"{csv_name}.csv") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(fields), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return table
