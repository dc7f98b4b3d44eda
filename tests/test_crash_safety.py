"""Crash safety on the real engine: `kill -9` of the kit mid-pass, and of llama-server mid-request, then
`kit resume`; the final record set equals an uninterrupted run's (the same token ids for every request of
every pass: none lost, none counted twice), and the server a killed kit left running is found and stopped.
(The torn-record rules themselves: tests/test_records.py and tests/test_counted_once.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kit.run import runner
from kit.run.resume import resume
from kit.core.events import RequestDone, SessionStarted
from kit.record.files import read_records
from tests.console_text import printed
from tests.test_cli_errors import kit

pytestmark = pytest.mark.engine

SIZE = {"workload": {"items": 2}, "sessions": 2, "max_tokens": 4}
SIZE_OPTIONS = ["--items", "2", "--sessions", "2", "--max-tokens", "4"]


def answers(run_dir: Path) -> dict[tuple[str, int], tuple]:
    """(pass, seq) -> what was asked and answered: unit, phase, prompt digest, token ids."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "finished"
    return {(pass_id, r["seq"]): (r["unit"], r["phase"], r["prompt_sha256"], tuple(r["completion"]["token_ids"]))
            for pass_id, info in manifest["passes"].items() for r in read_records(run_dir / info["file"])}


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, embedded_binary, gsm8k_file):
    result = runner.run(runner.RunOptions(protocol="reset", out=tmp_path_factory.mktemp("whole"), gsm8k=gsm8k_file,
                                          overrides=SIZE), say=lambda _: None)
    found = answers(result.run_dir)
    assert len(found) == 2 * 8
    assert not list((result.run_dir / "logs").glob("*.pid.json"))  # every server stopped, its note gone
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def _lines(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.is_file() else 0


def test_kill_9_of_the_kit_mid_pass_then_resume_gives_the_uninterrupted_records(uninterrupted, tmp_path,
                                                                               gsm8k_file):
    started = subprocess.Popen([sys.executable, "-m", "kit.cli", "run", "reset", "--gsm8k", str(gsm8k_file),
                                *SIZE_OPTIONS, "--out", str(tmp_path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not any(_lines(p) >= 3 for p in tmp_path.glob("reset-*/records/s2.jsonl")):
        assert started.poll() is None, "the run ended before it could be killed"
        time.sleep(0.02)
    started.send_signal(signal.SIGKILL)  # mid-pass: s1 done, s2 three records in
    started.wait(30)
    (run_dir,) = tmp_path.glob("reset-*")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "started" and manifest["passes"]["s2"]["status"] == "running"
    note = json.loads((run_dir / "logs" / "server-s2.pid.json").read_text())
    assert _alive(note["pid"])  # its own session: the kill of the kit did not reach it

    resumed = kit("resume", str(run_dir))
    assert resumed.returncode == 0, resumed.stderr
    assert printed(f"stopped llama-server pid {note['pid']} left running by an earlier kit (server-s2.log)",
                   resumed.stdout)
    assert not _alive(note["pid"]) and not list((run_dir / "logs").glob("*.pid.json"))
    history = json.loads((run_dir / "manifest.json").read_text())["resumed"][-1]
    assert history["passes_redone"] == ["s2"] and history["kept"] == ["s1"]
    assert [(s["pid"], s["outcome"]) for s in history["leftover_servers"]] == [(note["pid"], "SIGTERM")]
    assert answers(run_dir) == uninterrupted


def test_kill_9_of_llama_server_mid_request_then_resume_gives_the_uninterrupted_records(uninterrupted, tmp_path,
                                                                                       gsm8k_file):
    server = {}

    def kill_during_the_next_request(event):
        if isinstance(event, SessionStarted) and event.session == "s2":
            server["pid"] = event.launch["pid"]
        if isinstance(event, RequestDone) and event.session == "s2" and event.seq == 2:
            # two records written (seq counts from 1): the third request is in flight when the server dies
            threading.Timer(0.03, os.kill, (server["pid"], signal.SIGKILL)).start()

    failed = runner.run(runner.RunOptions(protocol="reset", out=tmp_path, gsm8k=gsm8k_file, overrides=SIZE),
                        emit=kill_during_the_next_request, say=lambda _: None)
    assert failed.status == "failed" and "engine died during session s2" in failed.reason
    kept = read_records(failed.run_dir / "records" / "s2.jsonl")
    assert len(kept.records) in (2, 3) and not kept.torn_tail  # 3 if that request beat the kill

    resumed = resume(failed.run_dir, say=lambda _: None)
    assert resumed.status == "finished"
    history = json.loads((resumed.run_dir / "manifest.json").read_text())["resumed"][-1]
    assert history["passes_redone"] == ["s2"] and history["leftover_servers"] == []
    assert answers(resumed.run_dir) == uninterrupted
    (superseded,) = (resumed.run_dir / "records" / "superseded").iterdir()
    assert len(read_records(superseded).records) == len(kept.records)  # kept aside, never counted
