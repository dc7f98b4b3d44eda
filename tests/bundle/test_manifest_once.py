"""`kit verify` and `kit show` read each bundled run's manifest once (kit.record.manifest.read, the one
reader), and every check, the recomputation, the README and report rendered again and the printed summary
read that model: a bundle's manifest is not parsed again by each reader of it."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from kit.bundle.show import describe
from kit.bundle.verify import verify_bundle
from kit.record import manifest as manifest_module

BUNDLES = Path(__file__).resolve().parents[1] / "fixtures" / "bundles"
OLD = [BUNDLES / "demo-20261201-191112.tar.gz", BUNDLES / "analysed-eb721ab.tar.gz"]


@pytest.fixture
def bundle_reads(monkeypatch) -> Counter:
    """Each read of a bundled manifest (its origin a bundle member, runs/<run>/manifest.json), by origin; the
    kinds' own reads of the raw copy's manifest on disk name an absolute path and are not counted."""
    reads: Counter = Counter()
    parsed = manifest_module.parsed

    def counted(data, origin):
        if origin.startswith("runs/"):
            reads[origin] += 1
        return parsed(data, origin)

    monkeypatch.setattr(manifest_module, "parsed", counted)
    return reads


@pytest.mark.parametrize("bundle", OLD, ids=[p.name for p in OLD])
def test_verify_reads_each_manifest_once(bundle, bundle_reads):
    verdict = verify_bundle(bundle)
    assert verdict.ok, verdict.lines()
    assert sorted(bundle_reads) == sorted(f"runs/{run_id}/manifest.json" for run_id in verdict.runs)
    assert set(bundle_reads.values()) == {1}, bundle_reads


def test_show_with_its_report_reads_each_manifest_once(bundle_reads, tmp_path):
    lines = describe(OLD[0], report_to=tmp_path / "report.html")
    assert lines[0].startswith("verified: OK") and (tmp_path / "report.html").is_file()
    assert bundle_reads == Counter({"runs/demo-20261201-191112/manifest.json": 1})


def test_show_without_verifying_reads_it_once_too(bundle_reads):
    describe(OLD[0], verify=False)
    assert bundle_reads == Counter({"runs/demo-20261201-191112/manifest.json": 1})
