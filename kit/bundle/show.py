"""`kit show`: the headline results and provenance of a bundle, after verifying it.

By default the bundle is verified first (kit.bundle.verify) and nothing is shown unless it holds;
with `verify=False` (`kit show --no-verify`) only the reading checks run and every line says the
content is unverified. Either way every printed line is stripped of terminal control characters
(a bundled value cannot move the cursor, retitle the terminal or start a line of its own).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kit.bundle import INDEX, SCHEMA, SCHEMA_VERSION, safe_tar
from kit.bundle.content import BundledRun, load_json, runs_from_files, summary
from kit.bundle.errors import BadBundle
from kit.bundle.limits import DEFAULT, Limits
from kit.bundle.verify import NewerBundle, check, keep, schema_version
from kit.manifest import PLAIN_NAME
from kit.terminal_text import one_line

SHOWN_SUFFIXES = (".json", ".csv")
UNVERIFIED = "UNVERIFIED (kit show --no-verify): checksums and results were not checked; do not rely on this"


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


def not_honoured(manifest: dict[str, Any]) -> list[str]:
    """What a run's manifest asks for that `kit replay` (or `kit resume` of its folder) will not honour:
    a bundle names no program, file or URL the kit would use on its word (docs/security.md)."""
    def field(name: str) -> dict[str, Any]:
        value = manifest.get(name)
        return value if isinstance(value, dict) else {}

    options, found = field("options"), []
    if options.get("server_bin"):
        found.append(f"recorded server binary {options['server_bin']}: not run; replay uses your own install "
                     "(--server-bin, compared by sha256)")
    model = options.get("model")
    if isinstance(model, str) and ("/" in model or model.endswith(".gguf")):
        found.append(f"recorded model path {model}: not used; the model is found by its sha256 (registry or --model)")
    urls = options.get("engine_urls")
    for url in [options.get("engine_url"), *(urls.values() if isinstance(urls, dict) else [])]:
        if url:
            found.append(f"recorded engine URL {url}: not contacted; replay refuses a run against a URL")
    name = field("protocol").get("name")
    if name is not None and not (isinstance(name, str) and PLAIN_NAME.fullmatch(name)):
        found.append(f"protocol name {name!r}: not a plain name; replay refuses it")
    return found


def describe_runs(runs: list[BundledRun], index: dict[str, Any]) -> list[str]:
    lines = [f"bundle written {index.get('created')} by kit {index.get('kit', {}).get('version')} "
             f"(commit {index.get('kit', {}).get('git_commit')}); {len(runs)} run(s)"]
    for run in runs:
        lines.append("")
        lines.extend(f"{key}: {value}" for key, value in summary(run).items() if value not in (None, ""))
        refused = not_honoured(run.manifest)
        if refused:
            lines.append("not honoured (replay and resume use your own install and options):")
            lines.extend(f"  {r}" for r in refused)
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


def _shown(name: str) -> bool:
    return name.endswith("manifest.json") or (name.endswith(SHOWN_SUFFIXES) and "/results/" in name) \
        or "/analysis/" in name


def _describe(bundle: safe_tar.Unpacked, path: Path) -> list[str]:
    try:
        index = load_json(bundle.read(INDEX) or b"")
    except ValueError:
        index = None
    if not isinstance(index, dict):
        raise BadBundle(f"{path} has no readable {INDEX}", "was it made by `kit bundle`?")
    version = schema_version(index.get("schema"))
    if version is None or version > SCHEMA_VERSION:
        raise NewerBundle(f"this bundle has schema {index.get('schema')!r}; this kit reads {SCHEMA}",
                          "upgrade the kit (pip install -U cache-divergence-kit)")
    wanted = {name: data for name in bundle.listing.files if _shown(name)
              for data in [bundle.read(name)] if data is not None}
    try:
        return describe_runs(runs_from_files(wanted), index)
    except (AttributeError, TypeError, ValueError, KeyError, IndexError, RecursionError) as exc:  # odd field types
        raise BadBundle(f"{path}: a manifest or results file is not laid out as `kit bundle` writes it "
                        f"({type(exc).__name__}: {exc})", "run `kit verify` on it") from exc


def describe(path: Path, verify: bool = True, limits: Limits | None = None) -> list[str]:
    """The lines `kit show` prints. Every member is checked as it is read; only the files shown (and,
    when verifying, the records) are unpacked, into a temporary folder removed afterwards."""
    limits = limits or DEFAULT
    with safe_tar.unpack(path, keep(limits, records=verify), limits) as bundle:
        if verify:
            verdict = check(bundle)
            if not verdict.ok:
                raise BadBundle(f"{path} does not verify ({verdict.summary()})",
                                "run `kit verify` on it to see why, or `kit show --no-verify` to look anyway")
            head, tail = [f"verified: {verdict.summary()}"], []
        else:
            head, tail = [UNVERIFIED], ["", UNVERIFIED]
        lines = head + [""] + _describe(bundle, path) + tail
    return [one_line(line) for line in lines]
