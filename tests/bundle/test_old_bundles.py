"""A bundle an earlier release of the kit wrote stays verifiable (tests/fixtures/bundles/README.md): a
reviewer handed last month's bundle can check it, and `kit show` shows it."""

from __future__ import annotations

from pathlib import Path

from kit.bundle.verify import verify_bundle
from tests.bundle.kit_cli import run_kit

OLD = Path(__file__).resolve().parents[1] / "fixtures" / "bundles" / "demo-20261201-191112.tar.gz"
# that commit's `kit verify` said "OK: 12 files match their checksums; 2 results files recomputed from the raw
# records, 64 values equal" (this kit words its summary differently; the counts are the same)
OLD_COUNTS = (12, 2, 64)


def test_the_bundle_of_commit_6d600ca_verifies_as_it_did_then(tmp_path):
    assert OLD.read_bytes()[3] == 0x08  # the gzip header names the file (FNAME), as tarfile wrote it
    verdict = verify_bundle(OLD)
    assert verdict.ok, verdict.lines()
    assert (verdict.files_checked, len(verdict.results_compared), verdict.values_compared) == OLD_COUNTS
    outcome = run_kit("verify", str(OLD), scratch=tmp_path / "verify")
    last = outcome.out.splitlines()[-1]
    assert outcome.code == 0 and last.startswith("OK: 12 files match their checksums") and " 64 values" in last, \
        outcome.text
    assert outcome.left_behind == []


def test_kit_show_shows_it(tmp_path):
    outcome = run_kit("show", str(OLD), scratch=tmp_path)
    assert outcome.code == 0 and "demo-20261201-191112" in outcome.out and "UNVERIFIED" not in outcome.out, outcome.text
