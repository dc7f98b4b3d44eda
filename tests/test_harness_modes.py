"""Every mode of the determinism harness, and a study of two boxes imported as one run: on the labelled
fixtures (tests/fixtures/harness/build.py) every value of the report the harness's own analyzer wrote for
them agrees with the kit's, the hand-worked numbers hold, and `kit analyze`, `kit bundle`, `kit verify`
and `kit show` handle the two-box run. A run folder imported before (no `definitions`) keeps its table."""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from pathlib import Path

import pytest

from kit.protocols.harness import results as harness, results_v1 as harness_v1
from kit.bundle.verify import verify_bundle
from kit.bundle.writer import write_bundle
from kit.importers.determinism_harness import HarnessFiles, import_run
from kit.record.files import read_records
from tests.bundle.kit_cli import run_here as kit
from tests.test_cli_errors import one_line_error

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "harness"
STUDY = ("fixture-churn-cuda", "fixture-churn-metal")
# fixture calls files -> (its report, values compared, what is not computed)
MODES = {"cache-ab": (("fixture-cache-ab",), "fixture-cache-ab", 55, {"history_matches"}),
         "cache-timing": (("fixture-cache-timing",), "fixture-cache-timing", 55, {"history_matches"}),
         "cache-instance": (("fixture-cache-instance",), "fixture-cache-instance", 60, {"history_matches"}),
         "churn-ab": (("fixture-churn-ab",), "fixture-churn-ab", 65, set()),
         "churn-ab, two boxes": (STUDY, "fixture-churn-study", 154, set()),
         "margins": (("fixture-margins",), "fixture-margins", 23, set())}


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def imported(tmp_path: Path, names, report: str | None = None, thresholds=None) -> dict:
    reported = FIXTURES / f"{report}.report.json" if report else None
    run_dir = import_run([HarnessFiles.beside(FIXTURES / f"{name}.jsonl", reported) for name in names], tmp_path,
                         thresholds)
    return json.loads((run_dir / "results" / "harness.json").read_text())


@pytest.mark.parametrize("mode", sorted(MODES))
def test_every_value_of_the_harness_report_agrees(mode, tmp_path):
    names, report, compared, not_computed = MODES[mode]
    comparison = imported(tmp_path, names, report)["report_comparison"]
    assert comparison["differ"] == [], [r for r in comparison["rows"] if r["agree"] is False]
    assert comparison["agree"] == comparison["compared"] == compared
    assert {key.rsplit(".", 1)[1] for key in comparison["not_computed"]} == not_computed
    reported = json.loads((FIXTURES / f"{report}.report.json").read_text())
    assert set(comparison["boxes"]) == set(reported.get("boxes", {}))


def test_a_modal_tie_goes_to_the_smaller_text_and_every_non_modal_output_has_its_index(tmp_path):
    table = imported(tmp_path, ("fixture-cache-ab",))
    warm = table["boxes"]["fixture"]["arms"]["warm"]["metrics"]
    assert warm["modal_sha256"] == sha("Wa") and warm["modal_count"] == 2  # "Wb" came first, "Wa" is smaller
    assert warm["divergence_char_indices"] == [1, 1]  # two "Wb" outputs: one entry each, repeats kept
    assert warm["pairwise_agreement"] == pytest.approx(4 / 12)  # ordered pairs: 2 + 2 of 4 x 3
    gate = table["boxes"]["fixture"]["gates"]["manipulation"]
    assert gate["threshold_ms"] == 3 * 18.5 and gate["pass"] is True and table["arms_differ"] is True
    assert table["totals"] == {"records_in": 13, "warmups_excluded": 1, "flushers_excluded": 4}


