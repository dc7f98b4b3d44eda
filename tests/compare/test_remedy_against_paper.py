"""`kit compare` of a remedy run: each fixed arm held against the paper's unfixed values per table, closed or
not closed, from the remedy tables `kit analyze` keeps in findings.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.analysis.findings_model import Findings
from kit.compare.published import load_reference
from kit.compare.remedy import CLOSED, NOT_CLOSED, NOT_MEASURED, NOTHING, judge, paper_floor, remedy_lines
from kit.protocols import kinds
from kit.protocols.results_model import Interval, NotResults
from kit.stats.intervals import wilson_interval
from tests.compare.test_cli import kit
from tests.protocols.test_remedy_results import write_remedy_run


def _interval(k: int, n: int) -> Interval:
    lo, hi = wilson_interval(k, n)
    return Interval(k=k, n=n, rate=k / n, lo=lo, hi=hi)


def test_the_paper_s_smallest_unfixed_rate_per_table():
    reference = load_reference("paper")
    assert paper_floor(reference, "V") == pytest.approx((29 / 80, "Qwen2.5-7B F16"))  # Table V, llama.cpp rows
    assert paper_floor(reference, "IV")[0] == pytest.approx(2 / 100)
    assert paper_floor(reference, "VII")[0] == pytest.approx(1 / 200)  # a row reading 0/200 is not the floor


@pytest.mark.parametrize(("k", "n", "verdict"), [(0, 100, CLOSED), (0, 4, NOT_CLOSED), (1, 100, NOT_CLOSED)])
def test_closed_only_when_zero_and_its_interval_is_below_the_paper(k, n, verdict):
    found, why = judge(_interval(k, n), (29 / 80, "Qwen2.5-7B F16"))
    assert found == verdict, why
    assert ("too few to tell" in why) == (verdict == NOT_CLOSED and k == 0)


def test_nothing_to_close_or_not_measured():
    assert judge(_interval(0, 10), None)[0] == NOTHING
    assert judge(None, (0.3, "x"))[0] == NOT_MEASURED and judge(Interval(k=0, n=0), (0.3, "x"))[0] == NOT_MEASURED


def test_every_fixed_arm_on_every_measured_table(tmp_path):
    folder = write_remedy_run(tmp_path / "remedy-run")
    table = kinds.KINDS["remedy"].analysis.table(folder)
    findings = Findings.model_construct(kinds={"remedy": [{"run": "remedy-run", **table}]})
    lines = remedy_lines(findings, load_reference("paper"), "findings.json")
    assert [(line.table, line.arm) for line in lines] == [(f"Table {t}", arm) for t in ("IV", "VII", "V")
                                                           for arm in ("fix-a", "fix-b")]
    by = {(line.table, line.arm): line for line in lines}
    assert by[("Table IV", "fix-b")].verdict == NOT_CLOSED and by[("Table IV", "fix-b")].why == "it still diverges"
    assert by[("Table V", "fix-a")].verdict == NOT_CLOSED  # 0/1: far too few against the paper's 36.2%
    assert by[("Table V", "fix-a")].paper == "36.2% (Qwen2.5-7B F16)"
    table["arms"][1]["divergence"]["V"]["k"] = "0"
    broken = Findings.model_construct(kinds={"remedy": [table]})
    with pytest.raises(NotResults, match="arms.1.divergence.V.k"):
        remedy_lines(broken, load_reference("paper"), "findings.json")


def test_kit_compare_prints_the_remedy_verdicts(tmp_path):
    folder = write_remedy_run(tmp_path / "remedy-run")
    analyzed = kit("analyze", folder, "--no-figures")
    assert analyzed.returncode == 0, analyzed.stderr
    assert json.loads((folder / "analysis/findings.json").read_text())["kinds"]["remedy"][0]["run"] == "remedy-run"
    result = kit("compare", folder)
    assert result.returncode == 0, result.stderr
    assert "each fix held against the paper's unfixed values" in result.stdout
    rows = [line for line in result.stdout.splitlines() if "Table IV" in line and "fix-b" in line]
    assert len(rows) == 1 and "not closed" in rows[0] and "it still diverges" in rows[0]


def test_a_remedy_table_laid_out_otherwise_is_refused_in_one_line(tmp_path):
    folder = write_remedy_run(tmp_path / "remedy-run")
    assert kit("analyze", folder, "--no-figures").returncode == 0
    path: Path = folder / "analysis/findings.json"
    data = json.loads(path.read_text())
    data["kinds"]["remedy"][0]["arms"] = "none"
    path.write_text(json.dumps(data))
    result = kit("compare", folder)
    assert result.returncode != 0 and result.stderr.startswith("kit: error: ") and "Traceback" not in result.stderr
    assert "kinds.remedy" in result.stderr and "arms" in result.stderr
