"""`kit show`: the headline results and provenance of a bundle, after verifying it.

By default the bundle is verified first (kit.bundle.verify) and nothing is shown unless it holds;
with `verify=False` (`kit show --no-verify`) only the reading checks run and every line says the
content is unverified. Either way every printed line is stripped of terminal control characters
(a bundled value cannot move the cursor, retitle the terminal or start a line of its own).
"""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path
from typing import Any

from rich.table import Table
from rich.text import Text

from kit.core.layout import Layout
from kit.core.atomic_file import write_text_atomic
from kit.bundle import INDEX, REPORT, SCHEMA, SCHEMA_VERSION, reader_files, safe_tar
from kit.bundle.content import BundledRun, Read, load_json, runs_from_files, summary
from kit.bundle.errors import BadBundle
from kit.bundle.headline import HELD, headline, paper_tables
from kit.bundle.limits import DEFAULT, Limits
from kit.bundle.verify import NewerBundle, check, keep, schema_version
from kit.core.errors import ConfigError
from kit.record.manifest import PLAIN_NAME, RunManifest
from kit.core.paths import RunPaths
from kit.core.safe_console import SafeConsole
from kit.core.terminal_text import one_line

SHOWN_SUFFIXES = (".json", ".csv")
UNVERIFIED = "UNVERIFIED (kit show --no-verify): checksums and results were not checked; do not rely on this"


def rich_table(layout: Layout, title: str) -> Table:
    """A table of strings as a Rich table; cells are plain Text (never read as markup), made printable."""
    view = Table(title=one_line(f"{title}. {layout.caption}"), title_justify="left", caption_justify="left",
                 caption="\n".join(one_line(n) for n in layout.notes) or None)
    for column in layout.header:
        view.add_column(Text(one_line(column)), overflow="fold")
    for row in layout.rows:
        view.add_row(*(Text(one_line(cell)) for cell in row))
    return view


def _rendered(tables: list[Table], width: int) -> list[str]:
    out = io.StringIO()
    console = SafeConsole(file=out, width=width, color_system=None)
    for table in tables:
        console.print(table)
    return [line.rstrip() for line in out.getvalue().rstrip("\n").splitlines()]


def not_honoured(manifest: RunManifest) -> list[str]:
    """What a run's manifest asks for that `kit replay` (or `kit resume` of its folder) will not honour:
    a bundle names no program, file or URL the kit would use on its word (docs/security.md)."""
    options, found = manifest.options, []
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
    name = manifest.protocol.name
    if name is not None and not PLAIN_NAME.fullmatch(name):
        found.append(f"protocol name {name!r}: not a plain name; replay refuses it")
    return found


def describe_runs(runs: list[BundledRun], index: dict[str, Any], width: int | None = None) -> list[str]:
    """The summary the report opens with, as terminal lines: per run its provenance, headline verdict,
    whether its controls held, and its tables (Rich tables drawn at `width` columns)."""
    width = width or max(60, shutil.get_terminal_size((120, 24)).columns)
    kit = found if isinstance(found := index.get("kit"), dict) else {}
    lines = [f"bundle written {index.get('created')} by kit {kit.get('version')} "
             f"(commit {kit.get('git_commit')}); {len(runs)} run(s)"]
    for run in runs:
        h = headline(run)
        lines.append("")
        lines.extend(f"{key}: {value}" for key, value in summary(run).items() if value not in (None, ""))
        refused = not_honoured(run.typed())
        if refused:
            lines.append("not honoured (replay and resume use your own install and options):")
            lines.extend(f"  {one_line(r)}" for r in refused)
        lines.append("verdict:")
        lines.extend(f"  - {line}" for line in h.verdict)
        lines.append(f"controls: {HELD[h.held]}")
        lines.extend(f"  - {line}" for line in h.controls)
        if h.qualitative:
            lines.append(h.qualitative[0])
            lines.extend(f"  - {line}" for line in h.qualitative[1:])
        shown, absent = paper_tables(run)
        lines.extend(_rendered([rich_table(t, f"Results: {t.name}") for t in h.tables]
                               + [rich_table(t, f"Table {t.name}") for t in shown], width))
        lines.extend(f"not computed: {line}" for line in absent)
        figures = list(run.figures())
        if figures:
            lines.append("figures (in report.html): " + ", ".join(figures))
        raw = [n for n in run.computed() if n not in figures]
        if raw:
            lines.append(f"raw results: {', '.join(raw)} (under {run.prefix})")
    if index.get("redactions"):
        lines.append(f"redacted secret-looking values: {len(index['redactions'])} (see {INDEX})")
    return lines


def _shown(name: str) -> bool:
    return name.endswith(RunPaths.MANIFEST) or (name.endswith(SHOWN_SUFFIXES) and f"/{RunPaths.RESULTS}/" in name) \
        or "/analysis/" in name


def _describe(bundle: safe_tar.Unpacked, path: Path, read_before: Read | None) -> list[str]:
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
        return describe_runs(runs_from_files(wanted, read_before), index)
    except (AttributeError, TypeError, ValueError, KeyError, IndexError, RecursionError) as exc:  # odd field types
        raise BadBundle(f"{path}: a manifest or results file is not laid out as `kit bundle` writes it "
                        f"({type(exc).__name__}: {exc})", "run `kit verify` on it") from exc


def check_report_target(target: Path, verify: bool) -> None:
    """`kit show --report FILE`, checked before the bundle is read: an .html file whose folder exists."""
    if not verify:
        raise ConfigError("--report renders the report from the verified data and cannot be used with --no-verify",
                          "drop --no-verify")
    if target.suffix.lower() != ".html" or target.is_dir():
        raise ConfigError(f"--report {target} is not an .html file name", "give --report a file name ending in .html")
    if not target.parent.is_dir() or not os.access(target.parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--report {target}: the folder {target.parent} does not exist or is not writable",
                          "give --report a file in a folder you can write to")


def describe(path: Path, verify: bool = True, limits: Limits | None = None, report_to: Path | None = None) -> list[str]:
    """The lines `kit show` prints. Every member is checked as it is read; only the files shown (and,
    when verifying, the records) are unpacked, into a temporary folder removed afterwards. With
    `report_to`, the report rendered from the verified files is written there (never from unverified ones)."""
    limits = limits or DEFAULT
    if report_to is not None:
        check_report_target(report_to, verify)
    with safe_tar.unpack(path, keep(limits, records=verify), limits) as bundle:
        if verify:
            verdict = check(bundle)
            if not verdict.ok:
                raise BadBundle(f"{path} does not verify ({verdict.summary()})",
                                "run `kit verify` on it to see why, or `kit show --no-verify` to look anyway")
            head, tail, read_before = [f"verified: {verdict.summary()}"], [], verdict.manifests
        else:
            head, tail, read_before = [UNVERIFIED], ["", UNVERIFIED], {}
        lines = head + [""] + _describe(bundle, path, read_before) + tail
        if report_to is not None:
            page = reader_files.rendered(reader_files.held_files(bundle), bundle.listing.root,
                                         read_before=read_before)[REPORT]
            write_text_atomic(report_to, page.decode("utf-8"))
            lines.append(f"report rendered from the verified data: {report_to}")
    return [one_line(line) for line in lines]
