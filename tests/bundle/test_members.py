"""Every member of a bundle is vouched for by a check, or said not to be (issue #35, item 2;
kit.bundle.coverage): recomputed, pinned by a digest a checked file holds, or not checked with the reason.

A bundle of each protocol kind in the registry (kit.protocols.kinds.KINDS: a kind added without a bundle here
fails `test_a_bundle_is_made_here_for_every_kind`) is written by the kit from a real run folder: the runs on
fake containers of tests/protocols/test_engine_errors_docker.py (the runner, the procedures and the BFCL worker
are real; the ladder refuses containers, so its run ends failed with no records, as a stopped run does), a
harness import of the labelled fixtures, and a watch run recorded by the proxy's own recorder. Each bundle's
members are listed from the archive itself (tarfile), not from the kit's own listing.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path
from typing import Callable

import pytest

from kit.bundle import CHECKSUMS, coverage, imported
from kit.bundle.verify import verify_bundle
from kit.bundle.writer import write_bundle
from kit.protocols import kinds
from tests.bundle import mutations
from tests.bundle.harness_bundle import changed_call, harness_run, without_derivation
from tests.bundle.kit_cli import run_kit

def _on_docker(protocol: str, overrides: dict | None = None) -> Callable[[Path], Path]:
    def make(tmp: Path) -> Path:
        from tests.fake_engine.llamacpp import Failure  # noqa: PLC0415
        from tests.protocols.test_engine_errors_docker import run_on_docker  # noqa: PLC0415

        result, _ = run_on_docker(tmp, protocol, Failure("never"), overrides)
        return result.run_dir
    return make


def _watch(tmp: Path) -> Path:
    from tests.watch.test_watch_units import _watch_run  # noqa: PLC0415

    return _watch_run(tmp / "watch")[0].run_dir


def _docker_protocols() -> dict[str, Callable[[Path], Path]]:
    from tests.protocols import test_engine_errors_docker as docker  # noqa: PLC0415

    return {"reset": _on_docker("reset", docker.RESET), "grid": _on_docker(docker.GRID),
            "sweep": _on_docker(docker.SWEEP), "flag_order": _on_docker(docker.FLAG_ORDER),
            "pinning": _on_docker(docker.PINNING), "ladder": _on_docker("ladder-cpu")}


def _remedy(tmp: Path) -> Path:
    """A remedy run folder of real record files written by hand, its results written by the kind (a remedy on
    containers is refused before its folder exists: its arms' fixes need the kit's native launcher)."""
    from kit.protocols.kinds import KINDS  # noqa: PLC0415
    from tests.protocols.test_remedy_results import write_remedy_run  # noqa: PLC0415

    run_dir = write_remedy_run(tmp / "remedy-run")
    KINDS["remedy"].results(run_dir)
    return run_dir


def _builders() -> dict[str, Callable[[Path], Path]]:
    return {**_docker_protocols(), "harness": harness_run, "watch": _watch, "remedy": _remedy}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    """One bundle per kind, as `kit bundle --allow-unfinished` writes it (the ladder's run ends failed)."""
    out = {}
    for kind, make in _builders().items():
        tmp = tmp_path_factory.mktemp(kind)
        run_dir = make(tmp)
        assert json.loads((run_dir / "manifest.json").read_text())["protocol"]["kind"] == kind
        out[kind] = write_bundle([run_dir], tmp / f"{kind}.tar.gz", environ={}, allow_unfinished=True).path
    return out


def members(bundle: Path) -> set[str]:
    with tarfile.open(bundle, "r:gz") as tar:
        return {m.name.split("/", 1)[1] for m in tar.getmembers() if m.isfile()}


def test_a_bundle_is_made_here_for_every_kind():
    assert set(_builders()) == set(kinds.KINDS)


@pytest.mark.parametrize("kind", list(kinds.KINDS))
def test_every_member_of_a_bundle_of_each_kind_is_in_exactly_one_class(bundles, kind):
    verdict = verify_bundle(bundles[kind])
    assert verdict.ok, verdict.lines()
    held = members(bundles[kind])
    assert set(verdict.coverage) == held  # every member classified, and nothing that is not a member
    classes = {name: cover.how for name, cover in verdict.coverage.items()}
    unexplained = {name: cover for name, cover in verdict.coverage.items()
                   if cover.how not in coverage.STRENGTH or not cover.by or cover.by == coverage.UNKNOWN}
    assert not unexplained, unexplained  # the kit writes no member that nothing covers or explains
    results = {name for name in held if "/results/" in name}
    assert results and {classes[n] for n in results} == {coverage.RECOMPUTED}, verdict.coverage
    assert all(classes[n] == coverage.PINNED for n in held if "/protocol/" in n)
    assert classes[CHECKSUMS] == coverage.NOT_CHECKED
    head, tail = verdict.recomputed()
    counts = coverage.counts(verdict.coverage)
    assert f"of all {len(held)} files: {counts[coverage.RECOMPUTED]} recomputed" in tail[-1]
    assert verdict.files_checked == len(held) - 1  # every file but the checksum list, which holds the others


def test_an_imported_runs_kept_files_are_pinned_and_its_records_made_again(bundles):
    covers = verify_bundle(bundles["harness"]).coverage
    kept = {name: c for name, c in covers.items() if "/records/imported/" in name}
    assert len(kept) == 7 and {c.how for c in kept.values()} == {coverage.PINNED}
    calls = next(c for name, c in kept.items() if name.endswith("fixture-churn-cuda.jsonl"))
    assert "imported.runs[0].calls_sha256" in calls.by
    records = next(c for name, c in covers.items() if name.endswith("/records/calls.jsonl"))
    assert records.how == coverage.RECOMPUTED and "fixture-churn-metal.jsonl" in records.by


def _fails(bundle: bytes, tmp_path: Path, needle: str) -> list[str]:
    path = tmp_path / "tampered.tar.gz"
    path.write_bytes(bundle)
    verdict = verify_bundle(path)
    lines = verdict.lines()
    assert not verdict.ok and any(needle in line for line in lines[:-1]), lines
    return lines


def test_imported_calls_changed_with_their_digests_fail_as_the_records_no_longer_follow(bundles, tmp_path):
    lines = _fails(changed_call(bundles["harness"].read_bytes(), pin=True), tmp_path, "records/calls.jsonl")
    assert any(line.startswith("MISMATCH") and "text" in line for line in lines), lines


def test_imported_calls_changed_alone_fail_against_their_digest(bundles, tmp_path):
    _fails(changed_call(bundles["harness"].read_bytes(), pin=False), tmp_path,
           "differs from its sha256 imported.runs[0].calls_sha256")


def test_an_import_said_to_be_an_earlier_kits_still_has_its_records_made_again(bundles, tmp_path):
    """Dropping `imported.derivation` (as if an earlier kit had imported it) does not stop the check: the
    fields every release's import wrote are compared."""
    tampered = without_derivation(changed_call(bundles["harness"].read_bytes(), pin=True))
    lines = _fails(tampered, tmp_path, "records/calls.jsonl")
    assert any("text" in line and line.startswith("MISMATCH") for line in lines), lines
    assert "text" in imported.EVERY_KIT


@pytest.mark.parametrize("file", ["fixture-churn-cuda.done.json", "fixture-churn-metal.manifest.json",
                                  "fixture-churn-study.report.json"])
def test_a_kept_side_file_changed_fails_against_its_digest(bundles, tmp_path, file):
    tampered = mutations.edit(bundles["harness"].read_bytes(), f"records/imported/{file}", reseal=True,
                              replace_text=['"', '"x'])
    _fails(tampered, tmp_path, f"differs from its sha256 imported.sha256[{file!r}]")


def test_a_kept_file_removed_is_named(bundles, tmp_path):
    decoded = mutations.decode(bundles["harness"].read_bytes())
    del decoded.members[decoded.index("records/imported/fixture-churn-metal.jsonl")]
    mutations._reseal(decoded)
    _fails(decoded.pack(), tmp_path, "named by imported.runs[1].calls_sha256")


@pytest.mark.parametrize("added", ["{run}/notes.html", "{run}/records/imported/extra.jsonl", "{root}/extra.txt",
                                   "{run}/records/on1/inner.jsonl", "{run}/protocol/second.yaml"])
@pytest.mark.parametrize("kind", ["grid", "harness"])
def test_a_member_the_kit_does_not_write_is_listed_as_not_checked(bundles, tmp_path, added, kind):
    tampered = mutations.add_file(bundles[kind].read_bytes(), added, "<script>alert(1)</script>", reseal=True)
    path = tmp_path / "added.tar.gz"
    path.write_bytes(tampered)
    verdict = verify_bundle(path)
    name = mutations.decode(tampered).name(added).split("/", 1)[1]
    assert verdict.coverage[name] == coverage.Cover(coverage.NOT_CHECKED, coverage.UNKNOWN)
    assert any(line.startswith("note: NOT CHECKED: ") and name in line for line in verdict.lines()), verdict.lines()


def test_a_stopped_runs_bundle_verifies_and_says_it_holds_no_results(tmp_path):
    from tests.stopped_run import stopped_run  # noqa: PLC0415

    bundle = write_bundle([stopped_run(tmp_path)], tmp_path / "stopped.tar.gz", environ={},
                          allow_unfinished=True).path
    verdict = verify_bundle(bundle)
    assert verdict.ok, verdict.lines()
    assert any("results/ is not in the bundle" in n and "'interrupted'" in n for n in verdict.notes), verdict.notes
    assert set(verdict.coverage) == members(bundle)


def test_kit_bundle_and_kit_verify_count_the_same_files(tmp_path):
    from tests.bundle.conftest import synthetic_grid_run  # noqa: PLC0415

    run = synthetic_grid_run(tmp_path / "runs" / "grid-toy")
    made = run_kit("bundle", str(run), "-o", str(tmp_path / "b.tar.gz"), scratch=tmp_path / "s1")
    checked = run_kit("verify", str(tmp_path / "b.tar.gz"), scratch=tmp_path / "s2")
    total = len(members(tmp_path / "b.tar.gz"))
    assert f"({total} files: {total - 1} and their checksum list {CHECKSUMS})" in made.out, made.text
    last = checked.out.splitlines()[-1]
    assert last.startswith(f"OK: {total - 1} files match their checksums") and f"of all {total} files" in last, last


@pytest.mark.parametrize("name, why", [
    ("runs/r/manifest.json", coverage.RAW), ("runs/r/records/s1.jsonl", coverage.RAW),
    ("runs/r/records/on1.episodes.jsonl", coverage.RAW), ("runs/r/records/superseded/s1.jsonl", coverage.SUPERSEDED),
    ("runs/r/logs/server-s1.log", coverage.LOGS), ("runs/r/figures/ladder.png", coverage.FIGURES),
    ("runs/r/replay/comparison.json", coverage.REPLAY), ("runs/r/records/imported/x.jsonl", coverage.UNKNOWN),
    ("runs/r/notes.html", coverage.UNKNOWN), ("runs/r/records/a/b.jsonl", coverage.UNKNOWN),
    ("index.html", coverage.UNKNOWN), ("runs/manifest.json", coverage.UNKNOWN)])
def test_a_member_no_check_marked_is_classed_by_where_the_kit_writes_it(name, why):
    """What the kit writes into a run folder that nothing recomputes (a ladder's figure, a replay's comparison)
    is said to be not checked and why; anything else is a file the kit does not write."""
    assert coverage.classify([name], {}) == {name: coverage.Cover(coverage.NOT_CHECKED, why)}


@pytest.mark.parametrize("protocol, failure", [("reset", ("s1", 3, "exit")), ("grid", ("grid", 1, "http")),
                                               ("pinning", ("c1", 1, "exit"))])
def test_the_bundle_of_a_run_that_failed_midway_verifies(tmp_path, protocol, failure):
    """A run the engine failed in the middle of (its container died, or it answered HTTP 500): the runner
    ends it failed with its results of what it recorded, and `kit bundle --allow-unfinished` of it verifies."""
    from tests.fake_engine.llamacpp import Failure  # noqa: PLC0415
    from tests.protocols import test_engine_errors_docker as docker  # noqa: PLC0415

    text, overrides = {"reset": ("reset", docker.RESET), "grid": (docker.GRID, None),
                       "pinning": (docker.PINNING, None)}[protocol]
    result, _ = docker.run_on_docker(tmp_path, text, Failure(*failure), overrides)
    assert result.status == "failed", result.reason
    bundle = write_bundle([result.run_dir], tmp_path / "failed.tar.gz", environ={}, allow_unfinished=True).path
    verdict = verify_bundle(bundle)
    assert verdict.ok, verdict.lines()
    assert verdict.results_compared and set(verdict.coverage) == members(bundle)
    assert coverage.UNKNOWN not in {c.by for c in verdict.coverage.values()}
