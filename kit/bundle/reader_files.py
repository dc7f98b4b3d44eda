"""What of a bundle a person may be shown: the files opened as documents (report.html, README.md, the
Markdown tables, any page or SVG image).

The rule (docs/security.md, rule 4): a reviewer is only ever shown HTML and Markdown that this kit rendered
itself from the verified data. Whether a page runs or loads something depends on how a browser parses it
(where a `<style>` ends, what a CSS escape spells, which URL it fetches), and no check of a stranger's
markup can be sure to parse it as every browser does, so none is made: a document of the bundle is shown
only when it is byte for byte what this kit renders from the verified files; every other one is listed by
`kit verify` as not shown, and `kit show BUNDLE --report OUT.html` writes the page rendered from the verified
data (under a Content-Security-Policy that lets it run and load nothing: kit.bundle.report).

A bundle whose index names this very kit (same version and commit, no local changes) must hold exactly
this kit's report and README (rendered from the verified files alone): a difference is a problem. Its
Markdown tables, rendered from findings recomputed within tolerances, and every document of a bundle written
by another kit (which renders differently for harmless reasons), are noted as not shown when they differ,
never counted as equal.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kit.bundle import INDEX, README, REPORT, RUNS, readme, report, safe_tar
from kit.bundle.content import BundledRun, Read, load_json, runs_from_files
from kit.bundle.scrub import scrub
from kit.core.paths import RunPaths
from kit.record.provenance import kit_source

# names a browser, a Markdown viewer or a file manager's preview opens as a document that can run or load
# something (a page, an SVG image opened on its own, Markdown with raw HTML); images (PNG, JPEG), PDF figures
# and data files (JSON, CSV, JSONL, logs) are not among them
DOCUMENT_SUFFIXES = (".html", ".htm", ".xhtml", ".xht", ".shtml", ".mht", ".mhtml", ".svg", ".svgz", ".xml",
                     ".xsl", ".md", ".markdown")
RENDER_ERRORS = (AttributeError, KeyError, TypeError, ValueError, IndexError, RecursionError)  # odd field types
SHOW_REPORT = "`kit show BUNDLE --report OUT.html` renders the report from the verified data"


def is_document(name: str) -> bool:
    return name.lower().endswith(DOCUMENT_SUFFIXES)


@dataclass
class Shown:
    """What `check` found: problems as (file, what), notes, and the documents not shown."""

    problems: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    not_shown: list[str] = field(default_factory=list)
    equal: list[str] = field(default_factory=list)  # documents byte for byte this kit's rendering

    def hold_back(self, names: list[str], why: str) -> None:
        if names:
            self.not_shown.extend(names)
            self.notes.append(f"not shown: {', '.join(names)} ({why}); do not open "
                              f"{'them' if len(names) > 1 else 'it'}: {SHOW_REPORT}")


def bundled_runs(files: dict[str, bytes], index: dict[str, Any], read_before: Read | None = None) -> list[BundledRun]:
    """The runs as the writer held them when it rendered the report, in the index's order (their manifests
    as `read_before` holds them, where it does: runs_from_files)."""
    runs = runs_from_files({n: d for n, d in files.items() if n.startswith(f"{RUNS}/")}, read_before)
    order = [r.get("run_id") for r in index.get("runs") or [] if isinstance(r, dict)]
    return sorted(runs, key=lambda r: order.index(r.run_id) if r.run_id in order else len(order))


def _index(files: dict[str, bytes]) -> dict[str, Any]:
    """The bundle's index.json among `files` ({} when it holds no object); ValueError when unreadable."""
    index = load_json(files.get(INDEX) or b"{}")
    return index if isinstance(index, dict) else {}


