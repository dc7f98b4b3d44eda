"""`kit show`: the headline results and provenance of a bundle, read without extracting it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kit.bundle import INDEX, SCHEMA, SCHEMA_VERSION, safe_tar
from kit.bundle.content import BundledRun, runs_from_files, summary
from kit.bundle.verify import NewerBundle, schema_version

SHOWN_SUFFIXES = (".json", ".csv")


def _text_table(rows: list[dict[str, Any]]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns and not isinstance(row[k], (list, dict)))
    cells = [[str(c) for c in columns]] + [["-" if r.get(c) is None else str(r.get(c)) for c in columns] for r in rows]
    widths = [min(40, max(len(line[i]) for line in cells)) for i in range(len(columns))]
    return ["  ".join(cell[:40].ljust(w) for cell, w in zip(line, widths)).rstrip() for line in cells]


def _result_lines(name: str, data: Any) -> list[str]:
    lines = [f"  {name}"]
    if isinstance(data, dict):
        for key, value in data.items():
            if key == "files":
                continue
            if isinstance(value, list) and value and all(isinstance(r, dict) for r in value):
                lines.append(f"    {key}:")
                lines.extend(f"      {line}" for line in _text_table(value))
            elif isinstance(value, dict):
                lines.append(f"    {key}: " + ", ".join(f"{k}={json.dumps(v)}" for k, v in value.items()))
            else:
                lines.append(f"    {key}: {json.dumps(value, ensure_ascii=False)}")
    return lines


def describe_runs(runs: list[BundledRun], index: dict[str, Any]) -> list[str]:
    lines = [f"bundle written {index.get('created')} by kit {index.get('kit', {}).get('version')} "
             f"(commit {index.get('kit', {}).get('git_commit')}); {len(runs)} run(s)"]
    for run in runs:
        lines.append("")
        lines.extend(f"{key}: {value}" for key, value in summary(run).items() if value not in (None, ""))
        tables = run.tables()
        lines.append("results:")
        for name, data in tables.items():
            if name.endswith(".json"):
                lines.extend(_result_lines(name, data))
        figures = list(run.figures())
        if figures:
            lines.append("figures: " + ", ".join(figures))
    if index.get("redactions"):
        lines.append(f"redacted secret-looking values: {len(index['redactions'])} (see {INDEX})")
    return lines


def describe(path: Path) -> list[str]:
    """The lines `kit show` prints. Every member is checked first; nothing is written to disk."""
    with safe_tar.open_bundle(path) as tar:
        listing = safe_tar.list_members(tar)
        index = json.loads(safe_tar.read_file(tar, listing, INDEX))
        version = schema_version(index.get("schema"))
        if version is None or version > SCHEMA_VERSION:
            raise NewerBundle(f"this bundle has schema {index.get('schema')!r}; this kit reads {SCHEMA}",
                              "upgrade the kit (pip install -U cache-divergence-kit)")
        wanted = {name: safe_tar.read_file(tar, listing, name) for name in listing.files
                  if name.endswith("manifest.json") or (name.endswith(SHOWN_SUFFIXES) and "/results/" in name)
                  or "/analysis/" in name}
    return describe_runs(runs_from_files(wanted), index)