def test_the_churn_gate_and_wald_estimate_per_box_of_a_two_box_study(tmp_path):
    table = imported(tmp_path, STUDY)
    cuda, metal = (table["boxes"][box] for box in ("cuda", "metal"))
    assert cuda["gates"]["manipulation"] | {"rule": None} == {
        "blocked_warm": True, "churn_all_confirmed": True, "churn_all_cold": True, "blocked_median_load_s": 0.05,
        "churn_median_load_s": pytest.approx(5.15), "cold_threshold_s": pytest.approx(0.15), "pass": True,
        "rule": None}
    p1, p2 = 4 / 4, 3 / 4  # churn: C x 4; blocked: B, B, B, Bq
    se = math.sqrt(p1 * (1 - p1) / 4 + p2 * (1 - p2) / 4)
    estimate = cuda["churn_minus_blocked"]
    assert estimate["diff"] == pytest.approx(0.25) and estimate["se"] == pytest.approx(se)
    assert estimate["ci95"] == pytest.approx([0.25 - 1.959963984540054 * se, 0.25 + 1.959963984540054 * se])
    # metal's blocked calls load in 1.2 s: not below the harness's 1 s, so no estimate
    assert metal["gates"]["manipulation"]["blocked_warm"] is False and metal["churn_minus_blocked"] is None
    assert metal["arms"]["churn"]["excluded"]["error"] == 1
    assert table["totals"] == {"records_in": 18, "warmups_excluded": 2}
    assert table["arms"]["blocked"]["metrics"]["n"] == 8 and table["arms"]["churn"]["metrics"]["n"] == 7
    assert table["gates"]["manipulation"]["by_box"] == {"cuda": True, "metal": False}
    assert table["gates"]["manipulation"]["pass"] is False
    classes = table["cache_state_decomposition"]["cuda"]  # blocked repeats 0, 10, 11, 20
    assert {name: c["n"] for name, c in classes.items()} == {"first_blocked_block": 1, "block_head": 2,
                                                             "block_rest": 1, "churn": 4}
    crossed = table["cross_box"]["arms"]
    assert crossed["churn"]["same_modal_bytes"] is True and crossed["churn"]["shared_variants"] == 1
    assert crossed["blocked"]["same_modal_bytes"] is False and crossed["blocked"]["shared_variants"] == 0
    assert crossed["blocked"]["records_matched_in_other_boxes"] == {"cuda": 0.0, "metal": 0.0}
    assert table["cross_box"]["same_modal_bytes_every_arm"] is False


def test_cache_instance_cycles_resets_and_thresholds(tmp_path):
    table = imported(tmp_path / "a", ("fixture-cache-instance",))
    block = table["boxes"]["fixture"]
    assert table["totals"] == {"records_in": 17, "controls_excluded": 5}  # 2 burn-ins, 2 flushers, 1 warmup
    gate = block["gates"]["manipulation"]
    assert (gate["pass"], gate["resets_by_cycle"], gate["pure_median_ms"]) == (True, {"0": True, "1": True}, 21.0)
    assert [c["flip_at_flusher"] for c in block["cycles"]] == [True, False]  # cycle 1 answers B, B, A
    assert block["cycles"][1]["contaminated_uniform"] is False and block["arms_differ"] is True
    assert block["endpoint3_flip_all_cycles"] is False
    strict = imported(tmp_path / "b", ("fixture-cache-instance",), thresholds=(15.0, 30.0))["boxes"]["fixture"]
    assert strict["gates"]["manipulation"]["pure_all_below"] is False and strict["arms_differ"] is None
    assert set(strict["by_state"]["pure"]) == {"between"} and strict["endpoint3_flip_all_cycles"] is None


def test_margins_cells_and_fork(tmp_path):
    table = imported(tmp_path, ("fixture-margins",))
    (key, cell), = table["cells"].items()
    assert key == "fixture::gpt-oss-20b|open_generation|greedy|low"
    assert (cell["n"], cell["records_with_margins"], cell["variant_counts"]) == (4, 3, [3, 1])
    assert cell["fork"]["token_index"] == 1
    assert cell["fork"]["modal"]["margin"] == pytest.approx(0.005)
    assert cell["fork"]["alternate"]["margin"] == pytest.approx(0.0001)
    assert cell["positions_below"]["0.01"] == pytest.approx(3 / 6)  # 0.005 twice and 0.0001 of six rows
    assert table["totals"]["excluded"] == {"error": 0, "truncated_or_other_stop": 1, "no_margins": 1}


def test_a_two_box_study_imports_analyses_bundles_verifies_and_shows(tmp_path):
    calls = [str(FIXTURES / f"{name}.jsonl") for name in STUDY]
    done = kit("import", "determinism-harness", *calls, "--report", str(FIXTURES / "fixture-churn-study.report.json"),
               "--out", str(tmp_path / "runs"))
    assert done.returncode == 0, done.stderr
    assert "154 of 154 values agree" in done.stdout and "box cuda" in done.stdout and "box metal" in done.stdout
    (run_dir,) = (tmp_path / "runs").iterdir()
    records = read_records(run_dir / "records" / "calls.jsonl").records
    assert [(r["box"], r["source_file"]) for r in records] == [("cuda", "fixture-churn-cuda.jsonl")] * 9 + [
        ("metal", "fixture-churn-metal.jsonl")] * 9
    assert [r["seq"] for r in records] == list(range(18))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["protocol"]["resolved"]["boxes"] == ["cuda", "metal"]
    assert [r["run_name"] for r in manifest["imported"]["runs"]] == list(STUDY)
    analysed = kit("analyze", str(run_dir), "--no-figures")
    assert analysed.returncode == 0, analysed.stderr
    assert "2 arms, manipulation gate FAIL" in analysed.stdout
    (found,) = json.loads((run_dir / "analysis" / "findings.json").read_text())["harness"]
    table = json.loads((run_dir / "results" / "harness.json").read_text())
    assert {k: v for k, v in found.items() if k != "run"} == {k: v for k, v in table.items()
                                                              if k not in ("run_id", "report_comparison")}
    bundle = write_bundle([run_dir], tmp_path / "study.tar.gz", environ={}).path
    verdict = verify_bundle(bundle)
    assert verdict.ok, verdict.lines()
    assert any(name.endswith("results/harness.json") for name in verdict.results_compared)
    shown = kit("show", str(bundle))
    assert shown.returncode == 0, shown.stderr
    assert "over every box" in shown.stdout


