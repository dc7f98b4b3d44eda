"""`kit bisect` on a bisect folder someone else made or edited (issue #39): its state file is untrusted input,
refused in one line before anything is built, fetched or run when it is not what a bisect writes (a run folder
named outside the bisect folder or reached through a link, a FIFO, an oversized file, outcomes no bisect
gives)."""

from __future__ import annotations

import json
import os
from typing import Any

from tests.adversarial.cases_atlas import _nothing_fetched
from tests.adversarial.corpus import Case, Scratch

GOOD, BAD = 10435, 11434


def _step(build: int, role: str, outcome: str, run: str | None) -> dict[str, Any]:
    return {"build": build, "role": role, "outcome": outcome, "result": None if outcome == "skip" else "same as good",
            "said": "outputs same as good", "run": run, "cached": True, "build_seconds": 0.0, "run_seconds": 1.0}


def _folder(scratch: Scratch, steps: list[dict[str, Any]] | None = None, state: bytes | None = None) -> list[str]:
    from kit.protocols import kinds  # noqa: PLC0415

    folder = scratch.inbox / "bisect"
    (folder / "runs").mkdir(parents=True)
    if state is None:
        state = json.dumps({"format": "kit-bisect/1", "engine": "llamacpp", "good": GOOD, "bad": BAD,
                            "protocol": "demo", "protocol_sha256": kinds.load("demo")[2], "rung": "outputs",
                            "cpu_backend": "portable", "builds": [10441, 10883], "steps": steps or []}).encode()
    (folder / "bisect.json").write_bytes(state)
    return ["bisect", "llamacpp", "--good", str(GOOD), "--bad", str(BAD), "--protocol", "demo", "--rung", "outputs",
            "--out", str(folder)]


def _linked_run(scratch: Scratch) -> list[str]:
    args = _folder(scratch, [_step(GOOD, "good end", "good", "demo-b10435")])
    (scratch.outside / "demo-b10435").mkdir()
    (scratch.inbox / "bisect" / "runs" / "demo-b10435").symlink_to(scratch.outside / "demo-b10435")
    return args


def _fifo(scratch: Scratch) -> list[str]:
    args = _folder(scratch)
    state = scratch.inbox / "bisect" / "bisect.json"
    state.unlink()
    os.mkfifo(state)
    return args


def _outside(scratch: Scratch) -> list[str]:
    return _folder(scratch, [_step(GOOD, "good end", "good", "../../outside")])


CASES = [
    Case(cls="bisect folder", name="state naming a run folder outside the bisect folder", make=_outside,
         needle="is not a state file kit bisect wrote (steps.0.run", check=_nothing_fetched),
    Case(cls="bisect folder", name="state whose run folder is a link out of the bisect folder", make=_linked_run,
         needle="which is not a folder there", check=_nothing_fetched),
    Case(cls="bisect folder", name="state file that is a FIFO", make=_fifo, needle="is a FIFO (named pipe)",
         check=_nothing_fetched),
    Case(cls="bisect folder", name="state file over the size limit",
         make=lambda s: _folder(s, state=b" " * 1_000_001 + b"{}"), needle="over the 1000000-byte limit",
         check=_nothing_fetched),
    Case(cls="bisect folder", name="state with a good build after a bad one",
         make=lambda s: _folder(s, [_step(GOOD, "good end", "good", "a"), _step(BAD, "bad end", "bad", "b"),
                                    _step(10441, "midpoint", "bad", "c"), _step(10883, "midpoint", "good", "d")]),
         needle="build 10883 is judged good but an earlier build, 10441, bad", check=_nothing_fetched),
]
