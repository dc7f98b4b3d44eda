"""`kit verify` proves what a reviewer will read: the bundle's report.html and README.md.

Two checks, both on the files as bundled:

- Safety, whoever wrote the bundle: the report may hold only the elements and attributes the kit's
  report uses (no script, event handler, frame, form, external load, base or refresh; figures only as
  `data:image/...` URIs; links only within the bundle), read with the stdlib HTML parser; the README may
  hold no raw HTML outside code. A file that breaks this is a problem: the bundle does not verify.
- Faithfulness: both files are rendered again from the verified files (manifests, results, analysis and
  the index) and compared byte for byte. A bundle written by this very kit (same version and commit,
  no local changes) must match exactly; one written by another kit renders differently for harmless
  reasons, so it is noted as not compared, and `kit show --report FILE` renders it from the verified data.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urlsplit

from kit.bundle import INDEX, README, REPORT, RUNS, readme, report, safe_tar
from kit.bundle.content import BundledRun, load_json, runs_from_files
from kit.bundle.scrub import scrub
from kit.core.paths import RunPaths
from kit.record.provenance import kit_source
from kit.core.terminal_text import one_line

REPORT_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "h4", "p", "span", "div", "ul", "li",
               "strong", "em", "code", "table", "caption", "thead", "tbody", "tr", "th", "td", "figure", "img",
               "figcaption", "a", "br"}
REPORT_ATTRIBUTES = {"lang", "charset", "class", "id", "colspan", "alt", "src", "href"}
IMAGE_URI = re.compile(r"data:image/(png|jpeg|svg\+xml);base64,[A-Za-z0-9+/=\s]*\Z")
STYLE_LOADS = ("url(", "@import", "expression(", "javascript:", "behavior:", "-moz-binding")
SAME = "exactly what this kit renders"  # the note on a report or README equal to this kit's rendering
RENDER_ERRORS = (AttributeError, KeyError, TypeError, ValueError, IndexError, RecursionError)  # odd field types


class _Inspector(HTMLParser):
    """Collects what in an HTML text the kit's report never holds."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self.in_style = False

    def _refuse(self, what: str) -> None:
        if what not in self.found:
            self.found.append(what)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in REPORT_TAGS:
            self._refuse(f"<{tag}>")
            return
        self.in_style = tag == "style"
        for name, value in attrs:
            value = value or ""
            if name not in REPORT_ATTRIBUTES or (name == "src" and tag != "img") or (name == "href" and tag != "a") \
                    or (name == "charset" and tag != "meta") or (tag == "meta" and name != "charset"):
                self._refuse(f"<{tag} {name}=...>")
            elif name == "charset" and value.strip().lower() != "utf-8":
                self._refuse(f"<meta charset={value[:20]!r}> (the report is UTF-8)")
            elif name == "src" and not IMAGE_URI.match(value.strip()):
                self._refuse(f"<img src> loading {value[:40]!r} (only data:image URIs)")
            elif name == "href" and not _in_bundle(value):
                self._refuse(f"<a href> to {value[:60]!r} (only links within the bundle)")

    handle_startendtag = handle_starttag

    def handle_endtag(self, tag: str) -> None:
        if tag not in REPORT_TAGS:
            self._refuse(f"</{tag}>")
        self.in_style = False

    def handle_data(self, data: str) -> None:
        lowered = data.lower().replace(" ", "")
        if self.in_style and any(load.replace(" ", "") in lowered for load in STYLE_LOADS):
            self._refuse("a style that loads or runs something (url(), @import, expression())")

    def handle_comment(self, data: str) -> None:
        self._refuse("an HTML comment (browsers and parsers disagree on where some end)")

    def handle_pi(self, data: str) -> None:
        self._refuse("a processing instruction")

    def unknown_decl(self, data: str) -> None:
        self._refuse("a CDATA or other declaration")

    def handle_decl(self, decl: str) -> None:
        if decl.lower() != "doctype html":
            self._refuse(f"<!{decl[:20]}>")


def _in_bundle(href: str) -> bool:
    parts = urlsplit(href.strip())
    path = parts.path
    return not (parts.scheme or parts.netloc or path.startswith(("/", "\\")) or "\\" in path
                or ".." in path.split("/"))


def unsafe_html(text: str) -> list[str]:
    """What in a report is not what the kit's report holds: scripts, handlers, frames, external loads ..."""
    inspector = _Inspector()
    inspector.feed(text)
    inspector.close()
    return inspector.found


