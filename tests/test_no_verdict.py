"""A run that measured nothing does not pass for one that did: a finished run or `kit check` with no OK pass
exits with NoVerdict's own code (4), its last line saying why; a run with a verdict still exits 0. Inputs
that cannot give one are refused in one line before anything is written: `kit check` of a URL where nothing
listens, `kit import … --report` of a report holding none of the values the kit compares."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from kit.core.errors import EngineError, KitError, NoVerdict, RunInterrupted
from tests.adversarial.hostile_engine import HostileEngine
from tests.bundle.kit_cli import run_here

REPO = Path(__file__).resolve().parents[1]
SMALL_DEMO = ["--items", "1", "--sessions", "2", "--max-tokens", "4", "--request-deadline", "5"]


def test_the_no_verdict_code_is_its_own():
    codes = {KitError.exit_code, EngineError.exit_code, RunInterrupted.exit_code, 1, 0}
    assert NoVerdict.exit_code not in codes and NoVerdict.exit_code == 4


@pytest.mark.parametrize("scenario, code", [("no-content", NoVerdict.exit_code), ("markup-build", 0)])
def test_a_run_exits_non_zero_exactly_when_no_pass_is_ok(scenario, code, tmp_path):
    engine = HostileEngine(scenario)
    try:
        done = run_here("run", "demo", "--engine-url", engine.url, *SMALL_DEMO, "--out", str(tmp_path))
    finally:
        engine.stop()
    [manifest] = [json.loads(p.read_text()) for p in tmp_path.glob("*/manifest.json")]
    assert manifest["status"] == "finished"
    statuses = {info["status"] for info in manifest["passes"].values()}
    assert done.returncode == code, done.stdout + done.stderr
    last = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()][-1]
    if code:
        assert statuses == {"VOID"}
        assert last.startswith("kit: error: no verdict: every pass was VOID (s1: during session s1 ")
        assert "; s2: during session s2 " in last and "without `content`" in last
        assert last.endswith("(exit 4: no verdict)")
    else:
        assert statuses == {"OK"} and "no verdict" not in done.stdout + done.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_check_of_a_url_where_nothing_listens_is_refused_before_anything_is_written(tmp_path):
    port = _free_port()
    done = run_here("check", f"http://127.0.0.1:{port}", "--kind", "llamacpp", "--out", str(tmp_path))
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"kit: error: URL http://127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}")
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("report, needle", [
    ({"foo": 1}, "holds none of the values the kit compares (top-level keys boxes, totals, "
                 "cache_state_decomposition, cells; it has foo)"),
    ({}, "holds none of the values the kit compares"),
    ({"boxes": 5}, "`boxes` is 5, not an object"),
    ({"totals": [], "study": "x"}, "`totals` is [], not an object"),
])
def test_an_imported_report_without_the_compared_values_is_refused_in_one_line(report, needle, tmp_path):
    inbox, out = tmp_path / "inbox", tmp_path / "out"
    inbox.mkdir()
    out.mkdir()
    for path in (REPO / "tests" / "fixtures" / "harness").glob("fixture-churn-ab.*"):
        (inbox / path.name).write_bytes(path.read_bytes())
    (inbox / "report.json").write_text(json.dumps(report))
    done = run_here("import", "determinism-harness", str(inbox / "fixture-churn-ab.jsonl"),
                    "--report", str(inbox / "report.json"), "--out", str(out))
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    assert done.returncode == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"kit: error: --report {inbox / 'report.json'}") and needle in lines[0]
    assert not any(out.iterdir())


def test_a_report_of_no_compared_block_compares_nothing_rather_than_itself():
    """A stranger's run folder can hold such a report (import refuses it): the comparison is empty, not a
    table that holds itself (which failed as 'Circular reference detected')."""
    from kit.protocols.harness.report import compare
    from kit.protocols.harness.table import HarnessStudy

    table = HarnessStudy.model_construct(boxes={}, not_computed={})
    compared = compare(table, {"study": "x"}).to_json()
    assert compared["rows"] == [] and compared["compared"] == 0 and compared["descriptive"] == ["study"]
    json.dumps(compared)
