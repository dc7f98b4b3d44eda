"""A reviewer is only ever shown what this kit renders from the verified data (docs/security.md, rule 4):
`kit verify` compares report.html, README.md and every other document of a bundle byte for byte with this
kit's rendering; one that differs fails a bundle of this very kit and is listed NOT shown in any other, never
counted as equal, whatever markup it holds; `kit show --report` renders the faithful page, under a
Content-Security-Policy."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from kit.bundle import README, REPORT, reader_files, report, writer
from kit.bundle.verify import verify_bundle
from kit.record.manifest import Manifest
from tests.bundle import mutations
from tests.bundle.conftest import synthetic_grid_run
from tests.bundle.hostile_pages import ACTIVE, README_RAW, SVG_FIGURE, UNPARSEABLE, fragment
from tests.bundle.kit_cli import run_kit
from tests.bundle.png import bar_chart

OLD_BUNDLES = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "records_v1" / "bundles").glob("*.tar.gz"))
THIS_KIT = {"version": "0.1.0", "git_commit": "0" * 40, "git_dirty": False}
HOSTILE = {**ACTIVE, **UNPARSEABLE}
SHOW_REPORT = "`kit show BUNDLE --report OUT.html` renders the report from the verified data"


@pytest.fixture
def same_kit(monkeypatch):
    """This kit and the one that writes the test's bundles are one clean commit (the checkout running the
    tests may have local changes, which would make every bundle "another kit's")."""
    monkeypatch.setattr(writer, "kit_source", lambda: dict(THIS_KIT))
    monkeypatch.setattr(reader_files, "kit_source", lambda: dict(THIS_KIT))


@pytest.fixture(scope="module")
def fresh_bundle(tmp_path_factory) -> Path:
    """One bundle written by the same kit (THIS_KIT) for every test that only edits a copy of it."""
    root = tmp_path_factory.mktemp("fresh")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(writer, "kit_source", lambda: dict(THIS_KIT))
        run = synthetic_grid_run(root / "runs" / "grid-toy")
        return writer.write_bundle([run], root / "b.tar.gz", environ={}).path


def _edited(bundle: Path, out: Path, **args) -> Path:
    out.write_bytes(mutations.apply(bundle.read_bytes(), {"op": "edit", "args": {**args, "reseal": True}}))
    return out


def _older(bundle: Path, tmp_path: Path) -> Path:
    """The same bundle, its index naming another commit of the kit (what any stranger can write)."""
    return _edited(bundle, tmp_path / "older.tar.gz", file="/bundle.json", set_json={"kit.git_commit": "1" * 40})


def _lines(verdict) -> str:
    return "\n".join(verdict.lines())


def _members(bundle: Path) -> dict[str, bytes]:
    with tarfile.open(bundle) as tar:
        return {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_a_fresh_bundle_says_its_report_and_readme_are_what_this_kit_renders(same_kit, tmp_path):
    run = synthetic_grid_run(tmp_path / "runs" / "grid-toy")
    (run / "analysis").mkdir()
    (run / "analysis" / "bars.png").write_bytes(bar_chart([1, 2, 3], (214, 96, 24)))
    bundle = writer.write_bundle([run], tmp_path / "b.tar.gz", environ={}).path
    verdict = verify_bundle(bundle)
    assert verdict.ok, _lines(verdict)
    assert "note: report.html and README.md are exactly what this kit renders from the verified files" in \
        verdict.lines()
    assert verdict.not_shown == [] and "NOT shown" not in verdict.summary()


def test_the_page_the_kit_writes_lets_nothing_run_or_load(fresh_bundle):
    page = _members(fresh_bundle)[REPORT].decode()
    head = page[:page.index("<title>")]
    assert f'<meta http-equiv="Content-Security-Policy" content="{report.CSP}">' in head
    assert report.CSP.startswith("default-src 'none'; img-src data:; style-src 'sha256-")
    assert "script-src" not in report.CSP and "unsafe" not in report.CSP
    assert page.count("<style>") == 1 and f"<style>{report.STYLE}</style>" in page  # the one the hash allows


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_report_fails_a_bundle_of_this_kit(same_kit, fresh_bundle, tmp_path, name):
    forged = _edited(fresh_bundle, tmp_path / "forged.tar.gz", file="/report.html",
                     replace_text=["</body>", fragment(HOSTILE[name]) + "</body>"])
    verdict = verify_bundle(forged)
    assert [(p.file, p.what) for p in verdict.problems] == [
        (REPORT, "differs from what this kit renders from the verified files (the kit that wrote the bundle, by "
                 f"its index); {SHOW_REPORT}")], _lines(verdict)
    assert verdict.not_shown == [REPORT] and verdict.summary().startswith("FAILED")


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_a_hostile_report_of_another_kit_is_not_shown_and_never_equal(same_kit, fresh_bundle, tmp_path, name):
    forged = _edited(_older(fresh_bundle, tmp_path), tmp_path / "forged.tar.gz", file="/report.html",
                     replace_text=["</body>", fragment(HOSTILE[name]) + "</body>"])
    verdict = verify_bundle(forged)
    assert verdict.ok, _lines(verdict)
    assert verdict.not_shown == [REPORT, README]  # README names the other commit, so it differs too
    assert f"note: not shown: report.html, README.md (written by kit 0.1.0 (commit {'1' * 40}), not this one, and " \
           f"not what this kit renders from the verified files); do not open them: {SHOW_REPORT}" in verdict.lines()
    assert "NOT shown: 2 documents not what this kit renders (report.html, README.md;" in verdict.summary()
    assert not any("exactly what this kit renders" in line for line in verdict.lines())


def test_an_unchanged_report_of_another_kit_is_shown_and_its_readme_is_not(same_kit, fresh_bundle, tmp_path):
    verdict = verify_bundle(_older(fresh_bundle, tmp_path))
    assert verdict.ok and verdict.not_shown == [README], _lines(verdict)
    assert "note: report.html is exactly what this kit renders from the verified files" in verdict.lines()


def test_a_changed_report_of_this_kit_fails_and_show_renders_the_faithful_one(same_kit, fresh_bundle, tmp_path):
    forged = _edited(fresh_bundle, tmp_path / "forged.tar.gz", file="/report.html",
                     replace_text=["<h2>Headline</h2>", "<h2>Summary</h2>"])
    verdict = verify_bundle(forged)
    assert [(p.file, p.what.split(" (")[0]) for p in verdict.problems] == [
        (REPORT, "differs from what this kit renders from the verified files")]
    written = tmp_path / "faithful.html"
    shown = run_kit("show", str(fresh_bundle), "--report", str(written), scratch=tmp_path / "s")
    assert shown.code == 0, shown.text
    assert written.read_bytes() == _members(fresh_bundle)[REPORT]
    assert f"report rendered from the verified data: {written}" in shown.out


def test_show_renders_the_faithful_page_from_a_bundle_whose_own_is_hostile(same_kit, fresh_bundle, tmp_path):
    forged = _edited(_older(fresh_bundle, tmp_path), tmp_path / "forged.tar.gz", file="/report.html",
                     replace_text=["</body>", fragment(ACTIVE["script"]) + "</body>"])
    written = tmp_path / "faithful.html"
    shown = run_kit("show", str(forged), "--report", str(written), scratch=tmp_path / "s")
    assert shown.code == 0, shown.text
    assert "NOT shown: 2 documents" in shown.out.splitlines()[0]  # the verified: line says so first
    assert written.read_bytes() == _members(fresh_bundle)[REPORT] and b"<script" not in written.read_bytes()


def test_a_report_is_not_shown_when_its_data_does_not_verify(same_kit, fresh_bundle, tmp_path):
    forged = _edited(fresh_bundle, tmp_path / "forged.tar.gz", file="{run}/results/grid.json",
                     set_json={"comparisons.path.diverged": 2})
    verdict = verify_bundle(forged)
    assert len(verdict.mismatches) == 1 and verdict.problems == []
    assert verdict.not_shown == [REPORT, README]
    assert any("not compared with what this kit renders: the files they are rendered from did not verify" in line
               for line in verdict.lines())


@pytest.mark.parametrize("name", sorted(README_RAW))
def test_a_readme_with_raw_html_fails_this_kits_bundle_and_is_not_shown_in_anothers(same_kit, fresh_bundle,
                                                                                     tmp_path, name):
    raw = fragment(README_RAW[name])
    forged = _edited(fresh_bundle, tmp_path / "forged.tar.gz", file="/README.md",
                     replace_text=["## What was run", f"{raw}\n\n## What was run"])
    verdict = verify_bundle(forged)
    assert [p.file for p in verdict.problems] == [README] and verdict.not_shown == [README]
    older = _edited(_older(fresh_bundle, tmp_path), tmp_path / "older-forged.tar.gz", file="/README.md",
                    replace_text=["## What was run", f"{raw}\n\n## What was run"])
    verdict = verify_bundle(older)
    assert verdict.ok and verdict.not_shown == [README], _lines(verdict)


@pytest.mark.parametrize("data", ["<p>x</p>".encode("utf-16"), "\ufeff<p>x</p>".encode(), b"<p>x\x00</p>",
                                  b"<p>\xff</p>"])
def test_a_report_or_readme_that_is_not_this_kits_bytes_is_not_shown(data):
    for name in (REPORT, README):
        shown = reader_files.check({name: data}, [name], "root")
        assert shown.problems == [] and shown.not_shown == [name]


def test_every_document_of_a_bundle_is_compared_or_not_shown(same_kit, tmp_path):
    """An SVG figure (a browser runs its script when it is opened on its own), a page among the logs and a
    Markdown file no kit writes are listed NOT shown; the report embeds the SVG only as an image."""
    run = synthetic_grid_run(tmp_path / "runs" / "grid-toy")
    (run / "analysis").mkdir()
    (run / "analysis" / "figure.svg").write_text(fragment(SVG_FIGURE))
    (run / "analysis" / "notes.md").write_text(fragment(README_RAW["script"]))
    (run / "logs").mkdir(exist_ok=True)
    (run / "logs" / "server.html").write_text(fragment(ACTIVE["script"]))
    bundle = writer.write_bundle([run], tmp_path / "b.tar.gz", environ={}).path
    verdict = verify_bundle(bundle)
    assert verdict.ok, _lines(verdict)
    prefix = "runs/grid-toy/"
    assert verdict.not_shown == [f"{prefix}analysis/figure.svg", f"{prefix}analysis/notes.md",
                                 f"{prefix}logs/server.html"], _lines(verdict)
    assert "note: report.html and README.md are exactly what this kit renders from the verified files" in \
        verdict.lines()
    assert '<img src="data:image/svg+xml;base64,' in _members(bundle)[REPORT].decode()


def test_engine_text_is_escaped_in_the_report_and_readme(same_kit, tmp_path):
    name = "<script>alert(1)</script>[x](https://evil.example/)<img src=x onerror=alert(1)>\x00\x1b[2J"
    run = synthetic_grid_run(tmp_path / "runs" / "grid-toy", model_name=name)
    manifest = Manifest.load(run)
    manifest.update(reason='"><iframe src=https://evil.example/></style><script>x</script>')
    bundle = writer.write_bundle([run], tmp_path / "b.tar.gz", environ={}).path
    verdict = verify_bundle(bundle)
    assert verdict.ok, _lines(verdict)
    files = _members(bundle)
    page, readme = files[REPORT].decode(), files[README].decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script" not in page and "<iframe" not in page
    assert "\x00" not in page and "\x1b" not in page and "\x00" not in readme
    assert "\\<script\\>alert(1)\\</script\\>" in readme
    tokens = MarkdownIt("commonmark").parse(readme)
    inline = [child for token in tokens for child in token.children or []]
    assert not [t for t in [*tokens, *inline] if t.type in ("html_block", "html_inline", "image", "link_open")]


@pytest.mark.parametrize("bundle", OLD_BUNDLES, ids=lambda p: p.name)
def test_reports_and_readmes_of_an_earlier_release_verify_and_are_not_shown(bundle, same_kit):
    with tarfile.open(bundle) as tar:
        root = tar.getmembers()[0].name.split("/")[0]
        files = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers()
                 if m.isfile() and "/records/" not in m.name and "/logs/" not in m.name}
    shown = reader_files.check(files, files, root)
    assert shown.problems == [] and shown.not_shown == [REPORT, README]
    assert shown.notes == ["not shown: report.html, README.md (written by kit 0.1.0 (commit "
                           "da529a9fbb9d7de551fc05daf2a20bc17216e822), not this one, and not what this kit renders "
                           f"from the verified files); do not open them: {SHOW_REPORT}"]
    page = reader_files.rendered(files, root)[REPORT]
    assert b"<h2>Headline</h2>" in page and b"Content-Security-Policy" in page  # today's page, from the same files


@pytest.mark.parametrize("args, error", [
    (["--no-verify", "--report", "{tmp}/r.html"], "--report renders the report from the verified data and cannot "
                                                  "be used with --no-verify; drop --no-verify"),
    (["--report", "{tmp}/r.txt"], "is not an .html file name; give --report a file name ending in .html"),
    (["--report", "{tmp}/missing/r.html"], "does not exist or is not writable"),
])
def test_show_report_refuses_a_bad_target_before_reading_anything(fresh_bundle, tmp_path, args, error):
    outcome = run_kit("show", str(fresh_bundle), *[a.format(tmp=tmp_path) for a in args], scratch=tmp_path / "s")
    assert outcome.code == 2 and error in outcome.one_line_reason()
    assert not list(tmp_path.glob("r.*")) and not (tmp_path / "missing").exists()


def test_show_report_writes_nothing_for_a_bundle_that_does_not_verify(fresh_bundle, tmp_path):
    forged = _edited(fresh_bundle, tmp_path / "forged.tar.gz", file="{run}/results/grid.json",
                     set_json={"comparisons.path.diverged": 2})
    outcome = run_kit("show", str(forged), "--report", str(tmp_path / "r.html"), scratch=tmp_path / "s")
    assert outcome.code == 1 and "does not verify" in outcome.one_line_reason()
    assert not (tmp_path / "r.html").exists() and not list(tmp_path.glob(".r.html*"))


def test_verify_parses_the_bundles_index_once(same_kit, fresh_bundle, monkeypatch):
    """The schema check, the report and README rendered again, and whose kit wrote them all read the index
    verify parsed once."""
    from kit.bundle import INDEX, content, verify as verify_module

    index = _members(fresh_bundle)[INDEX]
    parses: list[int] = []
    real_load = content.load_json
    for module in (verify_module, reader_files):
        monkeypatch.setattr(module, "load_json", lambda data: (parses.extend([1] if data == index else []),
                                                               real_load(data))[1])
    verdict = verify_bundle(fresh_bundle)
    assert verdict.ok and "exactly what this kit renders from the verified files" in _lines(verdict)
    assert len(parses) == 1
