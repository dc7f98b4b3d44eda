"""A stranger's markup never reaches a reviewer's browser (issue #35, item 1; docs/security.md, rule 4): a bundle
whose report.html, README.md, Markdown table, SVG figure or a page among its logs would run or load something
in a browser, by every trick a hand-written parse missed (where a <style>, <title>, <noscript> or <textarea>
ends to a browser, CSS escapes, image-set()) or could not parse (a URL that is not one). `kit verify` never
calls such a document equal or shown, and `kit show --report` writes only the kit's own rendering.

The bundles are written by this checkout's kit, so `kit verify` (a process of the same checkout) takes them
for its own when the checkout is clean (a differing document fails the bundle) and for another kit's when it
has local changes (the document is listed NOT shown); either is clear, a bundle that says the document is
what this kit renders, or shows it, is not."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from kit.bundle import README, REPORT, report
from tests.adversarial.corpus import Case, Ending, Scratch
from tests.bundle import mutations
from tests.bundle.hostile_pages import ACTIVE, README_RAW, SVG_FIGURE, UNPARSEABLE, fragment

DEMO = Path(__file__).resolve().parents[1] / "fixtures" / "records_v1" / "demo-20261201-070851"
OLD_BUNDLE = DEMO.parent / "bundles" / f"{DEMO.name}.tar.gz"  # written by kit 0.1.0 (another kit)
CSP_META = f'<meta http-equiv="Content-Security-Policy" content="{report.CSP}">'


def _write(scratch: Scratch, extra: dict[str, str] | None = None) -> Path:
    """A bundle of the demo run written by this kit, with `extra` files (path in the run -> text) in it."""
    from kit.bundle.writer import write_bundle  # noqa: PLC0415

    run_dir = shutil.copytree(DEMO, scratch.inbox / "demo-run")
    for name, text in (extra or {}).items():
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text(text)
    bundle = write_bundle([run_dir], scratch.inbox / "results.tar.gz", environ={}).path
    shutil.rmtree(run_dir)
    return bundle


def _forged(file: str, *changes: tuple[str, str], old: bool = False) -> Callable[[Scratch], Path]:
    """A bundle (this kit's, or the earlier release's fixture) with `file` edited and the checksums resealed."""
    def make(scratch: Scratch) -> Path:
        path = scratch.inbox / "results.tar.gz"
        data = OLD_BUNDLE.read_bytes() if old else _write(scratch).read_bytes()
        for change in changes:
            data = mutations.apply(data, {"op": "edit", "args": {"file": file, "replace_text": list(change),
                                                                 "reseal": True}})
        path.write_bytes(data)
        return path
    return make


def _in_report(text: str, old: bool = False) -> Callable[[Scratch], Path]:
    """The report with the kit's policy taken out, as a forger would, and `text` before </body>."""
    return _forged(f"/{REPORT}", (CSP_META, ""), ("</body>", fragment(text) + "</body>"), old=old)


def _not_shown(*names: str) -> Callable[[Scratch, Ending], str | None]:
    """verify either fails the bundle naming each file, or passes it with each listed NOT shown; never says
    one is what this kit renders."""
    def check(scratch: Scratch, ending: Ending) -> str | None:
        last = ending.lines[-1] if ending.lines else ""
        for name in names:
            if any(line.startswith("note: ") and name in line.split(" exactly what this kit renders")[0]
                   for line in ending.lines if "exactly what this kit renders" in line):
                return f"{name} called exactly what this kit renders"
            failed = ending.code == 1 and last.startswith("FAILED") and any(
                line.startswith(f"FAIL {name}: differs from what this kit renders") for line in ending.lines)
            noted = ending.code == 0 and "NOT shown: " in last and any(
                line.startswith("note: not shown: ") and name in line for line in ending.lines)
            if not (failed or noted):
                return f"{name} is neither failed nor listed NOT shown: exit {ending.code}: {last[-300:]}"
        return None
    return check


def _verify(make: Callable[[Scratch], Path]) -> Callable[[Scratch], list[str]]:
    return lambda scratch: ["verify", str(make(scratch))]


def _show_report(make: Callable[[Scratch], Path]) -> Callable[[Scratch], list[str]]:
    return lambda scratch: ["show", str(make(scratch)), "--report", str(scratch.outputs / "report.html")]


