"""`kit import determinism-harness`: seed 002's two shipped runs (real records, ../shared/data) import,
analyse, bundle and verify, and agree with the harness's own reports on every value both compute; the
labelled fixtures (tests/fixtures/harness) cover cycles, unloads, failed and truncated calls; bad input
is refused in one line before anything is written."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kit.bundle.verify import verify_bundle
from kit.bundle.writer import write_bundle
from kit.importers.determinism_harness import HarnessFiles, import_run
from kit.core.paths import REPO_ROOT
from kit.protocols import kinds
from kit.protocols.kinds import validate_record
from kit.record.files import read_records
from tests.bundle.kit_cli import run_here as kit
from tests.test_cli_errors import one_line_error

SHARED = REPO_ROOT.parent / "shared" / "data" / "determinism-harness"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "harness"
SHIPPED = {"cache-ab": ("runs/local-study3-cache-ab-20260730T231915Z.jsonl",
                        "reports/cache-ab-report-20260730T232908Z.json"),
           "cache-timing": ("runs/local-study3-cache-timing-20260730T233649Z.jsonl",
                            "reports/cache-timing-report-20260730T234514Z.json")}
# what the reports hold and the kit does not compute (the harness's labels of earlier sessions' outputs)
NOT_COMPUTED = {"history_matches"}

pytestmark = pytest.mark.skipif(not SHARED.is_dir(), reason="seed 002's records are in ../shared/data")


def results(run_dir: Path) -> dict:
    return json.loads((run_dir / "results" / "harness.json").read_text())


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_a_shipped_run_imports_every_call_and_agrees_with_the_harness_report(name, tmp_path):
    calls, report = (SHARED / part for part in SHIPPED[name])
    run_dir = import_run(HarnessFiles.beside(calls, report), tmp_path, thresholds=(25.0, 30.0))
    source = [json.loads(line) for line in calls.read_text().splitlines()]
    records = read_records(run_dir / "records" / "calls.jsonl").records
    assert len(records) == len(source) and [r["seq"] for r in records] == list(range(len(source)))
    assert [r["schedule_index"] for r in records] == sorted(c["schedule_index"] for c in source)
    assert {r["output_sha256"] for r in records} == {c["text_sha256"] for c in source}
    for record in records:
        validate_record(record)
    assert sorted(p.name for p in (run_dir / "records" / "imported").iterdir()) == sorted(
        [calls.name, calls.name.replace(".jsonl", ".manifest.json"), calls.name.replace(".jsonl", ".done.json"),
         report.name])
    comparison = results(run_dir)["report_comparison"]
    assert comparison["differ"] == [] and comparison["agree"] == comparison["compared"] == 55
    assert {key.rsplit(".", 1)[1] for key in comparison["not_computed"]} == NOT_COMPUTED
    assert all(why.startswith("not computed, because ") for why in comparison["not_computed"].values())
    reported = json.loads(report.read_text())["boxes"]["cuda"]
    ours = results(run_dir)["boxes"]["cuda"]
    for arm, values in reported["arms"].items():  # spot checks against the report itself
        assert ours["arms"][arm]["metrics"]["modal_sha256"] == values["metrics"]["modal_sha256"]
        assert ours["arms"][arm]["metrics"]["norm_distance_max"] == values["metrics"]["norm_distance_max"]
        assert ours["arms"][arm]["prefill_ms"] == values["prefill_ms"]
    assert ours["gates"]["manipulation"]["pass"] is reported["gates"]["manipulation"]["pass"] is False
    assert results(run_dir)["gates"]["manipulation"]["pass"] is False  # over the study: its one box


def test_an_imported_run_analyses_bundles_and_verifies(tmp_path):
    calls, report = (SHARED / part for part in SHIPPED["cache-ab"])
    run_dir = import_run(HarnessFiles.beside(calls, report), tmp_path / "runs")
    analysed = kit("analyze", str(run_dir), "--no-figures", "--thresholds", "30,40")
    assert analysed.returncode == 0, analysed.stderr
    assert "manipulation gate FAIL, arms differ: None" in analysed.stdout
    (found,) = json.loads((run_dir / "analysis" / "findings.json").read_text())["harness"]
    assert found["thresholds_ms"] == [30, 40] and set(found["boxes"]["cuda"]["by_state"]["cold"]) == {"above",
                                                                                                        "between"}
    assert "by_state" not in results(run_dir)["boxes"]["cuda"]  # imported without thresholds

    def without_states(table: dict) -> dict:
        boxes = {box: {k: v for k, v in block.items() if k != "by_state"} for box, block in table["boxes"].items()}
        return {k: v for k, v in table.items() if k not in ("run", "run_id", "report_comparison", "thresholds_ms",
                                                             "boxes")} | {"boxes": boxes}

    assert without_states(found) == without_states(results(run_dir))
    verdict = verify_bundle(write_bundle([run_dir], tmp_path / "h.tar.gz", environ={}).path)
    assert verdict.ok, verdict.lines()
    assert any(name.endswith("results/harness.json") for name in verdict.results_compared)
    resumed = kit("resume", str(run_dir))
    one_line_error(resumed, "was imported from determinism-harness, not run")


def test_failed_truncated_and_differing_calls_of_a_churn_run(tmp_path):
    run_dir = import_run(HarnessFiles.beside(FIXTURES / "fixture-churn-ab.jsonl"), tmp_path)
    blocked, churn = (results(run_dir)["boxes"]["fixture"]["arms"][arm] for arm in ("blocked", "churn"))
    assert blocked["excluded"] == {"error": 1, "truncated_or_other_stop": 0} and blocked["metrics"]["n"] == 3
    assert churn["excluded"] == {"error": 0, "truncated_or_other_stop": 1} and churn["metrics"]["n"] == 3
    m = churn["metrics"]
    assert (m["distinct_count"], m["modal_count"], m["divergence_char_indices"]) == (2, 2, [1])
    assert m["pairwise_agreement"] == pytest.approx(1 / 3)  # of 3 pairs, only X-X agrees
    assert m["output_token_variance"] == pytest.approx(2 / 9)  # tokens 8, 9, 8
    assert m["norm_distance_max"] == pytest.approx(1 / 2)  # "Xy" is one edit from "X", over 2 characters
    assert m["norm_distance_mean_all"] == pytest.approx(1 / 6)
    assert churn["prefill_ms"] == {"min": 31.0, "median": 35.0, "max": 37.0}
    records = read_records(run_dir / "records" / "calls.jsonl").records
    assert [r["error"] is not None for r in records].count(True) == 1  # the failed call is kept, marked
    assert {r["box"] for r in records} == {"fixture"} and {r["source_file"] for r in records} == {
        "fixture-churn-ab.jsonl"}


def _copy(tmp_path: Path, edit=None, done_edit=None) -> Path:
    source = FIXTURES / "fixture-churn-ab.jsonl"
    for suffix in (".manifest.json", ".done.json"):
        shutil.copy(source.with_name(source.name.replace(".jsonl", suffix)), tmp_path)
    lines = source.read_text().splitlines()
    (tmp_path / source.name).write_text("\n".join(edit(lines) if edit else lines) + "\n")
    if done_edit:
        done = tmp_path / source.name.replace(".jsonl", ".done.json")
        done.write_text(json.dumps(done_edit(json.loads(done.read_text()))))
    return tmp_path / source.name


def _set(line: str, **changes) -> str:
    return json.dumps({**json.loads(line), **changes})


@pytest.mark.parametrize("edit, done_edit, needle", [
    (lambda ls: ls[:2] + [_set(ls[2], schema=2)] + ls[3:], None, "fixture-churn-ab.jsonl:3 is not a harness record"),
    (lambda ls: ls[:1] + [_set(ls[1], text="changed")] + ls[2:], None, ":2: text_sha256"),
    (lambda ls: ls[:4] + [_set(ls[4], schedule_index=1)] + ls[5:], None,
     ":5 repeats schedule_index 1 (first at line 2)"),
    (lambda ls: ls[:-1], None, "says 8 calls finished (complete: True) but"),
    (lambda ls: ls[:3] + [_set(ls[3], run_name="other")] + ls[4:], None, ":4 is a call of run 'other'"),
    (lambda ls: ls[:3] + [_set(ls[3], ok="yes")] + ls[4:], None, ":4 has ok 'yes'"),
    (None, lambda d: {**d, "complete": False}, "complete: False"),
    (lambda ls: ls[:2] + ["{not json"] + ls[3:], None, ":3 is not a JSON object"),
])
def test_a_file_that_would_lose_or_double_a_call_is_refused_before_anything_is_written(tmp_path, edit, done_edit,
                                                                                      needle):
    (tmp_path / "in").mkdir()
    calls = _copy(tmp_path / "in", edit, done_edit)
    out = tmp_path / "out"
    one_line_error(kit("import", "determinism-harness", str(calls), "--out", str(out)), needle)
    assert not out.exists()


def test_missing_companion_files_and_bad_thresholds_are_named(tmp_path):
    lone = tmp_path / "lone.jsonl"
    shutil.copy(FIXTURES / "fixture-churn-ab.jsonl", lone)
    one_line_error(kit("import", "determinism-harness", str(lone), "--out", str(tmp_path / "out")),
                   "lone.manifest.json is missing")
    for bad in ("30", "30,x", "40,30", "-1,5", "nan,5"):
        one_line_error(kit("import", "determinism-harness", str(FIXTURES / "fixture-churn-ab.jsonl"),
                           "--thresholds", bad, "--out", str(tmp_path / "out")), "--thresholds")
    assert not (tmp_path / "out").exists()


def test_a_protocol_file_cannot_ask_for_the_imported_kind(tmp_path):
    (tmp_path / "h.yaml").write_text("protocol: harness\n")
    refused = kit("run", str(tmp_path / "h.yaml"), "--out", str(tmp_path / "out"))
    allowed = ", ".join(sorted(name for name, kind in kinds.KINDS.items() if kind.from_files))  # not harness
    assert "harness" not in allowed and "reset" in allowed
    one_line_error(refused, f"key 'protocol' is 'harness'; allowed values: {allowed}")
    assert not (tmp_path / "out").exists()


def test_a_run_folder_whose_writing_fails_is_removed_and_the_harness_files_kept(tmp_path, monkeypatch):
    import errno

    from kit.core.errors import KitError
    from kit.record.files import RecordWriter

    calls = _copy(tmp_path, None, None)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    def disk_full(self, record):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(RecordWriter, "write", disk_full)
    with pytest.raises(KitError, match="writing the run folder under .* failed \\(No space left on device\\); nothing"):
        import_run(HarnessFiles.beside(calls), tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_calls_file_that_changes_while_it_is_imported_is_refused(tmp_path):
    from kit.core.errors import ConfigError

    calls = _copy(tmp_path, None, None)
    heard = []

    def grow(what: str, done: int, total: int) -> None:
        heard.append(what)
        if what == "checking" and done == total:  # checked whole: now someone appends a line
            with calls.open("a") as fh:
                fh.write(calls.read_text().splitlines()[0] + "\n")

    with pytest.raises(ConfigError, match="changed while it was imported"):
        import_run(HarnessFiles.beside(calls), tmp_path / "out", progress=grow)
    assert list((tmp_path / "out").iterdir()) == [] and "copying" in heard


def test_more_calls_than_the_limit_are_refused_at_the_first_one_over(tmp_path, monkeypatch):
    from kit.core.errors import ConfigError
    from kit.importers import determinism_harness

    monkeypatch.setattr(determinism_harness, "IMPORT_CALLS_MAX", 5)
    with pytest.raises(ConfigError, match=r"fixture-churn-ab\.jsonl:6 is call 6: the kit imports at most 5 calls"):
        import_run(HarnessFiles.beside(FIXTURES / "fixture-churn-ab.jsonl"), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_progress_is_heard_for_each_pass_and_the_import_matches_a_quiet_one(tmp_path):
    heard: dict[str, tuple[int, int]] = {}
    run_dir = import_run(HarnessFiles.beside(FIXTURES / "fixture-churn-ab.jsonl"), tmp_path / "a",
                         progress=lambda what, done, total: heard.__setitem__(what, (done, total)))
    quiet = import_run(HarnessFiles.beside(FIXTURES / "fixture-churn-ab.jsonl"), tmp_path / "b")
    size = (FIXTURES / "fixture-churn-ab.jsonl").stat().st_size
    assert heard == {"checking": (size, size), "copying": (size, size), "writing records": (8, 8)}
    def calls(run: Path) -> list[dict]:
        return [{**r, "run_id": None} for r in read_records(run / "records" / "calls.jsonl").records]

    assert calls(run_dir) == calls(quiet) and len(calls(run_dir)) == 8
