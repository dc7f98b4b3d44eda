"""`kit verify` recomputes a run's analysis/ (findings.json, Tables III-VII as CSV, Markdown and LaTeX, the
data of every figure, compare-paper.*) from the bundle's raw records and compares each file by its rule
(docs/bundles.md); it says in numbers what it recomputed, and a bundle an older kit wrote still verifies.

The runs are the real CPU runs of tests/fixtures/records_v1 (a demo reset run and a tiny grid run, made with
the embedded llama-server), analysed and compared by this kit with small replicate counts; the older bundle,
tests/fixtures/bundles/analysed-eb721ab.tar.gz, holds the same two runs analysed, compared and bundled by the
kit at commit eb721ab (before Table IV's `k of n` layout and the figure data files)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.analysis import findings
from kit.bundle.verify import verify_bundle
from kit.bundle.writer import write_bundle
from kit.cli import cli
from tests.bundle import mutations

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
RUNS = ["demo-20261201-070851", "grid-tiny-20261201-070919"]
OLD_BUNDLE = FIXTURES / "bundles" / "analysed-eb721ab.tar.gz"
SETTINGS = findings.Settings(block_bootstrap_replicates=200, sweep_replicates=50, cluster_replicates=50, workers=1)


@pytest.fixture(scope="module")
def analysed(tmp_path_factory) -> bytes:
    """A bundle of the two runs, each analysed into its own analysis/ and compared with the paper."""
    root = tmp_path_factory.mktemp("analysed")
    runs = [Path(shutil.copytree(FIXTURES / "records_v1" / run, root / run)) for run in RUNS]
    for run in runs:
        findings.analyze([run], run / "analysis", SETTINGS)
        done = CliRunner().invoke(cli, ["compare", str(run)])
        assert done.exit_code == 0, done.output
    return write_bundle(runs, root / "analysed.tar.gz", environ={}).path.read_bytes()


def verify(data: bytes, tmp_path: Path, name: str = "b.tar.gz"):
    path = tmp_path / name
    path.write_bytes(data)
    return verify_bundle(path)


def test_everything_the_analysis_wrote_is_recomputed_and_counted(analysed, tmp_path):
    verdict = verify(analysed, tmp_path)
    assert verdict.ok, verdict.lines()
    assert verdict.by_kind["findings"][0] == 2
    assert verdict.by_kind["tables"][0] == 2 * 5 * 3  # Tables III-VII, csv/md/tex, for each run's analysis
    assert verdict.by_kind["figure data"][0] == 3  # fig3 (demo), fig1 and fig2 (grid)
    assert verdict.by_kind["comparison with the paper"][0] == 2 * 5  # compare-paper.*: 3, compare-claims.*: 2
    assert all(values > 0 for _, values in verdict.by_kind.values())
    assert verdict.images == [0, 6] and verdict.not_recomputed == []
    assert not any("not recomputed" in note for note in verdict.notes), verdict.notes
    summary = verdict.summary()
    files = sum(count for count, _ in verdict.by_kind.values())
    assert summary.startswith(f"OK: {verdict.files_checked} files match their checksums; recomputed {files} files, "
                              f"{verdict.values_compared:,} values from {verdict.records} records (results: 4 files")
    assert verdict.records == sum(len((FIXTURES / "records_v1" / run / "records" / f).read_bytes().splitlines())
                                  for run in RUNS for f in
                                  [p.name for p in (FIXTURES / "records_v1" / run / "records").iterdir()])


@pytest.mark.parametrize("file, old, new", [
    ("demo-20261201-070851/analysis/tables/table_IV.md", "1 of 2 in each session", "0 of 2 in each session"),
    ("demo-20261201-070851/analysis/tables/table_IV.csv", ",Q4_1,2,s2,2,2,2,1,", ",Q4_1,2,s2,2,2,2,0,"),
    ("grid-tiny-20261201-070919/analysis/tables/table_V.tex", " & 1 & ", " & 5 & "),
    ("grid-tiny-20261201-070919/analysis/figures/fig1_divergence.json", '"n": 1', '"n": 4'),
    ("demo-20261201-070851/analysis/compare-paper.csv", "Table VII,", "Table III,"),
    ("demo-20261201-070851/analysis/compare-claims.json", '"verdict": "holds"', '"verdict": "does not hold"'),
    ("demo-20261201-070851/analysis/compare-claims.md", "| holds | SmolLM2-135M Q4_1: recompute s1 2/2",
     "| holds | SmolLM2-135M Q4_1: recompute s1 1/2"),
])
def test_a_changed_number_in_any_analysis_file_is_a_mismatch_naming_it(analysed, tmp_path, file, old, new):
    forged = mutations.edit(analysed, file, reseal=True, replace_text=[old, new])
    verdict = verify(forged, tmp_path)
    assert not verdict.ok
    assert {m.file for m in verdict.mismatches} == {f"runs/{file}"}, verdict.lines()


def test_a_changed_count_in_the_findings_is_a_mismatch(analysed, tmp_path):
    forged = mutations.edit(analysed, "demo-20261201-070851/analysis/findings.json", reseal=True,
                            set_json={"tables.IV.rows.0.paths_differ": [0, 0]})
    verdict = verify(forged, tmp_path)
    assert [(m.file, m.key) for m in verdict.mismatches] == [
        ("runs/demo-20261201-070851/analysis/findings.json", "tables.IV.rows[0].paths_differ[0]"),
        ("runs/demo-20261201-070851/analysis/findings.json", "tables.IV.rows[0].paths_differ[1]")]


def test_findings_of_runs_the_bundle_lacks_are_said_not_recomputed(analysed, tmp_path):
    forged = mutations.edit(analysed, "grid-tiny-20261201-070919/analysis/findings.json", reseal=True,
                            set_json={"runs.0.run": "elsewhere-1"})
    verdict = verify(forged, tmp_path)
    assert verdict.ok, verdict.lines()
    # the tables, findings, compare-paper, compare-claims, the two figures' data and their four images
    assert len(verdict.not_recomputed) == 3 * 5 + 1 + 3 + 2 + 2 + 4
    assert all(name.startswith("runs/grid-tiny-20261201-070919/analysis/") for name in verdict.not_recomputed)
    assert any("elsewhere-1" in note and "bundle them together" in note for note in verdict.notes)
    assert "; NOT recomputed: 27 (computed files, " in verdict.summary()


def test_settings_out_of_bounds_are_not_run(analysed, tmp_path):
    forged = mutations.edit(analysed, "demo-20261201-070851/analysis/findings.json", reseal=True,
                            set_json={"settings.block_bootstrap_replicates": 10**12})
    verdict = verify(forged, tmp_path)
    assert any("settings.block_bootstrap_replicates is 1000000000000" in note for note in verdict.notes)
    assert "NOT recomputed" in verdict.summary()


def test_a_bundle_of_an_older_kit_verifies_with_its_layout_differences_said(tmp_path):
    verdict = verify_bundle(OLD_BUNDLE)
    assert verdict.ok, verdict.lines()
    assert verdict.not_recomputed == [] and verdict.images == [6, 0]
    assert verdict.by_kind["tables"][0] == 30 and verdict.by_kind["findings"][0] == 2
    notes = "\n".join(verdict.notes)
    assert "table_IV.csv, tables/table_IV.md, tables/table_IV.tex" in notes  # the older Table IV layout
    assert "figure images with no data beside them" in notes
    assert "6 figure images with no data beside them to recompute" in verdict.summary()


@pytest.mark.parametrize("file, old, new", [
    ("demo-20261201-070851/analysis/tables/table_IV.md", "| 2/2 | 2/2 | 2/2 | 1/1 |", "| 2/2 | 2/2 | 2/2 | 3/3 |"),
    ("grid-tiny-20261201-070919/analysis/tables/table_III.md", "(0/1)", "(1/1)"),
    ("demo-20261201-070851/analysis/tables/table_VII.csv", ",2,1,0,0,0", ",2,1,2,2,0"),
])
def test_a_changed_number_in_an_older_layout_is_still_a_mismatch(tmp_path, file, old, new):
    forged = mutations.edit(OLD_BUNDLE.read_bytes(), file, reseal=True, replace_text=[old, new])
    verdict = verify(forged, tmp_path)
    assert {m.file for m in verdict.mismatches} == {f"runs/{file}"}, verdict.lines()


def test_gsm8k_correctness_this_machine_cannot_recompute_is_said_and_not_a_mismatch(tmp_path):
    """Table VII's correctness needs the GSM8K file the manifest names (its reference answers), which no bundle
    holds: on a machine without it the bundled correctness counts stand, reported as not recomputed; with it,
    they are recomputed like every other value."""
    gsm8k = tmp_path / "gsm8k" / "test.jsonl"
    gsm8k.parent.mkdir()
    gsm8k.write_text("".join(json.dumps({"question": f"q{i}", "answer": f"so #### {i}"}) + "\n" for i in range(2)))
    run = Path(shutil.copytree(FIXTURES / "records_v1" / RUNS[0], tmp_path / RUNS[0]))
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["workload"] = {"source": "gsm8k", "file": str(gsm8k), "items": 2, "first_item": 0}
    (run / "manifest.json").write_text(json.dumps(manifest))
    found = findings.analyze([run], run / "analysis", SETTINGS, figures=False)
    assert "correct_recompute" in found.table("VII").rows[0]
    bundle = write_bundle([run], tmp_path / "gsm8k.tar.gz", environ={}).path
    assert verify_bundle(bundle).not_recomputed == []
    gsm8k.unlink()
    verdict = verify_bundle(bundle)
    assert verdict.ok, verdict.lines()
    assert verdict.not_recomputed == [f"runs/{RUNS[0]}/analysis/findings.json: Table VII correctness of {RUNS[0]} "
                                      f"(the GSM8K answers: the GSM8K file {gsm8k} named in the manifest is not on "
                                      "this machine)"]
    assert "NOT recomputed: 1 " in verdict.summary()


def test_the_bundle_readme_says_what_verify_recomputes(analysed, tmp_path):
    path = tmp_path / "b.tar.gz"
    path.write_bytes(analysed)
    from tests.bundle.conftest import read_members  # noqa: PLC0415

    _, files = read_members(path)
    readme = files["README.md"].decode()
    for part in ("each run's results, its findings, every table, the data behind every figure and the comparison "
                 "with the paper", "figure images, and anything it cannot recompute, are checked by checksum only",
                 "how many files and values it recomputed from how many records"):
        assert part in " ".join(readme.split()), part


def test_a_label_later_kits_reworded_matches_only_as_the_older_wording_within_the_new():
    from kit.bundle import recompute_analysis as ra  # noqa: PLC0415
    from kit.bundle.value_diff import compare_json  # noqa: PLC0415

    newer = "per request: cache_prompt false in cold; cache_prompt true in warm (server-level prompt cache disabled)"
    for older, equal in (("disabled", True), (newer, True), ("default", False), ("", False)):
        bundled, fresh = ra.comparable(ra.FINDINGS_KIND, {"runs": [{"run": "r", "prompt_cache": older}]},
                                       {"runs": [{"run": "r", "prompt_cache": newer}]})
        assert (compare_json(bundled, fresh, "findings.json") == []) is equal, older


def test_the_markdown_tables_of_a_fresh_analysis_are_shown_and_an_older_kits_are_not(analysed, tmp_path):
    """The Markdown tables and compare-paper.md are documents (docs/security.md, rule 4): shown only when they
    are byte for byte this kit's rendering of the recomputed findings; an older layout is listed NOT shown."""
    fresh = verify(analysed, tmp_path)
    assert fresh.ok and fresh.not_shown == [], "\n".join(fresh.lines())
    assert sum(name.endswith(".md") for name in fresh.renderings) == 2 * 7  # 5 tables, compare-paper.md and compare-claims.md per run
    older = verify(OLD_BUNDLE.read_bytes(), tmp_path, "old.tar.gz")
    assert older.ok and "report.html" in older.not_shown, "\n".join(older.lines())
    assert any(name.endswith("/analysis/tables/table_IV.md") for name in older.not_shown)


def test_a_markdown_table_with_raw_html_in_its_caption_is_not_shown(analysed, tmp_path):
    """Its numbers and rows still match (the caption is not compared word for word), so it is no mismatch,
    but it is not this kit's rendering: never shown, never counted as equal."""
    file = "runs/demo-20261201-070851/analysis/tables/table_IV.md"
    text = mutations.decode(analysed).members[mutations.decode(analysed).index(file)][1].decode()
    caption = text.splitlines()[0]
    forged = mutations.edit(analysed, file, reseal=True,
                            replace_text=[caption, caption + " <script>alert('x')</script>"])
    verdict = verify(forged, tmp_path)
    assert verdict.ok and verdict.mismatches == [], "\n".join(verdict.lines())
    assert verdict.not_shown == [file] and "NOT shown: 1 document" in verdict.summary()