def test_a_run_imported_before_several_boxes_keeps_its_table_and_verifies(tmp_path):
    """An earlier release wrote no `definitions` (nor box fields): its table is recomputed as it was."""
    run_dir = import_run(HarnessFiles.beside(FIXTURES / "fixture-churn-ab.jsonl"), tmp_path / "runs")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for key in ("definitions", "boxes"):
        del manifest["protocol"]["resolved"][key]
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    table = harness.results(run_dir).to_json()
    records = harness.read_calls(run_dir / "records" / "calls.jsonl")
    resolved = harness.Resolved.of(manifest["protocol"]["resolved"], str(run_dir))
    assert table == {"run_id": manifest["run_id"], **harness_v1.compute(records, resolved).to_json()}
    assert "boxes" not in table and table["arms"]["churn"]["divergence_char_indices"] == [1]
    verdict = verify_bundle(write_bundle([run_dir], tmp_path / "old.tar.gz", environ={}).path)
    assert verdict.ok, verdict.lines()


def _study(tmp_path: Path, rename: dict[str, str]) -> list[Path]:
    paths = []
    for name in STUDY:
        target = tmp_path / rename.get(name, name)
        target.mkdir(parents=True, exist_ok=True)
        for suffix in (".jsonl", ".manifest.json", ".done.json"):
            shutil.copy(FIXTURES / f"{name}{suffix}", target / f"{name}{suffix}")
        paths.append(target / f"{name}.jsonl")
    return paths


@pytest.mark.parametrize("case, needle", [
    ("twice", "is given twice"),
    ("same name", "have the same name"),
    ("other mode", "is a run of mode 'study3-cache-ab'"),
    ("same run", "is run 'fixture-churn-cuda' again"),
])
def test_files_that_are_not_one_study_are_refused_before_anything_is_written(tmp_path, case, needle):
    cuda, metal = _study(tmp_path / "in", {})
    files = {"twice": [cuda, metal, cuda],
             "other mode": [cuda, FIXTURES / "fixture-cache-ab.jsonl"]}.get(case)
    if case == "same name":
        other = tmp_path / "elsewhere"
        other.mkdir()
        for suffix in (".jsonl", ".manifest.json", ".done.json"):
            shutil.copy(FIXTURES / f"fixture-churn-metal{suffix}", other / f"fixture-churn-cuda{suffix}")
        files = [cuda, other / "fixture-churn-cuda.jsonl"]
    if case == "same run":
        copy = tmp_path / "copy"
        copy.mkdir()
        for suffix in (".jsonl", ".manifest.json", ".done.json"):
            shutil.copy(FIXTURES / f"fixture-churn-cuda{suffix}", copy / f"again{suffix}")
        files = [cuda, copy / "again.jsonl"]
    out = tmp_path / "out"
    one_line_error(kit("import", "determinism-harness", *map(str, files), "--out", str(out)), needle)
    assert not out.exists()


@pytest.mark.parametrize("field, value, needle", [
    ("usage", {"load_duration_ns": "5s"}, "usage.load_duration_ns '5s'"),
    ("meta_cycle", True, "meta_cycle 'True'"),
    ("box", 7, "has box '7'"),
    ("logprob_margins", {"tokens": [[1, 2]]}, "logprob_margins that is not the harness's"),
    ("response_model", 7, "has response_model '7'; the harness writes a str or null"),
    ("latency_ms", -1, "has latency_ms '-1'; the harness writes a number >= 0"),
    ("schedule_index", True, "has schedule_index True; a harness record's schedule_index is a int"),
])
def test_a_field_the_analysis_reads_of_the_wrong_type_is_refused(tmp_path, field, value, needle):
    source = FIXTURES / "fixture-churn-cuda.jsonl"
    for suffix in (".manifest.json", ".done.json"):
        shutil.copy(FIXTURES / f"fixture-churn-cuda{suffix}", tmp_path)
    lines = source.read_text().splitlines()
    lines[2] = json.dumps({**json.loads(lines[2]), field: value})
    (tmp_path / source.name).write_text("\n".join(lines) + "\n")
    one_line_error(kit("import", "determinism-harness", str(tmp_path / source.name), "--out",
                       str(tmp_path / "out")), "fixture-churn-cuda.jsonl:3 has", needle)
    assert not (tmp_path / "out").exists()
