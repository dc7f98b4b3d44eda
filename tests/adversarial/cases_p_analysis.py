"""Run folders handed to `kit analyze` whose records the partial record view (kit.record.view) could be fooled by:
a pass that claims a prompt digest another pass of the run already proved, for another prompt (the view checks each
prompt once per run); a byte that is not UTF-8 in a field the view never decodes; a field the view reads, of
another type. Each is refused in one line, as the full read refuses it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.adversarial.corpus import Case, Scratch
from tests.analysis.records_builder import position, write_grid_like

EPISODE = [("the prompt", [position(5, 0.5, 6, 2)], 0), ("the next prompt", [position(7, 0.5, 8, 2)], 3)]


def _run(change: Callable[[bytes], bytes]) -> Callable[[Scratch], list[str]]:
    """A grid run of passes on1 and off1 (the same prompts), the second record of off1 changed by `change`."""
    def make(scratch: Scratch) -> list[str]:
        passes = {p: {"arm": arm, "order": ["e0"], "episodes": {"e0": EPISODE}} for p, arm in (("on1", "on"),
                                                                                               ("off1", "off"))}
        run = write_grid_like(scratch.inbox / "run", passes)
        records = Path(run / "records" / "off1.jsonl")
        lines = records.read_bytes().split(b"\n")
        changed = change(lines[1])
        if changed == lines[1]:
            raise AssertionError("the change did not apply")
        records.write_bytes(b"\n".join([lines[0], changed, *lines[2:]]))
        return ["analyze", str(run), "--out", str(scratch.outputs / "analysis"), "--no-figures"]
    return make


CASES = [
    Case(cls="run folder", name="a prompt claiming the digest another pass proved for its own prompt",
         make=_run(lambda line: line.replace(b'"prompt":"the next prompt"', b'"prompt":"the next Prompt"')),
         needle="is not the sha256 of the prompt"),
    Case(cls="run folder", name="a byte that is not UTF-8 in a field analysis does not read",
         make=_run(lambda line: line.replace(b'"endpoint":"/completion"', b'"endpoint":"/compl\xffetion"')),
         needle="is not a valid record"),
    Case(cls="run folder", name="a record's seq of another type than the view reads",
         make=_run(lambda line: line.replace(b'"seq":1', b'"seq":"1"')),
         needle="has seq '1'"),
]
