"""The lines a finished run ends with (`kit demo`, `kit run`): the caveat under correct counts that answers cut
short cannot score, and whether the paper's qualitative findings hold on the run, read from its own files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from kit.app.console import qualitative_lines
from kit.protocols.reset.results import ResetResults
from kit.protocols.reset.view import cut_answers_note

DEMO = Path(__file__).resolve().parent.parent / "fixtures" / "records_v1" / "demo-20261201-070851"


def table(folder: Path) -> dict:
    return json.loads((folder / "results" / "reset_table.json").read_text())


def test_answers_cut_short_come_with_a_three_line_caveat_counted_from_the_records():
    lines = cut_answers_note(DEMO, ResetResults.of(table(DEMO))).splitlines()
    assert len(lines) == 3
    assert lines[0] == ("correctness: answers cut at 8 tokens before any final answer ('#### n') count as wrong: "
                        "4 of 4 in s1, 4 of 4 in s2 (recompute and cache-hit answers scored);")
    assert lines[1].startswith("so the correct counts above do not measure the model's accuracy")
    assert lines[2] == "the divergence counts do not depend on it; more tokens (e.g. --max-tokens 32) give the answers room"


def test_the_run_ends_saying_whether_the_paper_s_findings_hold(tmp_path):
    lines = qualitative_lines(DEMO, table(DEMO))
    assert lines[-1] == "qualitative: the paper's findings hold on this run (4 claims measured: Table IV 4/4)"
    assert lines[0].startswith("the paper's findings on this run (judged whatever the model or scale")
    assert lines[1] == ("Table IV, each path reproduces itself: holds (this run: recompute s1 2/2, s2 2/2, "
                        "cache hit s1 2/2, s2 2/2)")
    broken = table(DEMO)
    broken["sessions"][0]["recompute_reproduces"] = 1  # cold != cold2 on one item of s1
    lines = qualitative_lines(DEMO, broken)
    assert lines[1].startswith("Table IV, each path reproduces itself: does not hold (this run: recompute s1 1/2")
    assert "does not hold: IV/each-path-reproduces" in lines[-1]


def test_an_analysed_run_is_judged_on_its_findings_and_an_odd_findings_file_is_said_so(tmp_path):
    run = tmp_path / DEMO.name
    shutil.copytree(DEMO, run, ignore=shutil.ignore_patterns("records", "logs"))
    (run / "analysis").mkdir()
    shutil.copy(DEMO.parent / "findings" / f"{DEMO.name}.json", run / "analysis" / "findings.json")
    assert qualitative_lines(run, table(run))[-1].endswith("(6 claims measured: Table IV 4/4, Table VII 2/2)")
    (run / "analysis" / "findings.json").write_text(json.dumps({"schema": "kit.findings/1", "runs": 3}))
    assert qualitative_lines(run, table(run))[0].startswith("qualitative: not judged (analysis/findings.json: ")


def test_a_kind_the_claims_do_not_read_ends_with_no_qualitative_line():
    assert qualitative_lines(DEMO, {"table": "pinning"}) == []
