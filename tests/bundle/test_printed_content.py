"""What `kit show` and `kit verify` print of a bundle: verified first (or labelled UNVERIFIED), and
never a terminal control character from the bundle."""

from __future__ import annotations

import pytest

from kit.bundle.writer import write_bundle
from kit.record.manifest import Manifest
from tests.bundle import mutations
from tests.bundle.conftest import synthetic_grid_run
from tests.bundle.kit_cli import run_kit

HOSTILE_TEXT = "\x1b]0;owned\x07\x1b[2J\x1b[1;31mtoy\x9b2K\x1bP+q\x1b\\\rmodel\x08\x00\x85"


def _controls(text: str) -> list[str]:
    return [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F]


@pytest.fixture
def hostile_bundle(tmp_path):
    """A real, valid bundle whose manifest carries escape sequences (e.g. from a hostile model name)."""
    run = synthetic_grid_run(tmp_path / "runs" / "grid-toy", model_name=HOSTILE_TEXT)
    manifest = Manifest.load(run)
    manifest.update(reason=f"line one\nFAIL fake.json: injected{HOSTILE_TEXT}")
    return write_bundle([run], tmp_path / "hostile.tar.gz", environ={}).path


def test_show_verifies_and_strips_control_characters(hostile_bundle, tmp_path):
    shown = run_kit("show", str(hostile_bundle), scratch=tmp_path / "s")
    assert shown.code == 0, shown.text
    lines = shown.out.splitlines()
    assert lines[0].startswith("verified: OK: ")
    assert _controls(shown.out) == [] and "model: toymodel" in lines
    assert "reason: line one FAIL fake.json: injectedtoymodel" in lines  # folded onto its own line
    assert not any(line.startswith("FAIL") for line in lines)


def test_show_without_verifying_says_so_first_and_last(hostile_bundle, tmp_path):
    shown = run_kit("show", "--no-verify", str(hostile_bundle), scratch=tmp_path / "s")
    assert shown.code == 0, shown.text
    lines = shown.out.splitlines()
    assert lines[0].startswith("UNVERIFIED") and lines[-1].startswith("UNVERIFIED")
    assert _controls(shown.out) == [] and "model: toymodel" in lines


def test_show_of_a_bundle_that_does_not_verify_shows_nothing_unless_asked(synthetic_bundle, tmp_path):
    forged = tmp_path / "forged.tar.gz"
    forged.write_bytes(mutations.apply(synthetic_bundle, {"op": "edit", "args": {
        "file": "{run}/results/grid.json", "set_json": {"comparisons.path.diverged": 2}, "reseal": True}}))
    refused = run_kit("show", str(forged), scratch=tmp_path / "s1")
    assert refused.code == 1 and refused.out == ""
    assert "does not verify (FAILED: 0 problems, 1 mismatches)" in refused.one_line_reason()
    assert "kit show --no-verify" in refused.err
    looked = run_kit("show", "--no-verify", str(forged), scratch=tmp_path / "s2")
    assert looked.code == 0 and looked.out.startswith("UNVERIFIED")
    assert "path divergence (cache on vs cache off): 2/3 episodes" in looked.out  # the forged count, as shown


def test_verify_lines_quoting_bundle_content_hold_no_control_characters(synthetic_bundle, tmp_path):
    forged = tmp_path / "forged.tar.gz"
    forged.write_bytes(mutations.apply(synthetic_bundle, {"op": "edit", "args": {
        "file": "{run}/results/grid.json", "set_json": {"table": f"grid{HOSTILE_TEXT}\nOK: all fine"},
        "reseal": True}}))
    checked = run_kit("verify", str(forged), scratch=tmp_path / "s")
    assert checked.code == 1
    assert _controls(checked.out) == []
    mismatch = [line for line in checked.out.splitlines() if line.startswith("MISMATCH")]
    assert len(mismatch) == 1 and "table: bundled" in mismatch[0]
    assert not any(line.startswith("OK: ") for line in checked.out.splitlines())


def test_a_refusal_quoting_a_hostile_name_is_one_clean_line(synthetic_bundle, tmp_path):
    tricked = tmp_path / "tricked.tar.gz"
    tricked.write_bytes(mutations.apply(synthetic_bundle, {"op": "rename", "args": {
        "member": "/README.md", "to": "{root}/\x1b[2J\x9b1m\nkit: OK.md"}}))
    checked = run_kit("verify", str(tricked), scratch=tmp_path / "s")
    assert checked.code == 1 and "has control characters in its name" in checked.one_line_reason()
    assert _controls(checked.err.rstrip("\n")) == []


def test_index_values_are_cleaned_in_show(synthetic_bundle, tmp_path):
    forged = tmp_path / "index.tar.gz"
    forged.write_bytes(mutations.apply(synthetic_bundle, {"op": "edit", "args": {
        "file": "/bundle.json", "set_json": {"created": "\x1b[8m2026"}, "reseal": True}}))
    shown = run_kit("show", "--no-verify", str(forged), scratch=tmp_path / "s")
    assert shown.code == 0 and _controls(shown.out) == [] and "bundle written 2026 by kit" in shown.out
