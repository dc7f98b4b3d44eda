"""Every path a manifest names is a name inside its run folder, checked in one place (kit.record.manifest.inside,
applied by Manifest.load): no absolute path, no `..`, no link leading out. Old run folders still read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kit.run.resume import resume
from kit.core.errors import ConfigError, KitError
from kit.record.manifest import Manifest, inside
from tests.bundle.kit_cli import run_here as kit
from tests.test_cli_errors import one_line_error

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "records_v1"
DEMO = FIXTURES / "demo-20261201-070851"


def _copy(tmp_path: Path, **pass_changes) -> Path:
    run_dir = shutil.copytree(DEMO, tmp_path / "run")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    manifest["status"], manifest["passes"]["s2"]["status"] = "interrupted", "interrupted"
    manifest["passes"]["s1"].update(pass_changes)
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return run_dir


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("folder", sorted(p.parent for p in FIXTURES.glob("*/manifest.json")), ids=lambda p: p.name)
def test_old_run_folders_still_load(folder):
    passes = Manifest.load(folder).run.passes
    assert passes and all(str(info.file).startswith("records/") for info in passes.values())


@pytest.mark.parametrize("name, problem", [
    ("/etc/passwd", "is an absolute path"),
    ("../outside/keep.txt", "contains '..'"),
    ("records/../../outside/keep.txt", "contains '..'"),
    ("", "is empty"),
    (7, "is not a string"),
])
def test_a_pass_file_outside_the_folder_is_refused_by_load(tmp_path, name, problem):
    run_dir = _copy(tmp_path, file=name)
    with pytest.raises(ConfigError) as refused:
        Manifest.load(run_dir)
    assert f"passes.s1.file {name!r} {problem}" in refused.value.line()


def test_an_episodes_file_is_checked_too(tmp_path):
    run_dir = _copy(tmp_path, episodes_file="/etc/passwd")
    with pytest.raises(ConfigError, match="passes.s1.episodes_file '/etc/passwd' is an absolute path"):
        Manifest.load(run_dir)


def test_a_link_leading_out_is_refused_and_a_link_inside_is_not(tmp_path):
    outside = tmp_path / "outside.jsonl"
    outside.write_text("secret\n")
    run_dir = _copy(tmp_path)
    (run_dir / "records" / "s1.jsonl").unlink()
    (run_dir / "records" / "s1.jsonl").symlink_to(outside)
    with pytest.raises(ConfigError, match=r"'records/s1.jsonl' leads out of the run folder through a link"):
        Manifest.load(run_dir)
    (run_dir / "records" / "s1.jsonl").unlink()
    (run_dir / "records" / "s1.jsonl").symlink_to(run_dir / "records" / "s2.jsonl")
    assert inside(run_dir, "records/s1.jsonl", "file") == run_dir / "records" / "s1.jsonl"


def test_a_linked_records_folder_is_refused(tmp_path):
    run_dir = _copy(tmp_path)
    shutil.move(run_dir / "records", tmp_path / "elsewhere")
    (run_dir / "records").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="leads out of the run folder through a link"):
        Manifest.load(run_dir)


@pytest.mark.parametrize("command", ["resume", "bundle"])
def test_resume_and_bundle_refuse_a_pass_file_outside_in_one_line_and_change_nothing(tmp_path, command):
    victim = tmp_path / "home" / ".ssh" / "id_ed25519"
    victim.parent.mkdir(parents=True)
    victim.write_text("private key\n")
    run_dir = _copy(tmp_path, file=str(victim))
    before = _files(tmp_path)
    args = [command, str(run_dir)] + (["-o", str(tmp_path / "out" / "b.tar.gz")] if command == "bundle" else [])
    one_line_error(kit(*args), f"passes.s1.file '{victim}' is an absolute path")
    assert _files(tmp_path) == before and not (tmp_path / "out").exists()


def test_analyze_leaves_out_a_folder_naming_a_file_outside(tmp_path):
    run_dir = _copy(tmp_path, file="../../outside/keep.txt")
    done = kit("analyze", str(run_dir), "--out", str(tmp_path / "analysis"))
    text = " ".join(done.stdout.split()) + " ".join(done.stderr.split())
    assert "passes.s1.file '../../outside/keep.txt' contains '..'" in text
    assert done.returncode != 0 or "runs: 0 (none)" in done.stdout


def test_supersede_moves_only_files_inside_and_never_a_link(tmp_path):
    run_dir = _copy(tmp_path)
    outside = tmp_path / "outside.jsonl"
    outside.write_text("keep\n")
    (run_dir / "records" / "s2.jsonl").unlink()
    (run_dir / "records" / "s2.jsonl").symlink_to(run_dir / "records" / "s1.jsonl")  # a link that stays inside
    manifest = Manifest.load(run_dir)
    manifest.supersede("s1")
    (moved,) = (run_dir / "records" / "superseded").iterdir()
    assert moved.name.startswith("s1.jsonl.") and not (run_dir / "records" / "s1.jsonl").exists()
    manifest.supersede("s2")
    assert (run_dir / "records" / "s2.jsonl").is_symlink()  # a link is not moved (nor what it points to)
    assert outside.read_text() == "keep\n"


def test_resume_refuses_a_folder_holding_a_link(tmp_path):
    run_dir = _copy(tmp_path)
    shutil.rmtree(run_dir / "logs")
    (tmp_path / "elsewhere").mkdir()
    (run_dir / "logs").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(KitError, match="holds a link, logs -> .*elsewhere: a resume writes into the run folder"):
        resume(run_dir, say=lambda _: None)
    assert not list((tmp_path / "elsewhere").iterdir())


def test_names_that_cannot_be_followed_are_refused_not_raised(tmp_path):
    run_dir = _copy(tmp_path)
    (run_dir / "loop-a").symlink_to(run_dir / "loop-b")
    (run_dir / "loop-b").symlink_to(run_dir / "loop-a")
    for name, problem in (("loop-a/x.jsonl", "cannot be followed"), ("records/s1\x00.jsonl", "a control character"),
                          ("x" * 5000, "is over 1000 characters"),
                          ("a/" + "x" * 300, "not a file name this system can hold")):
        with pytest.raises(ConfigError, match=problem) as refused:
            inside(run_dir, name, "passes.s1.file")
        assert len(refused.value.line()) < 400


def test_resume_refuses_a_folder_holding_a_pipe_where_records_go(tmp_path):
    import os

    run_dir = _copy(tmp_path)
    (run_dir / "records" / "s2.jsonl").unlink()
    os.mkfifo(run_dir / "records" / "s2.jsonl")
    with pytest.raises(KitError, match="holds records/s2.jsonl, which is not a regular file or folder"):
        resume(run_dir, say=lambda _: None)
