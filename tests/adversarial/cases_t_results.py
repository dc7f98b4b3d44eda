"""A bundled results table of the wrong shape (issue #37, item 1): each kind's results are read through its typed
model (kit.protocols.results_model), so a results/*.json whose field is of another JSON type, a negative count or
an OK session without its counts is never read as a number: `kit show` says, in one line naming the file and the
field, that the file is not laid out as this kit reads it, and `kit verify` fails the bundle (its recomputed
results differ), never a traceback."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

from tests.adversarial.corpus import Case, Ending, Scratch

DEMO = Path(__file__).resolve().parents[1] / "fixtures" / "records_v1" / "demo-20261201-070851"
RESULTS = "results/reset_table.json"


def _bundle(change: Callable[[dict], None]) -> Callable[[Scratch], Path]:
    """A bundle of the demo run written by this kit, its reset table changed by `change` before it was written."""
    def make(scratch: Scratch) -> Path:
        from kit.bundle.writer import write_bundle  # noqa: PLC0415

        run_dir = shutil.copytree(DEMO, scratch.inbox / "demo-run")
        table = json.loads((run_dir / RESULTS).read_text())
        change(table)
        (run_dir / RESULTS).write_text(json.dumps(table, indent=2))
        bundle = write_bundle([run_dir], scratch.inbox / "results.tar.gz", environ={}).path
        shutil.rmtree(run_dir)
        return bundle
    return make


def _shown(field: str) -> Callable[[Scratch, Ending], str | None]:
    def check(scratch: Scratch, ending: Ending) -> str | None:
        said = [line for line in ending.lines if "is not laid out as this kit reads it" in line]
        if not said or not any(RESULTS in line and field in line for line in said):
            return f"kit show did not say {RESULTS}'s {field} is not laid out as this kit reads it"
        return None
    return check


def _failed(scratch: Scratch, ending: Ending) -> str | None:
    """kit verify fails the bundle: the results it recomputes from the records differ from the bundled table."""
    if ending.code in (0, None) or not any(line.startswith("FAILED") for line in ending.lines):
        return f"kit verify did not fail the bundle (exit {ending.code})"
    return None if RESULTS in ending.text else f"kit verify did not name {RESULTS}"


def _case(name: str, change: Callable[[dict], None], field: str) -> list[Case]:
    make = _bundle(change)
    return [Case(cls="bundle", name=f"kit show: {name}", make=lambda s: ["show", "--no-verify", str(make(s))],
                 expect="handled", check=_shown(field)),
            Case(cls="bundle", name=f"kit verify: {name}", make=lambda s: ["verify", str(make(s))],
                 expect="handled", check=_failed)]


CASES = [
    *_case("a reset table whose count is a string", lambda t: t["sessions"][0].update(items="2"), "sessions.0.items"),
    *_case("a reset table whose count is negative", lambda t: t["sessions"][0].update(paths_differ=-1),
           "sessions.0.paths_differ"),
    *_case("a reset table with an OK session without its counts",
           lambda t: [t["sessions"][0].pop(k) for k in ("items", "recompute_reproduces")], "sessions.0"),
]
