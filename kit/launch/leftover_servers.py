"""Servers a killed kit left running, found and stopped by the next `kit resume`.

The kit starts each llama-server in a session of its own (so a Ctrl-C meant for the kit does not reach
it); when the kit itself is killed (`kill -9`, an out-of-memory kill, a closed SSH session) its servers
keep running, holding their port, threads and memory. So every server the kit starts leaves a note
beside its log, `logs/server-<label>.pid.json`, written as soon as the process exists and removed once it
has been stopped.

A note is a file anyone can write (a run folder may come from anywhere), so it never decides alone: it
only says which pid to look at. The process is stopped only when the process itself shows that this kit
started it on this boot (`ours`): each server is started with a fresh random token in its environment
(`KIT_SERVER_TOKEN`), and the note records that token, the machine's boot id and the process's start
time; all three must match /proc/sys/kernel/random/boot_id, /proc/<pid>/stat and /proc/<pid>/environ
(which only the process's own user can read). Another program, of another user or of this one, a pid
reused after a reboot, or a note of an older kit without a token is never signalled: the note of a
process that still runs is kept, with a line saying so; notes of processes that are gone are removed.
Where /proc is absent nothing is stopped and the note is kept, with a line saying so.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import time
from pathlib import Path
from typing import Any, Callable

from kit.core.atomic_file import write_json_atomic
from kit.record.manifest import now

SUFFIX = ".pid.json"
TOKEN_VAR = "KIT_SERVER_TOKEN"
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def note_path(log_path: Path) -> Path:
    """Where the note of the server logging to `log_path` goes: beside it."""
    return log_path.with_name(log_path.stem + SUFFIX)


def launch_env(env: dict[str, str] | None) -> tuple[dict[str, str], str]:
    """The environment to start a server with (`env`, else this process's), plus a fresh token in it."""
    token = secrets.token_hex(16)
    return {**(os.environ if env is None else env), TOKEN_VAR: token}, token


def _boot_id() -> str | None:
    try:
        return BOOT_ID.read_text().strip()
    except OSError:
        return None


def _start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks after boot, /proc/<pid>/stat field 22); None when gone."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def note_started(log_path: Path, pid: int, argv: list[str], token: str) -> None:
    write_json_atomic(note_path(log_path), {"pid": pid, "argv": argv, "started": now(), "token": token,
                                            "boot_id": _boot_id(), "start_ticks": _start_ticks(pid)})


def ours(pid: int, note: dict[str, Any]) -> bool:
    """Did this kit start `pid`, on this boot, as the server `note` describes? Only the process can say:
    same boot id, same start time, and the note's token in its environment. Raises OSError where /proc
    cannot tell."""
    if not BOOT_ID.exists():
        raise OSError("no /proc on this system")
    token = note.get("token")
    if not isinstance(token, str) or len(token) < 32 or note.get("boot_id") != _boot_id() \
            or note.get("start_ticks") is None or note.get("start_ticks") != _start_ticks(pid):
        return False
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone, or another user's process
        return False
    return f"{TOKEN_VAR}={token}".encode() in environ


def note_stopped(log_path: Path) -> None:
    note_path(log_path).unlink(missing_ok=True)


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")  # a zombie no longer runs; its parent (init) reaps it


def _signal(pid: int, pinned: int | None, sig: signal.Signals) -> None:
    if pinned is not None:  # the process pinned before it was checked: a pid reused since is never signalled
        signal.pidfd_send_signal(pinned, sig)
    else:
        os.kill(pid, sig)


def _stop(pid: int, pinned: int | None, grace: float) -> str:
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            _signal(pid, pinned, sig)
        except ProcessLookupError:
            return "gone"
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if _gone(pid):
                return sig.name
            time.sleep(0.05)
    return "still running"


def _pin(pid: int) -> int | None:
    """A pidfd of `pid` (Linux 5.3+), so that the process checked is the process signalled; else None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def _settle(pid: int, note: dict[str, Any], name: str, log: str, say: Callable[[str], None], grace: float) -> str:
    """Stop the noted server if it still runs and is ours; the outcome."""
    pinned = _pin(pid)
    try:
        try:
            mine = ours(pid, note)
        except OSError as exc:
            say(f"warning: cannot tell whether llama-server pid {pid} from {name} still runs ({exc}); "
                "stop it yourself if it does")
            return "unknown"
        if _gone(pid):
            return "not running"
        if not mine:
            say(f"warning: {name} names pid {pid}, which runs but was not started by this kit on this boot; "
                "left running (stop it yourself if it is yours)")
            return "not ours"
        outcome = _stop(pid, pinned, grace)
        say(f"stopped llama-server pid {pid} left running by an earlier kit ({log}): {outcome}")
        return outcome
    finally:
        if pinned is not None:
            os.close(pinned)


def stop_leftovers(log_dir: Path, say: Callable[[str], None], grace: float = 10.0) -> list[dict[str, Any]]:
    """Stop the servers noted in `log_dir` that this kit started on this boot (`ours`); what was found, one
    entry per note (`pid`, `argv`, `started`, `log`, `outcome`). Notes of servers that are gone (or were
    stopped) are removed; the others are kept."""
    found = []
    for note in sorted(log_dir.glob(f"*{SUFFIX}")) if log_dir.is_dir() else []:
        try:
            data = json.loads(note.read_text())
            pid, argv = int(data["pid"]), [str(a) for a in data["argv"]]
            if pid <= 1:
                raise ValueError(f"pid {pid}")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            say(f"warning: {note} is not a server note the kit wrote ({exc}); left as it is")
            continue
        entry = {"pid": pid, "argv": argv, "started": data.get("started"),
                 "log": note.name.removesuffix(SUFFIX) + ".log"}
        outcome = _settle(pid, data, note.name, entry["log"], say, grace)
        if outcome in ("not running", "gone", "SIGTERM", "SIGKILL"):
            note.unlink(missing_ok=True)
        found.append({**entry, "outcome": outcome})
    return found
