"""What `kit atlas` reads from a bundle is what `kit verify` recomputed: each run's results and (where its
analysis/ held them) its findings are computed once, by verify, and handed on (kit.replay.run.verified_runs)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kit.atlas import render, sources, table
from kit.bundle import recompute, safe_tar
from kit.core.errors import ConfigError
from kit.record.files import read_records
from kit.replay import comparison
from kit.replay.run import recorded_runs, verified_runs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
ANALYSED = FIXTURES / "bundles" / "analysed-eb721ab.tar.gz"  # a demo and a grid run, each with its analysis/
ZEN4_DEMO = FIXTURES / "bundles" / "demo-20261201-191112.tar.gz"  # no analysis/


def _counting(monkeypatch) -> dict[str, int]:
    calls = {"results": 0, "findings": 0}
    results, findings = recompute.recompute, sources.analysis.compute

    def counted_results(copy, manifest):
        calls["results"] += 1
        return results(copy, manifest)

    def counted_findings(*args, **kwargs):
        calls["findings"] += 1
        return findings(*args, **kwargs)

    monkeypatch.setattr(recompute, "recompute", counted_results)
    monkeypatch.setattr(sources.analysis, "compute", counted_findings)
    return calls


def test_verified_runs_hand_on_what_verify_recomputed():
    with verified_runs(ANALYSED) as runs:
        assert [folder.name for folder, _ in runs] == ["demo-20261201-070851", "grid-tiny-20261201-070919"]
        for folder, kept in runs:
            assert kept is not None and kept.copy.is_dir() and kept.copy.name == folder.name
            assert sorted(kept.results) == sorted(p.relative_to(folder).as_posix()
                                                  for p in (folder / "results").iterdir())
            assert kept.findings is not None and kept.findings.to_json()["runs"][0]["run"].startswith(folder.name)
            assert kept.settings.block_bootstrap_replicates == 10_000  # what its findings.json records
    with recorded_runs(ANALYSED) as folders:
        assert [folder.name for folder in folders] == ["demo-20261201-070851", "grid-tiny-20261201-070919"]


def test_a_bundle_is_recomputed_once_and_its_verified_findings_are_read(monkeypatch):
    calls = _counting(monkeypatch)
    with sources.verified([ANALYSED]) as runs:
        assert [run.run_id for run in runs] == ["demo-20261201-070851", "grid-tiny-20261201-070919"]
        assert all(run.findings is not None and run.results for run in runs)
    assert calls == {"results": 2, "findings": 2}  # verify's alone: each run's results, each run's analysis/


def test_findings_are_computed_here_only_where_verify_did_not(monkeypatch):
    calls = _counting(monkeypatch)
    with sources.verified([ZEN4_DEMO]) as runs:  # no analysis/: verify recomputed its results only
        assert len(runs) == 1 and runs[0].findings is not None
    assert calls == {"results": 1, "findings": 1}


def _demo_folder(tmp: Path, replicates: int | None) -> Path:
    """The analysed bundle's demo run folder; its findings.json recording `replicates` block-bootstrap
    replicates (None: the folder without its analysis/)."""
    run_dir = safe_tar.extract(ANALYSED, tmp / "unpacked") / "runs" / "demo-20261201-070851"
    findings = run_dir / "analysis" / "findings.json"
    if replicates is None:
        shutil.rmtree(findings.parent)
    else:
        held = json.loads(findings.read_text())
        held["settings"]["block_bootstrap_replicates"] = replicates
        findings.write_text(json.dumps(held))
    return run_dir


def test_a_run_folders_findings_use_the_settings_its_own_findings_record(tmp_path):
    with sources.verified([_demo_folder(tmp_path, 500)]) as runs:
        assert runs[0].findings.to_json()["settings"]["block_bootstrap_replicates"] == 500
        assert runs[0].notes == []


def test_without_its_own_findings_a_run_folder_gets_the_papers_settings_and_a_note(tmp_path):
    with sources.verified([_demo_folder(tmp_path, None)]) as runs:
        settings = runs[0].findings.to_json()["settings"]
    assert (settings["block_bootstrap_replicates"], settings["sweep_replicates"]) == (10_000, 2_000)
    assert runs[0].notes == ["its findings were computed here with the paper's settings (seed 20261007, 10,000 "
                             "block-bootstrap, 2,000 sweep and 2,000 cluster replicates): it holds no "
                             "analysis/findings.json"]


def test_findings_that_give_no_settings_fall_back_to_the_papers_with_the_reason(tmp_path):
    run_dir = _demo_folder(tmp_path, 0)  # not a whole number from 1
    with sources.verified([run_dir]) as runs:
        assert runs[0].findings.to_json()["settings"]["block_bootstrap_replicates"] == 10_000
    assert "settings.block_bootstrap_replicates is 0, not a whole number from 1" in runs[0].notes[0]


def test_inputs_go_through_replays_verified_runs_and_are_labelled_by_where_they_came_from(tmp_path):
    run_dir = _demo_folder(tmp_path, 500)
    with sources.verified([run_dir, ZEN4_DEMO]) as runs:
        assert [run.source for run in runs] == [str(run_dir), f"{ZEN4_DEMO}:demo-20261201-191112"]
    with pytest.raises(ConfigError, match=f"{tmp_path} has no manifest.json"), sources.verified([tmp_path]):
        pass


def _text_changed(tmp: Path) -> Path:
    """The Zen 4 demo's run folder on another CPU (its own row) with its first answer's text changed, its
    tokens not."""
    run_dir = next((safe_tar.extract(ZEN4_DEMO, tmp / "text") / "runs").iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["provenance"]["host"]["cpu"] = "Another CPU"
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    records = run_dir / "records" / "s1.jsonl"
    lines = records.read_text().splitlines()
    first = json.loads(lines[0])
    first["completion"]["text"] += "!"
    lines[0] = json.dumps(first)
    records.write_text("\n".join(lines) + "\n")
    return run_dir


def test_identity_is_replays_same_prompt_tokens_and_text(tmp_path):
    changed = _text_changed(tmp_path)
    with sources.verified([ZEN4_DEMO, changed]) as runs:
        built = table.build(runs)
    cell = built.cell(built.rows[0], next(c for c in built.columns if c.key == "identity"))
    assert cell.text == "#2: 15/16 identical"  # the same tokens, another text: not identical, as for kit replay
    records = read_records(changed / "records" / "s1.jsonl", logprobs=False).records
    original = read_records(next((safe_tar.extract(ZEN4_DEMO, tmp_path / "original") / "runs").iterdir())
                            / "records" / "s1.jsonl", logprobs=False).records
    assert comparison.differs_at(original[0], records[0]) is not None
    assert comparison.answer(original[0])[0] == comparison.answer(records[0])[0]


def test_a_row_is_one_engine_as_kit_replay_tells_engines_apart(tmp_path):
    run_dir = next((safe_tar.extract(ZEN4_DEMO, tmp_path / "binary") / "runs").iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["engine"]["server_bin_sha256"] = "ab" * 32  # the same path, another binary
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    with sources.verified([ZEN4_DEMO, run_dir]) as runs:
        built = table.build(runs)
        differences = comparison.environment(runs[0].manifest, runs[1].manifest)
    assert len(built.rows) == 2 and [table.key_cells(r)["server binary or image"] for r in built.rows] == [
        "/tmp/oldfx-bin/llama-server (sha256 not recorded)", "/tmp/oldfx-bin/llama-server (sha256 abababababab…)"]
    assert [d.split(":")[0] for d in differences] == ["server binary"]


def test_two_models_of_one_weight_format_are_two_rows(tmp_path):
    run_dir = next((safe_tar.extract(ZEN4_DEMO, tmp_path / "model") / "runs").iterdir())
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["engine"]["model_sha256"] = "cd" * 32
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    with sources.verified([ZEN4_DEMO, run_dir]) as runs:
        built = table.build(runs)
    keys = [table.key_cells(row) for row in built.rows]
    assert len(built.rows) == 2 and keys[0]["weight format"] == keys[1]["weight format"] == "Q4_1"
    assert keys[1]["model"].endswith("(sha256 cdcdcdcdcdcd…)") and keys[0]["model"] != keys[1]["model"]


def test_cells_of_one_row_merged_keep_what_cannot_be_compared():
    into = {"a": table.Cell(why="VOID: no pairs"), "b": table.Cell("holds 2/2 identical"), "c": table.Cell(why="x")}
    table._merge(into, {"a": table.Cell(why="not measured here: no GPU"), "b": table.Cell(why="VOID: y"),
                        "c": table.Cell(why="x")})
    assert into["a"] == table.Cell(why="VOID: no pairs | not measured here: no GPU")
    assert into["b"] == table.Cell("holds 2/2 identical | cannot be compared: VOID: y")
    assert into["c"] == table.Cell(why="x")  # one reason, said once


def test_a_tables_further_rows_get_numbered_columns_said_in_the_legend():
    xeon_demo = FIXTURES / "records_v1" / "bundles" / "demo-20261201-070851.tar.gz"
    with verified_runs(ZEN4_DEMO) as [(_, zen4)], verified_runs(xeon_demo) as [(_, xeon)]:
        assert zen4 is not None and xeon is not None
        with sources.verified([ZEN4_DEMO]) as runs:
            run = runs[0]
        settings = sources.analysis.Settings(block_bootstrap_replicates=200, sweep_replicates=20,
                                             cluster_replicates=20, workers=1)
        run.findings = sources.analysis.compute([zen4.copy, xeon.copy], settings)  # Table IV: a row per run
    built = table.build([run])
    keys = [c.key for c in built.columns if c.group == "Table IV"]
    assert "IV:paths_differ" in keys and "IV:paths_differ·2" in keys
    second = next(c for c in built.columns if c.key == "IV:paths_differ·2")
    assert second.label == "paths_differ·2" and "(row 2 of the run's Table IV)" in second.what
    assert built.cell(built.rows[0], second).text.startswith("s1 ")
    assert any(line.startswith("Table IV paths_differ·2: ") for line in render.legend(built))


def test_verifys_notes_on_a_run_reach_the_legend():
    with verified_runs(ANALYSED) as runs:
        said = {folder.name: kept.notes for folder, kept in runs}
    assert all(said.values()) and all(note.startswith(f"runs/{run_id}/") for run_id, notes in said.items()
                                      for note in notes)
    with sources.verified([ANALYSED]) as atlas_runs:
        built = table.build(atlas_runs)
    demo = "demo-20261201-070851"
    assert [f"{ANALYSED}:{demo}: {note}" for note in said[demo]] == \
        [line for line in render.legend(built) if line.startswith(f"{ANALYSED}:{demo}: ")]
