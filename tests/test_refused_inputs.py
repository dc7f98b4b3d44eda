"""Wrong inputs to `kit analyze` and `kit bundle` are refused in one line, with nothing written: a folder
that holds no run folder, runs without one OK pass, and (for a bundle) a run that did not finish, which
`--allow-unfinished` packs anyway, flagged in the bundle. Run folders are small real ones
(tests/analysis/records_builder.py); the CLI runs as a process, as a user runs it."""

from __future__ import annotations

import json
import tarfile

import pytest

from kit.bundle import INDEX
from tests.analysis.records_builder import position, write_grid_like
from tests.bundle.kit_cli import run_here as kit
from tests.test_cli_errors import one_line_error

EPISODES = ["e0", "e1", "e2"]


def grid_run(folder, status: str = "finished", reason: str | None = None, pass_status: str = "OK"):
    """A two-pass grid run whose manifest says `status` (and `reason`); both passes end `pass_status`."""
    steps = {u: [(f"{u}-p0", [position(1, 1.5, 2, 2)], 0)] for u in EPISODES}
    passes = {p: {"arm": arm, "order": EPISODES, "episodes": steps, "status": pass_status,
                  "reason": None if pass_status == "OK" else "gate failed"}
              for p, arm in (("on1", "on"), ("off1", "off"))}
    write_grid_like(folder, passes)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest.update(status=status, reason=reason)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def listing(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_analyze_of_a_folder_without_runs_is_refused_and_writes_nothing(tmp_path):
    empty = tmp_path / "not-a-run"
    (empty / "somewhere").mkdir(parents=True)
    (empty / "notes.txt").write_text("no manifest here\n")
    before = listing(tmp_path)
    one_line_error(kit("analyze", str(empty), "--no-figures"), "no run folder to analyse",
                   f"{empty}: no manifest.json here or one level below", "pass a run folder")
    assert listing(tmp_path) == before  # no analysis/ folder, no findings.json


def test_analyze_names_why_each_input_is_no_run(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "manifest.json").write_text(json.dumps({"schema": "kit.manifest/1", "run_id": "x",
                                                     "status": "finished", "protocol": {"kind": "nonesuch"}}))
    one_line_error(kit("analyze", str(tmp_path / "other"), "--out", str(tmp_path / "out")),
                   "no run folder to analyse", "nonesuch")
    assert not (tmp_path / "out").exists()


def test_analyze_of_runs_without_an_ok_pass_is_refused(tmp_path):
    run = grid_run(tmp_path / "grid-void", pass_status="VOID")
    one_line_error(kit("analyze", str(run), "--no-figures"), "nothing to analyse", "has an OK pass",
                   "2 pass(es) cut short, VOID or never run")
    assert not (run / "analysis").exists()


def test_analyze_flags_an_unfinished_run_in_one_line(tmp_path):
    run = grid_run(tmp_path / "grid-cut", status="interrupted", reason="stopped by the user (Ctrl-C)")
    result = kit("analyze", str(run), "--no-figures", "--block-replicates", "50", "--cluster-replicates", "20")
    assert result.returncode == 0, result.stderr
    flagged = [line for line in result.stdout.splitlines() if line.startswith("unfinished run ")]
    assert flagged == [f"unfinished run {run} (status 'interrupted': stopped by the user (Ctrl-C)): only its OK "
                       f"passes are analysed; `kit resume {run}` finishes it"]
    assert json.loads((run / "analysis" / "findings.json").read_text())["runs"][0]["ok_passes"] == ["off1", "on1"]


def test_analyze_of_a_finished_run_flags_nothing(tmp_path):
    run = grid_run(tmp_path / "grid-done")
    result = kit("analyze", str(run), "--no-figures", "--block-replicates", "50", "--cluster-replicates", "20")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("runs: 1 (grid)\n") and "unfinished" not in result.stdout


@pytest.mark.parametrize("status, reason, said", [
    ("interrupted", "stopped by the user (Ctrl-C)", "status 'interrupted': stopped by the user (Ctrl-C)"),
    ("failed", "engine died\nwith exit 137", "status 'failed': engine died with exit 137"),
    ("started", None, "status 'started': it is still running, or its kit was killed before it ended"),
])
def test_bundle_of_an_unfinished_run_is_refused_and_writes_nothing(tmp_path, status, reason, said):
    run = grid_run(tmp_path / "runs" / f"grid-{status}", status=status, reason=reason)
    before = listing(tmp_path)
    one_line_error(kit("bundle", str(run)), f"{run} is not a finished run ({said})", f"kit resume {run}",
                   "--allow-unfinished")
    one_line_error(kit("bundle", str(run), "-o", str(tmp_path / "out" / "x.tar.gz")), "is not a finished run")
    assert listing(tmp_path) == before  # no bundles/ folder, no out/ folder, no temporary file


def test_allow_unfinished_packs_the_run_as_it_is_flagged(tmp_path):
    run = grid_run(tmp_path / "grid-cut", status="interrupted", reason="stopped by the user (Ctrl-C)")
    out = tmp_path / "cut.tar.gz"
    result = kit("bundle", str(run), "-o", str(out), "--allow-unfinished")
    assert result.returncode == 0, result.stderr
    assert ("unfinished run packed (--allow-unfinished): grid-cut (status 'interrupted': stopped by the user "
            "(Ctrl-C))") in result.stdout.splitlines()
    with tarfile.open(out) as archive:
        index = json.loads(archive.extractfile(f"cut/{INDEX}").read())
        readme = archive.extractfile("cut/README.md").read().decode()
        names = archive.getnames()
    assert index["unfinished"] == [{"run_id": "grid-cut", "status": "interrupted",
                                    "reason": "stopped by the user (Ctrl-C)"}]
    assert "- status: interrupted" in readme.splitlines()
    assert {"cut/runs/grid-cut/records/on1.jsonl", "cut/runs/grid-cut/records/off1.jsonl"} <= set(names)


def test_a_finished_run_bundles_with_no_unfinished_entry(tmp_path):
    run = grid_run(tmp_path / "grid-done")
    out = tmp_path / "done.tar.gz"
    result = kit("bundle", str(run), "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "unfinished" not in result.stdout
    with tarfile.open(out) as archive:
        assert json.loads(archive.extractfile(f"done/{INDEX}").read())["unfinished"] == []


def test_bundle_help_says_what_is_refused_and_the_flag():
    shown = kit("bundle", "--help")
    assert shown.returncode == 0
    text = " ".join(shown.stdout.split())  # unwrapped: click wraps help to the terminal width
    assert "Only finished runs are packed" in text and "--allow-unfinished" in text
    assert "kit resume RUN_DIR" in text
