"""A run folder that was copied or renamed, unchanged, bundles and verifies: a run's identity is the
run_id in its manifest, never the name of the folder it sits in."""

from __future__ import annotations

import json
import shutil

import pytest

from kit.bundle.verify import verify_bundle
from kit.bundle.writer import write_bundle
from kit.core.errors import ConfigError
from kit.record.manifest import Manifest
from kit.protocols.grid import protocol as grid
from tests.bundle.conftest import read_members, synthetic_grid_run
from tests.bundle.kit_cli import run_kit


@pytest.fixture
def run(tmp_path):
    return synthetic_grid_run(tmp_path / "runs" / "grid-toy")


def test_a_renamed_run_folder_bundles_and_verifies_through_the_cli(run, tmp_path):
    renamed = run.rename(run.with_name("copied from the cluster"))
    out = tmp_path / "renamed.tar.gz"
    made = run_kit("bundle", str(renamed), "-o", str(out), scratch=tmp_path / "s1")
    assert made.code == 0, made.text
    _, files = read_members(out)
    assert "runs/grid-toy/manifest.json" in files and not any("copied" in name for name in files)
    assert json.loads(files["bundle.json"])["runs"][0]["run_id"] == "grid-toy"
    checked = run_kit("verify", str(out), scratch=tmp_path / "s2")
    assert checked.code == 0 and checked.out.splitlines()[-1].startswith("OK: "), checked.text
    shown = run_kit("show", str(out), scratch=tmp_path / "s3")
    assert shown.code == 0 and "run: grid-toy" in shown.out, shown.text


def test_a_copy_analysed_again_keeps_its_run_id(run, tmp_path):
    copy = shutil.copytree(run, tmp_path / "elsewhere" / "grid-toy-copy")
    shutil.rmtree(copy / "results")
    grid.KIND.results(copy)  # kit analyze on the copy
    assert json.loads((copy / "results" / "grid.json").read_text())["run_id"] == "grid-toy"
    assert Manifest.load(copy).run_id == "grid-toy"
    written = write_bundle([copy], tmp_path / "copy.tar.gz", environ={})
    verdict = verify_bundle(written.path)
    assert verdict.ok and len(verdict.results_compared) == 2, verdict.lines()


def test_a_run_and_its_copy_are_one_run(run, tmp_path):
    copy = shutil.copytree(run, tmp_path / "copy")
    with pytest.raises(ConfigError, match="run grid-toy is given twice"):
        write_bundle([run, copy], tmp_path / "both.tar.gz", environ={})


def test_a_run_id_that_cannot_name_a_folder_is_refused_when_bundling(run, tmp_path):
    manifest = Manifest.load(run)
    manifest.update(run_id="../../outside")
    with pytest.raises(ConfigError, match=r"run_id in .* cannot name a folder in a bundle"):
        write_bundle([run], tmp_path / "bad.tar.gz", environ={})
    assert not (tmp_path / "bad.tar.gz").exists()