def _only_the_kits_page(scratch: Scratch, ending: Ending) -> str | None:
    """`kit show --report` refused the bundle in one line and wrote nothing, or wrote the kit's own page."""
    page = scratch.outputs / "report.html"
    if ending.code != 0:
        refused = len(ending.lines) == 1 and ending.lines[0].startswith("kit: error: ") and "does not verify" in \
            ending.lines[0]
        return None if refused and not page.exists() else f"exit {ending.code} without a one-line refusal, or a page"
    text = page.read_text() if page.is_file() else ""
    if CSP_META not in text or "127.0.0.1:9" in text or "<script" in text:
        return "the page written is not the kit's own rendering"
    return None


def _bundle_with(extra: dict[str, str]) -> Callable[[Scratch], Path]:
    return lambda scratch: _write(scratch, extra)


def _readme_of_another_kit(scratch: Scratch) -> Path:
    """The earlier release's bundle with raw HTML in its README."""
    return _forged(f"/{README}", ("## What was run", f"{fragment(README_RAW['image'])}\n\n## What was run"),
                   old=True)(scratch)


def _report_naming_this_kit(text: str) -> Callable[[Scratch], Path]:
    """The earlier release's bundle claiming, in its index, to be this very kit's (a hostile report fails)."""
    def make(scratch: Scratch) -> Path:
        from kit.record.provenance import kit_source  # noqa: PLC0415

        path = _in_report(text, old=True)(scratch)
        path.write_bytes(mutations.apply(path.read_bytes(), {"op": "edit", "args": {
            "file": "/bundle.json", "set_json": {"kit": kit_source()}, "reseal": True}}))
        return path
    return make


CASES = [
    *[Case(cls="browser", name=f"verify of a report with {name}", make=_verify(_in_report(text)), expect="handled",
           check=_not_shown(REPORT)) for name, text in {**ACTIVE, **UNPARSEABLE}.items()],
    *[Case(cls="browser", name=f"verify of an earlier release's report with {name}", expect="handled",
           make=_verify(_in_report(text, old=True)), check=_not_shown(REPORT, README))
      for name, text in {**{k: ACTIVE[k] for k in ("script", "style sheet url() spelt with a CSS escape",
                                                    "a style inside a title (RCDATA to a browser)")},
                         **UNPARSEABLE}.items()],
    *[Case(cls="browser", name=f"show --report of a bundle whose report has {name}", expect="handled",
           make=_show_report(_in_report(text)), check=_only_the_kits_page)
      for name, text in {k: ACTIVE[k] for k in ("script", "style sheet image-set()",
                                                 "a style inside a title (RCDATA to a browser)")}.items()],
    *[Case(cls="browser", name=f"verify of a README with raw HTML ({name})", expect="handled",
           make=_verify(_forged(f"/{README}", ("## What was run", f"{fragment(text)}\n\n## What was run"))),
           check=_not_shown(README)) for name, text in README_RAW.items()],
    Case(cls="browser", name="verify of an earlier release's README with raw HTML", expect="handled",
         make=_verify(_readme_of_another_kit), check=_not_shown(README)),
    Case(cls="browser", name="verify of a hostile report whose index names this kit", expect="handled",
         make=_verify(_report_naming_this_kit(ACTIVE["style sheet @import spelt with a CSS escape"])),
         check=_not_shown(REPORT)),
    Case(cls="browser", name="verify of a bundle with an SVG figure carrying a script", expect="handled",
         make=_verify(_bundle_with({"analysis/figures/fig9.svg": fragment(SVG_FIGURE)})),
         check=_not_shown("runs/demo-20261201-070851/analysis/figures/fig9.svg")),
    Case(cls="browser", name="verify of a bundle with a page among its logs", expect="handled",
         make=_verify(_bundle_with({"logs/server.html": fragment(ACTIVE["script"])})),
         check=_not_shown("runs/demo-20261201-070851/logs/server.html")),
    Case(cls="browser", name="verify of a bundle with a Markdown file holding raw HTML", expect="handled",
         make=_verify(_bundle_with({"analysis/notes.md": fragment(README_RAW["script"])})),
         check=_not_shown("runs/demo-20261201-070851/analysis/notes.md")),
]
