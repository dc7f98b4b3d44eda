"""Faults on the real engine (a demo-size restored-state control, embedded llama-server): SIGTERM to a
`kit run` mid-pass, SIGHUP to its process group (a closed terminal), and a disk that fills up mid-run
(a small tmpfs) each end the run with its true cause and status, the records written so far intact,
and `kit resume` finishes it. (The same with a stand-in procedure: tests/test_run_faults.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.record.files import read_records
from kit.run.lock import LOCK
from tests.test_cli_errors import kit

pytestmark = pytest.mark.engine

SIZE_OPTIONS = ["--items", "2", "--sessions", "2", "--max-tokens", "4", "--threads", "1"]
PER_PASS = 8  # 2 items x 4 phases


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.is_file() else 0


def _whole_passes_intact(run_dir: Path) -> None:
    """Every pass the manifest says ended OK reads whole, with the records it counts."""
    for info in _manifest(run_dir)["passes"].values():
        if info["status"] == "OK":
            assert len(read_records(run_dir / info["file"]).records) == info["records"]


def _resume_finishes(run_dir: Path, passes: int) -> None:
    resumed = kit("resume", str(run_dir))
    assert resumed.returncode == 0, resumed.stderr
    manifest = _manifest(run_dir)
    assert manifest["status"] == "finished" and len(manifest["passes"]) == passes
    for info in manifest["passes"].values():
        assert info["status"] == "OK" and len(read_records(run_dir / info["file"]).records) == info["records"]
    assert not (run_dir / LOCK).exists()


@pytest.mark.parametrize("number, to_group", [(signal.SIGTERM, False), (signal.SIGHUP, True)],
                         ids=["SIGTERM to kit", "SIGHUP to its process group"])
def test_a_signal_mid_pass_ends_the_run_interrupted_naming_it_and_resume_finishes_it(number, to_group, tmp_path,
                                                                                      embedded_binary, gsm8k_file):
    started = subprocess.Popen([sys.executable, "-m", "kit.cli", "run", "reset", "--gsm8k", str(gsm8k_file),
                                *SIZE_OPTIONS, "--out", str(tmp_path)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not any(_lines(p) >= 3 for p in tmp_path.glob("reset-*/records/s2.jsonl")):
        assert started.poll() is None, "the run ended before it could be stopped"
        time.sleep(0.02)
    if to_group:
        os.killpg(started.pid, number)
    else:
        started.send_signal(number)
    _, err = started.communicate(timeout=60)
    (run_dir,) = tmp_path.glob("reset-*")
    manifest = _manifest(run_dir)
    reason = f"stopped by {signal.Signals(number).name}; records written so far are kept"
    assert (manifest["status"], manifest["reason"]) == ("interrupted", reason)
    assert started.returncode == 130 and err.strip().splitlines()[-1].startswith("kit: error: the run was interrupted")
    assert "Traceback" not in err
    assert manifest["passes"]["s1"]["status"] == "OK" and manifest["passes"]["s2"]["status"] == "interrupted"
    assert not list((run_dir / "logs").glob("*.pid.json"))  # the server it started was stopped
    _whole_passes_intact(run_dir)
    assert len(read_records(run_dir / "records" / "s2.jsonl", torn="report").records) >= 3
    _resume_finishes(run_dir, passes=2)


def test_a_full_disk_mid_run_ends_it_failed_saying_so_and_resume_finishes_it_once_there_is_room(
        tmp_path, embedded_binary, gsm8k_file):
    disk = tmp_path / "disk"
    disk.mkdir()
    # the run lock's 1 MiB reserve, and about 280 KB for a run of 2 x 20 records (about 6 KB each) and its logs
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1300k", "tmpfs", str(disk)],
                      capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        ran = kit("run", "reset", "--gsm8k", str(gsm8k_file), "--items", "5", "--sessions", "2", "--max-tokens", "8",
                  "--threads", "1", "--out", str(disk))
        (run_dir,) = disk.glob("reset-*")
        manifest = _manifest(run_dir)
        assert manifest["status"] == "failed" and manifest["reason"].startswith("the disk is full"), manifest["reason"]
        error = [line for line in ran.stderr.splitlines() if line.strip()]
        assert ran.returncode != 0 and len(error) == 1 and "Traceback" not in ran.stderr
        assert error[0].startswith("kit: error: the run failed: the disk is full") and "kit resume" in error[0]
        assert not list((run_dir / "logs").glob("*.pid.json"))
        _whole_passes_intact(run_dir)
        assert any(info["status"] == "failed" for info in manifest["passes"].values())
        subprocess.run(["mount", "-o", "remount,size=16m", str(disk)], check=True)
        _resume_finishes(run_dir, passes=2)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
