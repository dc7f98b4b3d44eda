"""Nothing the kit writes into a run folder lands outside it through a link (issue 35, item 3; docs/security.md,
rule 2): a run folder whose lock, manifest, records, server log or results file is a hard link to the canary
`scratch.outside/keep.txt`, a symbolic link to it, or a file of another user. `kit bundle`, `kit resume` and
`kit analyze` either refuse in one line naming the file, or go on without writing through it (a file made anew
and renamed into place replaces the name, never the file it led to); the canary never changes (the corpus
judges "touched" otherwise)."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from tests.adversarial.cases_confine import _run_folder
from tests.adversarial.corpus import Case, Ending, Scratch

DEAD_URL = "http://127.0.0.1:9"  # nothing listens: a resume against it fails once it has set up the pass
NOBODY = 65534

# the run-folder files a command may write, by what they are
FILES = {"lock": ".kit-lock", "manifest": "manifest.json", "records": "records/s2.jsonl",
         "server log": "logs/server-s2.log", "results": "results/reset_table.json"}


def _link(kind: str, name: str, scratch: Scratch, folder: Path) -> None:
    """Make `name` in the run folder a hard link ("hard") or a symbolic link ("symbolic") to a file outside
    holding what the run folder's file held (so the run folder still reads as whole), or a file of another
    user ("foreign": owned by nobody)."""
    target = folder / name
    if kind == "foreign":
        if not target.exists():
            target.write_bytes(b"")
        os.chown(target, NOBODY, NOBODY)
        return
    outside = scratch.outside / target.name  # the corpus fails the case if any file here changes
    outside.write_bytes(target.read_bytes() if target.exists() else b"")
    target.unlink(missing_ok=True)
    if kind == "hard":
        target.hardlink_to(outside)
    else:
        target.symlink_to(outside)


def _own_server(scratch: Scratch) -> Path:
    """A server binary of the user's own that fails at once (what it is never matters: its log is opened
    first)."""
    binary = scratch.tmp / "llama-server"
    binary.write_text("#!/bin/sh\necho 'cannot start' >&2\nexit 1\n")
    binary.chmod(0o755)
    return binary


def _command(command: str, what: str, kind: str) -> Callable[[Scratch], list[str]]:
    def make(scratch: Scratch) -> list[str]:
        own: list[str] = []

        def change(manifest: dict) -> None:
            if command != "resume":
                return
            manifest["provenance"].pop("cpu_backend")  # the fixture's wheel backend is not this machine's
            if what == "server log":  # the pass restarts a server of the user's own, whose log is appended to
                binary = _own_server(scratch)
                manifest["options"].update(server_bin=str(binary))
                manifest["engine"]["server_bin_sha256"] = hashlib.sha256(binary.read_bytes()).hexdigest()
                own.extend(["--server-bin", str(binary)])
            else:  # against a URL where nothing listens: the pass is set up, then fails
                manifest["options"].update(engine_url=DEAD_URL, cpu_backend="auto")
                own.extend(["--engine-url", DEAD_URL])
            if what == "results":  # every pass done, the run stopped before its results: resume writes them
                manifest["status"] = "interrupted"

        folder = _run_folder(scratch, change, resumable=command == "resume" and what != "results")
        _link(kind, FILES[what], scratch, folder)
        return {"resume": ["resume", str(folder), *own],
                "analyze": ["analyze", str(folder), "--out", str(scratch.outputs / "analysis")],
                "bundle": ["bundle", str(folder), "-o", str(scratch.outputs / "b.tar.gz")]}[command]
    return make


def _ends_clearly(needle: str | None) -> Callable[[Scratch, Ending], str | None]:
    """Handled: whatever the command did (the corpus compares every file outside byte for byte), it ended
    well or in one `kit: error:` line, which names `needle` where given (a refusal in the middle of a run,
    after its progress lines)."""
    def check(scratch: Scratch, ending: Ending) -> str | None:
        last = ending.lines[-1] if ending.lines else ""
        if needle is not None and not (last.startswith("kit: error: ") and needle in last):
            return f"exit {ending.code}, the last line does not name {needle!r}: {last!r}"
        if ending.code != 0 and not last.startswith("kit: error: "):
            return f"exit {ending.code} without a one-line error: {last!r}"
        return None
    return check


def _case(command: str, what: str, kind: str, needle: str | None = None, *, mid_run: bool = False) -> Case:
    """Refused in one line naming `needle`; or, with no needle or `mid_run`, handled (`_ends_clearly`)."""
    name = f"{command} of a run folder whose {what} is " + {
        "hard": "a hard link to a file outside", "symbolic": "a symbolic link to a file outside",
        "foreign": "a file of another user"}[kind]
    make = _command(command, what, kind)
    if needle is None or mid_run:
        return Case(cls="run folder", name=name, make=make, expect="handled", check=_ends_clearly(needle),
                    timeout=120)
    return Case(cls="run folder", name=name, make=make, needle=needle, timeout=120)


LOCK = FILES["lock"]
ROOT = os.geteuid() == 0  # a file of another user can be made only as root: those cases run where it can
CASES = [
    # the lock: opened to be written by bundle and resume, so refused (one name, ours, no link)
    _case("bundle", "lock", "hard", f"{LOCK} has 2 names"),
    _case("resume", "lock", "hard", f"{LOCK} has 2 names"),
    _case("bundle", "lock", "symbolic", f"{LOCK} is a symbolic link"),
    _case("resume", "lock", "symbolic", f"{LOCK} is a symbolic link"),
    # the records: appended to by resume where it carries a pass on; only read by the others
    _case("resume", "records", "hard"),
    _case("bundle", "records", "hard"),
    _case("analyze", "records", "hard"),
    # the manifest: rewritten by resume (made anew, renamed into place), only read by the others
    _case("resume", "manifest", "hard"),
    _case("bundle", "manifest", "hard"),
    _case("analyze", "manifest", "hard"),
    # a server's log: appended to when resume starts the pass's server again
    _case("resume", "server log", "hard", "server-s2.log has 2 names", mid_run=True),
    _case("resume", "server log", "symbolic", "holds a link, logs/server-s2.log"),
    # results: written anew by a resume whose passes are all done; only read by the others
    _case("resume", "results", "hard"),
    _case("bundle", "results", "hard"),
    _case("analyze", "results", "hard"),
] + ([
    _case("resume", "lock", "foreign", f"{LOCK} belongs to user id {NOBODY}"),
    _case("resume", "records", "foreign"),
    _case("resume", "server log", "foreign", f"server-s2.log belongs to user id {NOBODY}", mid_run=True),
] if ROOT else [])
