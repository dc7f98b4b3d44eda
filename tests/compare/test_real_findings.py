"""`kit compare` on findings.json that `kit analyze` really wrote: the CPU demo run of SmolLM2-135M
and the tiny grid (fixtures), and small grid and sweep folders of a Qwen-named model analysed here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.analysis.findings import compute
from kit.compare.published import load_reference
from kit.analysis.findings_model import from_json
from kit.compare.verdicts import compare
from tests.analysis.test_analyze_synthetic import FAST, grid_like

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "records_v1" / "findings"


@pytest.fixture(scope="module")
def reference():
    return load_reference()


def test_the_cpu_demo_run_is_not_comparable_naming_the_model(reference):
    findings = from_json(json.loads((FIXTURES / "demo-20261201-070851.json").read_text()))
    comparison = compare(findings, reference)
    assert {line.table for line in comparison.lines} == {"Table IV", "Table VII"}
    for line in comparison.lines:
        assert line.verdict_kind == "not comparable"
        assert line.verdict.startswith("not comparable: SmolLM2-135M vs Qwen2.5-7B"), line.verdict
        assert "Q4_1 vs" in line.verdict
    assert comparison.counts()["consistent"] == 0
    absent = {a["table"]: a["reason"] for a in comparison.absent}
    assert absent["Table III"] == "no grid runs with two cache-on passes among the inputs"


def test_the_tiny_grid_fixture_is_not_comparable(reference):
    findings = from_json(json.loads((FIXTURES / "grid-tiny-20261201-070919.json").read_text()))
    comparison = compare(findings, reference)
    assert [line.table for line in comparison.lines] == ["Table III", "Table V"]
    assert all("SmolLM2-135M vs Qwen2.5-7B" in line.verdict for line in comparison.lines)


def test_the_pinning_fixture_has_nothing_to_compare(reference):
    comparison = compare(from_json(json.loads((FIXTURES / "pinning-tiny-20261201-071511.json").read_text())),
                         reference)
    assert comparison.lines == [] and len(comparison.absent) == len(reference.sections)


@pytest.fixture(scope="module")
def qwen_findings(tmp_path_factory):
    """Eight-episode grid and sweep folders named as the paper's Qwen2.5-7B files: the paper's model, a tenth
    of its episodes."""
    root = tmp_path_factory.mktemp("qwen")
    sweep = {("F16", 0): {"e0"}, ("F16", 1): {"e0", "e1"}, ("F16", 2): {"e1"}, ("Q4_K_M", 0): {"e0", "e1", "e2"},
             ("Q4_K_M", 1): {"e0", "e2", "e3", "e5"}, ("Q4_K_M", 2): {"e0", "e1", "e4", "e7"}}
    for (fmt, h), units in sweep.items():
        grid_like(root / "sweep" / f"sweep-{fmt}-h{h}", {"on1": units, "off1": set()}, ["on", "off"], 5,
                  sweep={"format": fmt, "history": h}, model_name=f"qwen2.5-7b-instruct-{fmt.lower()}", cache_ram=0)
    grid_like(root / "grid" / "grid-q4", {"on1": {"e1", "e4", "e6", "e7"}, "off1": set(), "on2": {"e1", "e6"},
                                          "off2": set()}, ["on", "off", "on", "off"], 1,
              model_name="qwen2.5-7b-instruct-q4_k_m")
    return compute([root / "sweep", root / "grid"], FAST)


def test_a_tenth_of_the_papers_episodes_is_underpowered(reference, qwen_findings):
    comparison = compare(qwen_findings, reference)
    table_v = [line for line in comparison.lines if line.table == "Table V"]
    assert {line.row for line in table_v} == {"llama.cpp Qwen2.5-7B Q4_K_M"} and len(table_v) == 3
    assert all(line.verdict == "underpowered (n=8 episodes vs the paper's 80)" for line in table_v)
    table_iii = [line for line in comparison.lines if line.table == "Table III"]
    assert [line.row for line in table_iii] == ["prompt cache default, a cache-off pass in between"]
    means = [line for line in comparison.lines if line.table == "Table VI" and line.quantity.startswith("mean")]
    assert {line.row for line in means} == {"F16", "Q4_K_M"}
    assert all(line.verdict == "underpowered (n=8 episodes vs the paper's 80; n=2 histories vs the paper's 10)"
               for line in means)
    trend = [line for line in comparison.lines if line.table == "Table VI (trend)"]
    assert [line.verdict for line in trend] == ["not comparable: F16+Q4_K_M vs F16+Q8_0+Q4_K_M+Q3_K_M"]
    assert comparison.counts()["consistent"] == 0