def raw_html_in_markdown(text: str) -> list[str]:
    """Raw HTML in a Markdown text (as CommonMark reads it: code and backslash escapes are not HTML), and
    images that would load from outside the bundle."""
    from markdown_it import MarkdownIt  # noqa: PLC0415 - Rich's own Markdown parser

    found: list[str] = []
    stack = MarkdownIt("commonmark").parse(text)
    while stack:
        token = stack.pop()
        stack.extend(token.children or [])
        if token.type in ("html_block", "html_inline"):
            found.append(one_line(token.content.strip())[:60])
        elif token.type == "image" and not _in_bundle(str(token.attrs.get("src", ""))):
            found.append(f"an image from {str(token.attrs.get('src'))[:60]!r}")
    return sorted(set(found))


def bundled_runs(files: dict[str, bytes], index: dict[str, Any]) -> list[BundledRun]:
    """The runs as the writer held them when it rendered the report, in the index's order."""
    runs = runs_from_files({n: d for n, d in files.items() if n.startswith(f"{RUNS}/")})
    order = [r.get("run_id") for r in index.get("runs") or [] if isinstance(r, dict)]
    return sorted(runs, key=lambda r: order.index(r.run_id) if r.run_id in order else len(order))


def rendered(files: dict[str, bytes], root: str) -> dict[str, bytes]:
    """report.html and README.md as this kit renders them from a bundle's files (paths within its folder)."""
    index = load_json(files.get(INDEX) or b"{}")
    index = index if isinstance(index, dict) else {}
    runs = bundled_runs(files, index)
    made = {README: readme.render(runs, index, root), REPORT: report.render(runs, index).encode("utf-8")}
    return {name: scrub(data, name, {})[0] for name, data in made.items()}


def same_kit(written_by: Any) -> bool:
    """Whether the bundle's index names this very kit: same version and commit, and no local changes."""
    here = kit_source()
    return isinstance(written_by, dict) and written_by == here and not here.get("git_dirty")


def held_files(bundle: safe_tar.Unpacked) -> dict[str, bytes]:
    """The files of an unpacked bundle the report and README are rendered from, and those two."""
    names = [n for n in bundle.listing.files if n in (INDEX, REPORT, README)
             or (n.startswith(f"{RUNS}/") and n.split("/", 3)[2:3] != [RunPaths.RECORDS])]
    return {n: data for n in names for data in [bundle.read(n)] if data is not None}


def check(files: dict[str, bytes], root: str, verified: bool = True) -> tuple[list[tuple[str, str]], list[str]]:
    """(problems as (file, what), notes) for the report and README among a bundle's files; they are compared
    with what this kit renders only when everything else `verified` (else the data itself is in doubt)."""
    problems: list[tuple[str, str]] = []
    for name, inspect, what in ((REPORT, unsafe_html, "holds what the kit's report never does"),
                                (README, raw_html_in_markdown, "holds raw HTML outside code")):
        data = files.get(name)
        if data is None:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        found = ["bytes that are not UTF-8 text"] if text is None or text.startswith("\ufeff") or "\x00" in text \
            else inspect(text)
        if found:
            problems.append((name, f"{what}: {', '.join(found[:5])}; do not open it in a browser"))
    present = {name: files[name] for name in (REPORT, README) if name in files}
    if not verified:
        return problems, [f"{' and '.join(present) or REPORT} not compared with what this kit renders: the files "
                          "they are rendered from did not verify"]
    try:
        fresh = rendered(files, root)
        index = load_json(files.get(INDEX) or b"{}")
    except RENDER_ERRORS as exc:
        return problems + [(REPORT, f"cannot be rendered again from the bundled files ({type(exc).__name__}: "
                                    f"{exc})")], []
    written_by = index.get("kit") if isinstance(index, dict) else None
    unsafe = {file for file, _ in problems}
    differ = [name for name in present if name not in unsafe and present[name] != fresh[name]]
    same = [name for name in present if name not in unsafe]
    notes: list[str] = []
    if differ and same_kit(written_by):
        problems.extend((name, "differs from what this kit renders from the verified files (the kit that wrote "
                         "the bundle, by its index); `kit show --report FILE` renders the faithful one")
                        for name in differ)
    elif differ:
        version = f"{written_by.get('version')} (commit {written_by.get('git_commit')}" + (
            ", with local changes)" if written_by.get("git_dirty") else ")") if isinstance(
            written_by, dict) else "an unnamed kit"
        notes.append(f"{' and '.join(differ)} written by kit {version}, not this one: not compared with the "
                     "verified data; `kit show --report FILE` renders the report from it")
    elif same:
        notes.append(f"{' and '.join(same)} {'are' if len(same) > 1 else 'is'} {SAME} from the verified files")
    return problems, notes
