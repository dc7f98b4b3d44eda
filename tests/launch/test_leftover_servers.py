"""Leftover servers: a noted process still running its recorded command line is stopped; a pid now used
by another command line is never touched; notes of processes that are gone are removed. The processes
here are `sleep`s standing in for llama-server (the real case: tests/test_crash_safety.py)."""

from __future__ import annotations

import subprocess
import sys
import time

from kit.launch import leftover_servers as ls


def _start(*argv: str) -> subprocess.Popen:
    return subprocess.Popen(list(argv), start_new_session=True)


def test_a_noted_process_running_its_command_line_is_stopped_and_its_note_removed(tmp_path):
    proc = _start("sleep", "600")
    ls.note_started(tmp_path / "server-s1.log", proc.pid, ["sleep", "600"])
    said = []
    found = ls.stop_leftovers(tmp_path, said.append, grace=5)
    assert proc.wait(5) == -15  # SIGTERM
    assert [(f["pid"], f["outcome"], f["log"]) for f in found] == [(proc.pid, "SIGTERM", "server-s1.log")]
    assert said == [f"stopped llama-server pid {proc.pid} left running by an earlier kit (server-s1.log): SIGTERM"]
    assert not list(tmp_path.iterdir())


def test_a_process_that_ignores_sigterm_is_killed(tmp_path):
    argv = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"]
    proc = _start(*argv)
    time.sleep(0.5)  # let it install its handler
    ls.note_started(tmp_path / "server-s1.log", proc.pid, argv)
    found = ls.stop_leftovers(tmp_path, lambda _: None, grace=0.5)
    assert proc.wait(5) == -9 and found[0]["outcome"] == "SIGKILL"


def test_a_pid_running_another_command_line_is_never_touched(tmp_path):
    proc = _start("sleep", "600")
    try:
        ls.note_started(tmp_path / "server-s1.log", proc.pid, ["llama-server", "--port", "8080"])
        found = ls.stop_leftovers(tmp_path, lambda _: None, grace=1)
        assert proc.poll() is None and found[0]["outcome"] == "not running"
        assert not ls.note_path(tmp_path / "server-s1.log").exists()
    finally:
        proc.kill()
        proc.wait()


def test_notes_of_gone_processes_are_removed_and_a_foreign_note_is_kept_with_a_warning(tmp_path):
    proc = _start("true")
    proc.wait()
    ls.note_started(tmp_path / "server-s1.log", proc.pid, ["true"])
    (tmp_path / "server-s2.pid.json").write_text("not json")
    said = []
    found = ls.stop_leftovers(tmp_path, said.append)
    assert [f["outcome"] for f in found] == ["not running"]
    assert [p.name for p in tmp_path.iterdir()] == ["server-s2.pid.json"]
    assert len(said) == 1 and said[0].startswith("warning: ") and "left as it is" in said[0]
    assert ls.stop_leftovers(tmp_path / "absent", said.append) == []
