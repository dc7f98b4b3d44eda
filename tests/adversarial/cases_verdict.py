"""Findings that `kit compare` judges the paper's qualitative claims on, shaped to pass the findings model
but not the claims' counts: refused in one line naming the field, before any compare file is written."""

from __future__ import annotations

import json

from tests.adversarial.corpus import Case, Ending, Scratch
from tests.compare import synthetic as syn


def _findings_with(scratch: Scratch, **row_changes: object) -> list[str]:
    row = {**syn.table_iv_row("Q4_K_M", [3, 3]), **row_changes}
    folder = scratch.inbox / "analysis"
    folder.mkdir()
    findings = syn.findings([syn.run_entry(row["run"], "reset", "Q4_K_M")], {"IV": [row]})
    (folder / "findings.json").write_text(json.dumps(findings))
    return ["compare", str(folder)]


def _nothing_written(scratch: Scratch, ending: Ending) -> str | None:
    written = sorted(p.name for p in (scratch.inbox / "analysis").iterdir() if p.name != "findings.json")
    return f"wrote {', '.join(written)} before refusing" if written else None


CASES = [
    Case(cls="run folder", name="findings whose cache-attributable count is negative",
         make=lambda s: _findings_with(s, cache_caused=[-1, 3]), needle="cache_caused", check=_nothing_written),
    Case(cls="run folder", name="findings with fewer cache-attributable counts than sessions",
         make=lambda s: _findings_with(s, cache_caused=[3]), needle="lists of different lengths", check=_nothing_written),
]