def rendered(files: dict[str, bytes], root: str, index: dict[str, Any] | None = None,
             read_before: Read | None = None) -> dict[str, bytes]:
    """report.html and README.md as this kit renders them from a bundle's files (paths within its folder);
    `index`: its index.json already parsed (None: parsed here); `read_before`: the manifests already read."""
    index = _index(files) if index is None else index
    runs = bundled_runs(files, index, read_before)
    made = {README: readme.render(runs, index, root), REPORT: report.render(runs, index).encode("utf-8")}
    return {name: scrub(data, name, {})[0] for name, data in made.items()}


def same_kit(written_by: Any) -> bool:
    """Whether the bundle's index names this very kit: same version and commit, and no local changes."""
    here = kit_source()
    return isinstance(written_by, dict) and written_by == here and not here.get("git_dirty")


def _writer(written_by: Any) -> str:
    if not isinstance(written_by, dict):
        return "an unnamed kit"
    return f"kit {written_by.get('version')} (commit {written_by.get('git_commit')}" + (
        ", with local changes)" if written_by.get("git_dirty") else ")")


def held_files(bundle: safe_tar.Unpacked) -> dict[str, bytes]:
    """The files of an unpacked bundle the report and README are rendered from, those two, and the other
    documents among what was unpacked."""
    names = [n for n in bundle.listing.files if n in (INDEX, REPORT, README)
             or (n.startswith(f"{RUNS}/") and n.split("/", 3)[2:3] != [RunPaths.RECORDS])]
    return {n: data for n in names for data in [bundle.read(n)] if data is not None}


def check(files: dict[str, bytes], names: Iterable[str], root: str, verified: bool = True,
          renderings: dict[str, bytes] | None = None, index: dict[str, Any] | None = None,
          read_before: Read | None = None) -> Shown:
    """Which documents among a bundle's `names` may be shown: each one this kit renders (report.html and
    README.md from `files`; the tables in `renderings`, rendered from the recomputed data) when it is byte
    for byte that rendering, made only when everything else `verified` (else the data itself is in doubt).
    `index`: the bundle's index.json as verify parsed it (None: parsed here); `read_before`: the manifests verify
    read (run id -> bytes and model)."""
    shown = Shown()
    first = (REPORT, README)
    documents = sorted((n for n in names if is_document(n)), key=lambda n: (first.index(n) if n in first else 2, n))
    if not documents:
        return shown
    if not verified:
        shown.hold_back(documents, "not compared with what this kit renders: the files they are rendered from "
                                   "did not verify")
        return shown
    try:
        index = _index(files) if index is None else index
        fresh = {**(renderings or {}), **rendered(files, root, index, read_before)}
    except RENDER_ERRORS as exc:
        shown.problems.append((REPORT, f"cannot be rendered again from the bundled files ({type(exc).__name__}: "
                                       f"{exc})"))
        shown.hold_back(documents, "this kit could not render them")
        return shown
    written_by = index.get("kit")
    equal = shown.equal = [n for n in documents if n in fresh and files.get(n) == fresh[n]]
    differ = [n for n in documents if n in fresh and n not in equal]
    foreign = [n for n in documents if n not in fresh]
    if same_kit(written_by):  # report and README are rendered from the verified files alone: no leeway
        forged = [n for n in differ if n in (REPORT, README)]
        shown.problems.extend((name, "differs from what this kit renders from the verified files (the kit that "
                                     f"wrote the bundle, by its index); {SHOW_REPORT}") for name in forged)
        shown.not_shown.extend(forged)
        shown.hold_back([n for n in differ if n not in forged], "not byte for byte what this kit renders from the "
                        "recomputed data (their numbers are compared within the tolerances above)")
    else:
        shown.hold_back(differ, f"written by {_writer(written_by)}, not this one, and not what this kit renders "
                                "from the verified files")
    shown.hold_back(foreign, "this kit does not render such a file from the verified data; a browser or viewer "
                             "could run or load what it holds")
    mine = [n for n in equal if n in (REPORT, README)]
    if mine:
        shown.notes.append(f"{' and '.join(mine)} {'are' if len(mine) > 1 else 'is'} exactly what this kit renders "
                           "from the verified files")
    return shown
