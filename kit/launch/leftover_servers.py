"""Servers a killed kit left running, found and stopped by the next `kit resume`.

The kit starts each llama-server in a session of its own (so a Ctrl-C meant for the kit does not reach
it); when the kit itself is killed (`kill -9`, an out-of-memory kill, a closed SSH session) its servers
keep running, holding their port, threads and memory. So every server the kit starts leaves a note
beside its log, `logs/server-<label>.pid.json` (`pid`, `argv`, `started`), written as soon as the process
exists and removed once it has been stopped. `kit resume` reads the notes of its run folder: a process
that is still alive *and* runs exactly the recorded command line (Linux: /proc/<pid>/cmdline, so a pid
reused by another program is never touched) is stopped (SIGTERM, SIGKILL after a grace period); notes
of processes that are gone are removed. Where /proc is absent nothing is stopped and the note is kept,
with a line saying so.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable

from kit.atomic_file import write_json_atomic
from kit.manifest import now

SUFFIX = ".pid.json"


def note_path(log_path: Path) -> Path:
    """Where the note of the server logging to `log_path` goes: beside it."""
    return log_path.with_name(log_path.stem + SUFFIX)


def note_started(log_path: Path, pid: int, argv: list[str]) -> None:
    write_json_atomic(note_path(log_path), {"pid": pid, "argv": argv, "started": now()})


def note_stopped(log_path: Path) -> None:
    note_path(log_path).unlink(missing_ok=True)


def _cmdline(pid: int) -> list[str] | None:
    """The process's command line, or None when it is gone; raises OSError where /proc cannot tell."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return raw.decode("utf-8", "surrogateescape").split("\0")[:-1] if raw else None


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")  # a zombie no longer runs; its parent (init) reaps it


def _stop(pid: int, grace: float) -> str:
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return "gone"
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if _gone(pid):
                return sig.name
            time.sleep(0.05)
    return "still running"


def stop_leftovers(log_dir: Path, say: Callable[[str], None], grace: float = 10.0) -> list[dict[str, Any]]:
    """Stop the servers noted in `log_dir` that still run their recorded command line; what was found,
    one entry per note (`pid`, `argv`, `started`, `log`, `outcome`)."""
    found = []
    for note in sorted(log_dir.glob(f"*{SUFFIX}")) if log_dir.is_dir() else []:
        try:
            data = json.loads(note.read_text())
            pid, argv = int(data["pid"]), [str(a) for a in data["argv"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            say(f"warning: {note} is not a server note the kit wrote ({exc}); left as it is")
            continue
        entry = {"pid": pid, "argv": argv, "started": data.get("started"),
                 "log": note.name.removesuffix(SUFFIX) + ".log"}
        try:
            running = _cmdline(pid)
        except OSError as exc:
            say(f"warning: cannot tell whether llama-server pid {pid} from {note.name} still runs ({exc}); "
                "stop it yourself if it does")
            found.append({**entry, "outcome": "unknown"})
            continue
        if running == argv and not _gone(pid):
            outcome = _stop(pid, grace)
            say(f"stopped llama-server pid {pid} left running by an earlier kit ({entry['log']}): {outcome}")
            if outcome == "still running":
                found.append({**entry, "outcome": outcome})
                continue
        else:
            outcome = "not running"
        note.unlink(missing_ok=True)
        found.append({**entry, "outcome": outcome})
    return found
