"""Run folders written with `kit.record/1` before the typed record (tests/fixtures/records_v1: a demo, a
tiny grid with sentinels, a tiny pinning run, with their bundles and `kit analyze` findings from the old
kit) read as schema 2, analyse to the same numbers, recompute the same results files, and bundle and
verify with the same counts as before."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kit.analysis import findings
from kit.bundle.verify import verify_bundle
from kit.bundle.writer import write_bundle
from kit.record.manifest import Manifest
from kit.protocols import kinds
from kit.protocols.kinds import validate_record
from kit.record.model import SCHEMA
from kit.record.files import read_records

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "records_v1"
RUNS = ["demo-20261201-070851", "grid-tiny-20261201-070919", "pinning-tiny-20261201-071511"]
# what `kit verify` said of the bundles the old kit wrote: (files checked, results files, values equal)
OLD_VERDICTS = {"demo-20261201-070851": (12, 2, 66), "grid-tiny-20261201-070919": (19, 2, 128),
                "pinning-tiny-20261201-071511": (16, 2, 378)}
SETTINGS = findings.Settings(block_bootstrap_replicates=1000, sweep_replicates=100, cluster_replicates=100, workers=1)
VOLATILE = ("created", "files", "timings_seconds")
ADDED_SINCE = {"settings": ("harness_thresholds",), "runs": ("engine", "prompt_cache"),  # not in the old findings
               "table IV": ("cache_caused",), "table V": ("compared_on",)}


def copy_of(run: str, tmp_path: Path) -> Path:
    return shutil.copytree(FIXTURE / run, tmp_path / run)


def numbers(found: dict) -> str:
    """The findings without when they were computed, what they wrote, the keys added since (ADDED_SINCE)
    and how a skipped input's reason is worded (the list of kinds with an analysis is phrased by kind since),
    as canonical text (NaN compares equal)."""
    kept = {k: v for k, v in found.items() if k not in VOLATILE}
    kept["settings"] = {k: v for k, v in kept.get("settings", {}).items() if k not in ADDED_SINCE["settings"]}
    kept["runs"] = [{k: v for k, v in r.items() if k not in ADDED_SINCE["runs"]} for r in kept.get("runs", [])]
    for name in ("IV", "V"):
        table = kept.get("tables", {}).get(name, {})
        table["rows"] = [{k: v for k, v in r.items() if k not in ADDED_SINCE[f"table {name}"]}
                         for r in table.get("rows", [])]
    kept["skipped_inputs"] = [{**s, "reason": s["reason"].split(":")[0]} for s in kept.get("skipped_inputs", [])]
    return json.dumps(kept, sort_keys=True, default=str)


@pytest.mark.parametrize("run", RUNS)
def test_records_read_as_schema_2_and_fit_the_model(run):
    manifest = Manifest.load(FIXTURE / run).run
    for info in manifest.passes.values():
        for record in read_records(FIXTURE / run / str(info.file)).records:
            assert record["schema"] == SCHEMA and record["legacy"]["schema"] == "kit.record/1"
            assert record["output_sha256"] and record["unit"]
            validate_record(record)
            if record["protocol"] == "grid":  # stamped after the answer was decoded: not a send time
                assert record["started"] is None and record["wall_seconds"] is None
                assert record["legacy"]["started"].startswith("2026-12-01T")
            else:
                assert record["started"].startswith("2026-12-01T") and record["wall_seconds"] > 0
        if "episodes_file" in info:
            episodes = read_records(FIXTURE / run / info["episodes_file"]).records
            assert episodes and all(e["schema"] == "kit.episode/1" for e in episodes)


@pytest.mark.parametrize("run", RUNS)
def test_analysis_gives_the_numbers_the_old_kit_gave(run, tmp_path, monkeypatch):
    expected = json.loads((FIXTURE / "findings" / f"{run}.json").read_text())
    copy_of(run, tmp_path)
    monkeypatch.chdir(tmp_path)  # the old kit analysed it by its relative name, which the findings hold
    assert numbers(findings.compute([Path(run)], SETTINGS).to_json()) == numbers(expected)


DEMO_CACHE = ("per request: cache_prompt false in cold, cold2; cache_prompt true in warm, warm2 "
              "(server-level prompt cache disabled)")  # what the demo did (issue #22.7), not only "disabled"


@pytest.mark.parametrize("run, engine, prompt_cache", [("demo-20261201-070851", "llama.cpp", DEMO_CACHE),
                                                       ("grid-tiny-20261201-070919", "llama.cpp", "default")])
def test_each_run_read_names_its_engine_and_prompt_cache(run, engine, prompt_cache):
    (entry,) = findings.compute([FIXTURE / run], SETTINGS).runs
    assert (entry.engine, entry.prompt_cache) == (engine, prompt_cache)


@pytest.mark.parametrize("run", RUNS)
def test_results_files_recompute_identically(run, tmp_path):
    run_dir = copy_of(run, tmp_path)
    manifest = Manifest.load(run_dir).run
    protocol = kinds.parse_text(str(manifest.protocol.content), run, manifest.protocol.overrides)
    kinds.of(protocol).results(run_dir)
    for path in sorted((FIXTURE / run / "results").iterdir()):
        assert (run_dir / "results" / path.name).read_bytes() == path.read_bytes(), path.name


@pytest.mark.parametrize("run", RUNS)
def test_the_old_kits_bundle_verifies_as_before_and_its_folder_rebundled_too(run, tmp_path):
    """The old kit's bundles predate the strict bundle layout (written through tarfile, their gzip header
    names the file: FNAME); a reviewer handed one still verifies it, with the old verdict's counts, and
    the run folder they hold, bundled by this kit, verifies with the same counts."""
    old = FIXTURE / "bundles" / f"{run}.tar.gz"
    assert old.read_bytes()[3] & 0x08  # FNAME set, as the old kit wrote it
    fresh = write_bundle([copy_of(run, tmp_path)], tmp_path / "v1.tar.gz", environ={}).path
    for bundle in (old, fresh):
        verdict = verify_bundle(bundle)
        assert verdict.ok, verdict.lines()
        assert (verdict.files_checked, len(verdict.results_compared), verdict.values_compared) == OLD_VERDICTS[run]


def test_schema_1_runs_bundle_and_verify_on_this_kit(tmp_path):
    runs = [copy_of(run, tmp_path) for run in RUNS]
    verdict = verify_bundle(write_bundle(runs, tmp_path / "v1.tar.gz", environ={}).path)
    assert verdict.ok, verdict.lines()
    assert verdict.values_compared == sum(values for _, _, values in OLD_VERDICTS.values())
