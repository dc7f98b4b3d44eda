"""The harness table through its model (kit.protocols.harness.table): every fixture study, in both layouts (a
study's, and the first layout of runs imported before several boxes), is written through the model as the bytes
of the table it computes (run id first, each mode's keys where its analyzer puts them), reads back as its layout,
and a table of the wrong shape is refused in one line naming the file and the field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.importers.determinism_harness import HarnessFiles, import_run
from kit.protocols.harness import results as harness
from kit.core.errors import ConfigError
from kit.protocols.harness.record import Resolved, calls_of
from kit.protocols.harness.table import HarnessResults, HarnessRunV1, HarnessStudy
from kit.protocols.results_model import NotResults
from kit.record.files import DamagedRecords, read_records

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "harness"
SINGLE = sorted(p.stem for p in FIXTURES.glob("*.jsonl"))
STUDY = ("fixture-churn-cuda", "fixture-churn-metal")


def _text(data: dict) -> bytes:
    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode("utf-8")


def _import(tmp_path: Path, names: tuple[str, ...], report: str | None) -> Path:
    reported = FIXTURES / f"{report}.report.json" if report else None
    files = [HarnessFiles.beside(FIXTURES / f"{name}.jsonl", reported) for name in names]
    return import_run(files if len(files) > 1 else files[0], tmp_path / "runs")


def _first_layout(run_dir: Path) -> None:
    """The manifest as an earlier release wrote it: no `definitions`, no boxes."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for key in ("definitions", "boxes"):
        manifest["protocol"]["resolved"].pop(key, None)
    (run_dir / "manifest.json").write_text(json.dumps(manifest))


CASES = [((name,), name if (FIXTURES / f"{name}.report.json").exists() else None) for name in SINGLE] + [
    (STUDY, "fixture-churn-study")]


@pytest.mark.parametrize("first_layout", [False, True], ids=["study", "first layout"])
@pytest.mark.parametrize(("names", "report"), CASES, ids=["+".join(names) for names, _ in CASES])
def test_the_table_written_through_its_model_is_the_computed_table_byte_for_byte(names, report, first_layout,
                                                                                 tmp_path):
    run_dir = _import(tmp_path, names, report)
    if first_layout:
        _first_layout(run_dir)
    written = harness.results(run_dir).to_json()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    resolved = manifest["protocol"]["resolved"]
    computed = {"run_id": manifest["run_id"],
                **harness.compute(harness.read_calls(run_dir / "records" / "calls.jsonl"),
                                  harness.Resolved.of(resolved, str(run_dir))).to_json()}
    stored = (run_dir / "results" / "harness.json").read_bytes()
    assert list(json.loads(stored))[:2] == ["run_id", "table"]
    assert {k: v for k, v in written.items() if k != "report_comparison"} == computed
    assert stored == _text(written)
    typed = HarnessResults.of(json.loads(stored), "results/harness.json")
    assert type(typed) is (HarnessRunV1 if first_layout else HarnessStudy)
    assert _text(typed.to_json()) == stored
    assert ("report_comparison" in written) == (report is not None)


@pytest.mark.parametrize(("change", "field"), [
    (lambda t: t["boxes"]["fixture"]["arms"]["blocked"]["metrics"].update(n="3"), "boxes.fixture.arms.blocked.metrics.n"),
    (lambda t: t["gates"]["manipulation"].update({"pass": "yes"}), "gates.manipulation.pass"),
    (lambda t: t["arms"]["churn"].pop("n_raw"), "arms.churn.n_raw"),
    (lambda t: t.update(cross_box=[]), "cross_box"),
])
def test_a_table_of_the_wrong_shape_is_refused_in_one_line_naming_file_and_field(change, field, tmp_path):
    run_dir = _import(tmp_path, ("fixture-churn-ab",), None)
    table = json.loads((run_dir / "results" / "harness.json").read_text())
    change(table)
    with pytest.raises(NotResults) as refused:
        HarnessResults.of(table, "runs/x/results/harness.json")
    line = str(refused.value)
    assert line.startswith(f"runs/x/results/harness.json: {field}") and "\n" not in line


@pytest.mark.parametrize(("change", "field"), [
    (lambda r: r.update(ok="yes"), "ok"),
    (lambda r: r.pop("output_sha256"), "output_sha256"),
    (lambda r: r.update(usage={"load_duration_ns": "5s"}), "usage.load_duration_ns"),
    (lambda r: r.update(logprob_margins={"tokens": [["a", 1]], "chosen_not_top1": 0}), "logprob_margins.tokens.0"),
])
def test_a_record_of_the_wrong_shape_is_refused_in_one_line_naming_file_line_and_field(change, field, tmp_path):
    """The table's recompute reads the run folder's calls once, typed (kit.protocols.harness.record): a record the
    analyzers would misread is refused there, never a traceback deeper in."""
    run_dir = _import(tmp_path, ("fixture-churn-ab",), None)
    records = read_records(run_dir / "records" / "calls.jsonl").records
    assert len(calls_of(records, "calls.jsonl")) == len(records) == 8
    change(records[1])
    with pytest.raises(DamagedRecords) as refused:
        calls_of(records, "runs/x/records/calls.jsonl")
    line = str(refused.value)
    assert line.startswith(f"runs/x/records/calls.jsonl:2: {field}") and "\n" not in line


def test_a_manifest_whose_thresholds_are_not_numbers_is_refused_in_one_line():
    assert Resolved.of({"mode": "churn-ab", "thresholds": [15, 30.0]}, "runs/x").thresholds == [15, 30.0]
    with pytest.raises(ConfigError) as refused:
        Resolved.of({"mode": "churn-ab", "thresholds": ["15", 30.0]}, "runs/x")
    line = str(refused.value)
    assert line.startswith("runs/x: manifest's protocol.resolved: thresholds.0") and "\n" not in line
