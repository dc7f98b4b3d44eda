"""Leftover servers: a noted process is stopped only when the process itself shows the kit started it on
this boot (the note's token in its environment, its start time, the boot id); a process a note merely
names (by pid and real command line) is never touched; notes of processes that are gone are removed. The
processes here are `sleep`s standing in for llama-server (the real case: tests/test_crash_safety.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kit.launch import leftover_servers as ls


def _start(*argv: str, token: bool = True) -> tuple[subprocess.Popen, str]:
    """A process started as the kit starts a server, once /proc shows the program it runs: Popen returns when
    the exec has begun, and the kernel sets /proc/<pid>/cmdline and environ only once the program is loaded (a
    read in between finds this process's or nothing, which made the tests here fail at random under load)."""
    env, secret = ls.launch_env(None) if token else (dict(os.environ), "")
    proc = subprocess.Popen(list(argv), start_new_session=True, env=env)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and proc.poll() is None:  # one that ended at once has nothing to show
        try:
            if Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[:-1] == [a.encode() for a in argv]:
                break
        except OSError:  # a process that ended at once (or was reaped): nothing to wait for
            break
        time.sleep(0.01)
    return proc, secret


@pytest.fixture
def processes():
    started: list[subprocess.Popen] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()


def test_a_server_the_kit_started_is_stopped_and_its_note_removed(tmp_path, processes):
    proc, token = _start("sleep", "600")
    processes.append(proc)
    ls.note_started(tmp_path / "server-s1.log", proc.pid, ["sleep", "600"], token)
    said = []
    found = ls.stop_leftovers(tmp_path, said.append, grace=5)
    assert proc.wait(5) == -15  # SIGTERM
    assert [(f["pid"], f["outcome"], f["log"]) for f in found] == [(proc.pid, "SIGTERM", "server-s1.log")]
    assert said == [f"stopped llama-server pid {proc.pid} left running by an earlier kit (server-s1.log): SIGTERM"]
    assert not list(tmp_path.iterdir())


def test_a_process_that_ignores_sigterm_is_killed(tmp_path, processes):
    argv = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"]
    proc, token = _start(*argv)
    processes.append(proc)
    _wait_until_it_ignores_sigterm(proc.pid)
    ls.note_started(tmp_path / "server-s1.log", proc.pid, argv, token)
    found = ls.stop_leftovers(tmp_path, lambda _: None, grace=0.5)
    assert proc.wait(5) == -9 and found[0]["outcome"] == "SIGKILL"


def _wait_until_it_ignores_sigterm(pid: int) -> None:
    """Once /proc shows SIGTERM among the ignored signals (a fixed wait lost that race under load)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ignored = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                       if line.startswith("SigIgn:"))
        if int(ignored.split()[1], 16) >> (signal.SIGTERM - 1) & 1:
            return
        time.sleep(0.01)
    raise AssertionError(f"pid {pid} did not ignore SIGTERM within 30 s")


def _forged(tmp_path, proc: subprocess.Popen, **changes) -> None:
    """A note naming `proc` with its real pid, command line, start time and boot id, as anyone can write it."""
    note = {"pid": proc.pid, "argv": proc.args, "started": "2026-12-01T00:00:00", "token": "ab" * 16,
            "boot_id": ls._boot_id(), "start_ticks": ls._start_ticks(proc.pid), **changes}
    (tmp_path / "server-s1.pid.json").write_text(json.dumps(note))


@pytest.mark.parametrize("token, changes", [
    (False, {}),  # a process the kit did not start, named with everything /proc shows of it
    (True, {"token": "cd" * 16}),  # started by the kit, but the note's token is not its token
    (True, {"boot_id": "0" * 36}),  # the right token, another boot
    (True, {"start_ticks": 1}),  # the right token, another start time
    (True, {"token": None, "boot_id": None, "start_ticks": None}),  # a note of an older kit: no proof at all
])
def test_a_process_a_note_merely_names_is_never_touched(tmp_path, processes, token, changes):
    proc, secret = _start("sleep", "600", token=token)
    processes.append(proc)
    _forged(tmp_path, proc, **{**({"token": secret} if secret else {}), **changes})
    said = []
    found = ls.stop_leftovers(tmp_path, said.append, grace=1)
    time.sleep(0.2)
    assert proc.poll() is None and found[0]["outcome"] == "not ours"
    assert (tmp_path / "server-s1.pid.json").exists()  # kept: it still names a live process
    assert len(said) == 1 and "not started by this kit on this boot; left running" in said[0]


def test_the_same_note_with_the_processs_own_token_does_stop_it(tmp_path, processes):
    """The forged-note test above can fail: given the right token, the same note stops the process."""
    proc, secret = _start("sleep", "600")
    processes.append(proc)
    _forged(tmp_path, proc, token=secret)
    assert ls.stop_leftovers(tmp_path, lambda _: None, grace=5)[0]["outcome"] == "SIGTERM"
    assert proc.wait(5) == -15


@pytest.mark.parametrize("pid", [-1, 0, 1])
def test_a_note_naming_every_process_or_init_is_not_a_note(tmp_path, pid):
    (tmp_path / "server-s1.pid.json").write_text(json.dumps({"pid": pid, "argv": ["x"], "token": "ab" * 16}))
    said = []
    assert ls.stop_leftovers(tmp_path, said.append) == []
    assert len(said) == 1 and "is not a server note the kit wrote" in said[0]


def test_notes_of_gone_processes_are_removed_and_a_foreign_note_is_kept_with_a_warning(tmp_path):
    proc, token = _start("true")
    proc.wait()
    ls.note_started(tmp_path / "server-s1.log", proc.pid, ["true"], token)
    (tmp_path / "server-s2.pid.json").write_text("not json")
    said = []
    found = ls.stop_leftovers(tmp_path, said.append)
    assert [f["outcome"] for f in found] == ["not running"]
    assert [p.name for p in tmp_path.iterdir()] == ["server-s2.pid.json"]
    assert len(said) == 1 and said[0].startswith("warning: ") and "left as it is" in said[0]
    assert ls.stop_leftovers(tmp_path / "absent", said.append) == []
