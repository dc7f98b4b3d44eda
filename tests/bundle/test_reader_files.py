"""`kit verify` proves what a reviewer reads: report.html and README.md are rendered again from the verified
files and compared, a report that could run or load anything never verifies (whoever wrote it), a report
by another kit is noted as not compared, and `kit show --report` renders the faithful one."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from kit.bundle import README, REPORT, reader_files, writer
from kit.bundle.reader_files import raw_html_in_markdown, unsafe_html
from kit.bundle.verify import verify_bundle
from kit.record.manifest import Manifest
from tests.bundle import mutations
from tests.bundle.conftest import synthetic_grid_run
from tests.bundle.kit_cli import run_kit
from tests.bundle.png import bar_chart

OLD_BUNDLES = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "records_v1" / "bundles").glob("*.tar.gz"))
THIS_KIT = {"version": "0.1.0", "git_commit": "0" * 40, "git_dirty": False}
HOSTILE_REPORTS = {
    "script": "<script>alert(1)</script>",
    "handler": '<img src="data:image/png;base64,AAAA" onerror="alert(1)">',
    "handler on a plain tag": '<p onclick="alert(1)">x</p>',
    "external image": '<img src="https://evil.example/p.png">',
    "scheme-relative image": '<img src="//evil.example/p.png">',
    "external link": '<a href="https://evil.example/">x</a>',
    "javascript link": '<a href="jav&#x61;script:alert(1)">x</a>',
    "link leaving the bundle": '<a href="../../etc/passwd">x</a>',
    "iframe": '<iframe src="data:text/html,hi"></iframe>',
    "object": '<object data="x.swf"></object>',
    "embed": '<embed src="x">',
    "refresh": '<meta http-equiv="refresh" content="0;url=https://evil.example/">',
    "base": '<base href="https://evil.example/">',
    "stylesheet": '<link rel="stylesheet" href="https://evil.example/x.css">',
    "style loading": "<style>body{background:URL( 'https://evil.example/x.png')}</style>",
    "style import": "<style>@import 'https://evil.example/x.css';</style>",
    "inline style": '<p style="background:url(https://evil.example/x)">x</p>',
    "svg": '<svg onload="alert(1)"></svg>',
    "form": '<form action="https://evil.example/"><input name="q"></form>',
    "image with a non-image data URI": '<img src="data:text/html;base64,PHNjcmlwdD4=">',
    "comment the parser and the browser end apart": "<!-- --!><script>alert(1)</script> -->",
    "comment hiding a script": "<!--><script>alert(1)</script>-->",
    "another charset": '<meta charset="utf-7">',
}


@pytest.fixture
def same_kit(monkeypatch):
    """This kit and the one that writes the test's bundles are one clean commit (the checkout running the
    tests may have local changes, which would make every bundle "another kit's")."""
    monkeypatch.setattr(writer, "kit_source", lambda: dict(THIS_KIT))
    monkeypatch.setattr(reader_files, "kit_source", lambda: dict(THIS_KIT))


def _bundle(tmp_path: Path, model_name: str = "toy-F16") -> Path:
    run = synthetic_grid_run(tmp_path / "runs" / "grid-toy", model_name=model_name)
    return writer.write_bundle([run], tmp_path / "b.tar.gz", environ={}).path


def _edited(bundle: Path, out: Path, **args) -> Path:
    out.write_bytes(mutations.apply(bundle.read_bytes(), {"op": "edit", "args": {**args, "reseal": True}}))
    return out


def _lines(verdict) -> str:
    return "\n".join(verdict.lines())


def test_a_fresh_bundle_says_its_report_and_readme_are_what_this_kit_renders(same_kit, tmp_path):
    run = synthetic_grid_run(tmp_path / "runs" / "grid-toy")
    (run / "analysis").mkdir()
    (run / "analysis" / "bars.png").write_bytes(bar_chart([1, 2, 3], (214, 96, 24)))
    bundle = writer.write_bundle([run], tmp_path / "b.tar.gz", environ={}).path
    verdict = verify_bundle(bundle)
    assert verdict.ok, _lines(verdict)
    assert "note: report.html and README.md are exactly what this kit renders from the verified files" in \
        verdict.lines()


@pytest.mark.parametrize("name", sorted(HOSTILE_REPORTS))
def test_what_the_kit_report_never_holds_is_found(name):
    page = f"<!DOCTYPE html><html><head><title>t</title></head><body><p>ok</p>{HOSTILE_REPORTS[name]}</body></html>"
    assert unsafe_html(page), name
    assert unsafe_html(page.replace(HOSTILE_REPORTS[name], "")) == []


@pytest.mark.parametrize("name", ["script", "handler", "external image", "iframe", "refresh"])
def test_a_scripted_report_never_verifies_even_from_another_kit(same_kit, tmp_path, name):
    bundle = _bundle(tmp_path)
    older = _edited(bundle, tmp_path / "older.tar.gz", file="/bundle.json",
                    set_json={"kit.git_commit": "1" * 40})
    forged = _edited(older, tmp_path / "forged.tar.gz", file="/report.html",
                     replace_text=["</body>", HOSTILE_REPORTS[name] + "</body>"])
    verdict = verify_bundle(forged)
    assert not verdict.ok
    assert [p.file for p in verdict.problems] == [REPORT]
    assert "holds what the kit's report never does" in verdict.problems[0].what
    assert not any("report.html and" in line or "report.html is" in line for line in verdict.lines())


def test_a_changed_report_of_this_kit_fails_and_show_renders_the_faithful_one(same_kit, tmp_path):
    bundle = _bundle(tmp_path)
    forged = _edited(bundle, tmp_path / "forged.tar.gz", file="/report.html",
                     replace_text=["<h2>Headline</h2>", "<h2>Summary</h2>"])
    verdict = verify_bundle(forged)
    assert [(p.file, p.what.split(" (")[0]) for p in verdict.problems] == [
        (REPORT, "differs from what this kit renders from the verified files")]
    written = tmp_path / "faithful.html"
    shown = run_kit("show", str(bundle), "--report", str(written), scratch=tmp_path / "s")
    assert shown.code == 0, shown.text
    with tarfile.open(bundle) as tar:
        bundled = tar.extractfile(next(m for m in tar.getmembers() if m.name.endswith("/report.html"))).read()
    assert written.read_bytes() == bundled and f"report rendered from the verified data: {written}" in shown.out


def test_a_report_by_another_kit_is_noted_not_compared(same_kit, tmp_path):
    bundle = _bundle(tmp_path)
    older = _edited(bundle, tmp_path / "older.tar.gz", file="/bundle.json", set_json={"kit.git_commit": "1" * 40})
    reworded = _edited(older, tmp_path / "reworded.tar.gz", file="/report.html",
                       replace_text=["<h2>Headline</h2>", "<h2>Summary</h2>"])
    verdict = verify_bundle(reworded)
    assert verdict.ok, _lines(verdict)
    assert f"note: report.html and README.md written by kit 0.1.0 (commit {'1' * 40}), not this one: not compared with the " \
           "verified data; `kit show --report FILE` renders the report from it" in verdict.lines()


def test_a_report_is_not_compared_when_its_data_does_not_verify(same_kit, tmp_path):
    forged = _edited(_bundle(tmp_path), tmp_path / "forged.tar.gz", file="{run}/results/grid.json",
                     set_json={"comparisons.path.diverged": 2})
    verdict = verify_bundle(forged)
    assert len(verdict.mismatches) == 1 and verdict.problems == []
    assert any("not compared with what this kit renders: the files they are rendered from did not verify" in line
               for line in verdict.lines())


@pytest.mark.parametrize("raw", ["<script>alert(1)</script>", '<img src="x" onerror="alert(1)">',
                                 "<details open><summary>x</summary></details>", "![x](https://evil.example/p.png)"])
def test_a_readme_with_raw_html_or_an_external_image_never_verifies(same_kit, tmp_path, raw):
    forged = _edited(_bundle(tmp_path), tmp_path / "forged.tar.gz", file="/README.md",
                     replace_text=["## What was run", f"{raw}\n\n## What was run"])
    verdict = verify_bundle(forged)
    assert [p.file for p in verdict.problems] == [README]
    assert "holds raw HTML outside code" in verdict.problems[0].what


@pytest.mark.parametrize("data", ["<p>x</p>".encode("utf-16"), "\ufeff<p>x</p>".encode(), b"<p>x\x00</p>",
                                  b"<p>\xff</p>"])
def test_a_report_or_readme_that_is_not_plain_utf8_is_refused(data):
    for name in (REPORT, README):
        problems, _ = reader_files.check({name: data}, "root", verified=False)
        assert problems == [(name, problems[0][1])] and "bytes that are not UTF-8 text" in problems[0][1]


def test_markdown_code_and_escapes_are_not_raw_html():
    assert raw_html_in_markdown("`<b>`, ``a <i> b``, \\<script\\>\n\n```\n<script>\n```\n") == []
    assert raw_html_in_markdown("\\`<b>`") == ["<b>"]  # an escaped backtick opens no code span


def test_engine_text_is_escaped_in_the_report_and_readme(same_kit, tmp_path):
    name = "<script>alert(1)</script>[x](https://evil.example/)<img src=x onerror=alert(1)>\x00\x1b[2J"
    run = synthetic_grid_run(tmp_path / "runs" / "grid-toy", model_name=name)
    manifest = Manifest.load(run)
    manifest.update(reason='"><iframe src=https://evil.example/>')
    bundle = writer.write_bundle([run], tmp_path / "b.tar.gz", environ={}).path
    verdict = verify_bundle(bundle)
    assert verdict.ok, _lines(verdict)
    with tarfile.open(bundle) as tar:
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
    page, readme = files[REPORT].decode(), files[README].decode()
    assert unsafe_html(page) == [] and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "\x00" not in page and "\x1b" not in page and "\x00" not in readme
    assert raw_html_in_markdown(readme) == [] and "\\<script\\>alert(1)\\</script\\>" in readme


@pytest.mark.parametrize("bundle", OLD_BUNDLES, ids=lambda p: p.name)
def test_reports_and_readmes_of_an_earlier_release_are_safe_and_noted(bundle, same_kit):
    with tarfile.open(bundle) as tar:
        root = tar.getmembers()[0].name.split("/")[0]
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers()
                 if m.isfile() and "/records/" not in m.name and "/logs/" not in m.name}
    assert unsafe_html(files[REPORT].decode()) == [] and raw_html_in_markdown(files[README].decode()) == []
    problems, notes = reader_files.check(files, root)
    assert problems == []
    assert notes == ["report.html and README.md written by kit 0.1.0 (commit da529a9fbb9d7de551fc05daf2a20bc17216e822)"
                     ", not this one: not compared with the verified data; `kit show --report FILE` renders the "
                     "report from it"]
    assert b"<h2>Headline</h2>" in reader_files.rendered(files, root)[REPORT]  # today's page, from the same files


@pytest.mark.parametrize("args, error", [
    (["--no-verify", "--report", "{tmp}/r.html"], "--report renders the report from the verified data and cannot "
                                                  "be used with --no-verify; drop --no-verify"),
    (["--report", "{tmp}/r.txt"], "is not an .html file name; give --report a file name ending in .html"),
    (["--report", "{tmp}/missing/r.html"], "does not exist or is not writable"),
])
def test_show_report_refuses_a_bad_target_before_reading_anything(tmp_path, args, error):
    bundle = _bundle(tmp_path)
    outcome = run_kit("show", str(bundle), *[a.format(tmp=tmp_path) for a in args], scratch=tmp_path / "s")
    assert outcome.code == 2 and error in outcome.one_line_reason()
    assert not list(tmp_path.glob("r.*")) and not (tmp_path / "missing").exists()


def test_show_report_writes_nothing_for_a_bundle_that_does_not_verify(tmp_path):
    forged = _edited(_bundle(tmp_path), tmp_path / "forged.tar.gz", file="{run}/results/grid.json",
                     set_json={"comparisons.path.diverged": 2})
    outcome = run_kit("show", str(forged), "--report", str(tmp_path / "r.html"), scratch=tmp_path / "s")
    assert outcome.code == 1 and "does not verify" in outcome.one_line_reason()
    assert not (tmp_path / "r.html").exists() and not list(tmp_path.glob(".r.html*"))
