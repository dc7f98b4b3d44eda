"""`kit replay` says what it is doing, pass by pass: a line as each pass starts and as it ends, with how its
records compare with the original's (fed the runner's own events over a copy of a real demo run; no engine)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kit.core.events import RunEnded, RunStarted, SessionEnded, SessionStarted
from kit.replay.progress import printer

ORIGINAL = Path(__file__).resolve().parent / "fixtures" / "records_v1" / "demo-20261201-070851"


def test_a_line_per_pass_as_it_starts_and_ends_with_its_comparison_so_far(tmp_path):
    new = tmp_path / "demo-replayed"
    shutil.copytree(ORIGINAL, new)
    s2 = (new / "records" / "s2.jsonl").read_text().splitlines()
    changed = json.loads(s2[1])
    changed["completion"]["token_ids"] = [7, *changed["completion"]["token_ids"][1:]]  # differs at token 0
    (new / "records" / "s2.jsonl").write_text("\n".join([s2[0], json.dumps(changed)]) + "\n")  # s2 cut short
    lines: list[str] = []
    receive = printer(lines.append)(ORIGINAL)
    receive(RunStarted(new, "reset", {}))
    receive(SessionStarted("s1", 1, 2, {}))
    assert lines[-1] == "pass s1 (1 of 2) started: starting the engine and replaying its requests"
    receive(SessionEnded("s1", "OK", None))
    assert lines[-1] == "pass s1 ended OK: 8 of 8 requests replayed, 8 byte-identical"
    receive(SessionStarted("s2", 2, 2, {}))
    receive(RunEnded(new, "interrupted", "stopped by the user"))  # s2 never said it ended: the run's end does
    assert lines[0].startswith(f"replay running in {new} (2 recorded passes: s1, s2)")
    assert lines[-1] == "pass s2 ended: 2 of 8 requests replayed, 1 byte-identical; first difference #1, differs at token 0"
    assert len(lines) == 5
