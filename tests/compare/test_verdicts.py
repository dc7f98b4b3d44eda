"""Verdicts on synthetic findings at the paper's scale and below it: consistent, inconsistent,
underpowered, not comparable (saying what differs), and the rules for slopes, odds ratios and p-values."""

from __future__ import annotations

import pytest

from kit.compare.measures import Measured
from kit.compare.published import PublishedValue, load_reference
from kit.analysis.findings_model import from_json
from kit.compare.verdicts import compare as compare_findings
from kit.compare.verdicts import rule_outcome
from tests.compare import synthetic as syn


def compare(found: dict, reference):
    """The comparison `kit compare` makes of `found` written as findings.json and read back (its model)."""
    return compare_findings(from_json(found), reference)


@pytest.fixture(scope="module")
def reference():
    return load_reference()


def lines_of(comparison, table, row=None, quantity=None):
    return [line for line in comparison.lines if line.table == table and (row is None or line.row == row)
            and (quantity is None or line.quantity == quantity)]


def only(comparison, table, row, quantity):
    found = lines_of(comparison, table, row, quantity)
    assert len(found) == 1, [(x.row, x.quantity) for x in comparison.lines]
    return found[0]


def grid_findings(*configs):
    runs, grid, rows = zip(*configs)
    return syn.findings(list(runs), {"V": list(rows)}, grid=list(grid))


def test_table_v_at_the_papers_scale_consistent_and_inconsistent(reference):
    # Q4_K_M: paper path 75.0, cache-on rerun 77.5; F16: path 36.2, rerun 20.0
    found = grid_findings(syn.grid_run("Q4_K_M", path_k=60, on_k=62), syn.grid_run("F16", path_k=60, on_k=16))
    comparison = compare(found, reference)
    q4 = only(comparison, "Table V", "llama.cpp Qwen2.5-7B Q4_K_M", "path divergence")
    assert q4.verdict == "consistent" and "inside this run's 95% interval" in q4.rule
    assert q4.this_run.startswith("60/80 = 75.0% [") and q4.published == "60/80 = 75.0% [64.5, 83.8]"
    f16 = only(comparison, "Table V", "llama.cpp Qwen2.5-7B F16", "path divergence")
    assert f16.verdict == "inconsistent"  # 60/80 is far above the paper's 36.2%
    assert only(comparison, "Table V", "llama.cpp Qwen2.5-7B F16", "run-to-run divergence, cache on").verdict \
        == "consistent"
    assert only(comparison, "Table V", "llama.cpp Qwen2.5-7B F16", "run-to-run divergence, cache off").verdict \
        == "consistent"
    assert comparison.counts()["inconsistent"] == 1
    absent = next(a for a in comparison.absent if a["table"] == "Table V")
    assert "llama.cpp Qwen2.5-7B Q8_0" in absent["rows"] and "llama.cpp Qwen2.5-7B F16" not in absent["rows"]


def test_a_cache_off_divergence_is_inconsistent_with_the_papers_zero(reference):
    comparison = compare(grid_findings(syn.grid_run("Q4_K_M", path_k=60, on_k=62, off_k=3)), reference)
    line = only(comparison, "Table V", "llama.cpp Qwen2.5-7B Q4_K_M", "run-to-run divergence, cache off")
    assert line.verdict == "inconsistent" and line.published == "0/80 = 0.0%"


def test_a_smaller_run_is_underpowered_never_consistent(reference):
    comparison = compare(grid_findings(syn.grid_run("Q4_K_M", path_k=15, on_k=15, n=20)), reference)
    line = only(comparison, "Table V", "llama.cpp Qwen2.5-7B Q4_K_M", "path divergence")
    assert line.verdict == "underpowered (n=20 episodes vs the paper's 80)"
    assert line.verdict_kind == "underpowered" and "would read consistent" in line.note  # 75% inside a wide CI
    assert not any(x.verdict_kind == "consistent" for x in comparison.lines)


def test_a_different_model_is_not_comparable_and_says_which(reference):
    comparison = compare(grid_findings(syn.grid_run("Q4_1", path_k=4, on_k=1, n=6, model="smollm2-135m-instruct")),
                         reference)
    (line,) = lines_of(comparison, "Table V")
    assert line.verdict.startswith("not comparable: SmolLM2-135M vs Qwen2.5-7B/Llama-3.1-8B/Qwen2.5-14B")
    assert "Q4_1 vs" in line.verdict and line.verdict_kind == "not comparable"


def test_a_different_engine_or_setting_is_not_comparable(reference):
    comparison = compare(grid_findings(
        syn.grid_run("F16", path_k=29, on_k=16, engine="vLLM"),
        syn.grid_run("Q8_0", path_k=49, on_k=44, prompt_cache="disabled"),
        syn.grid_run("Q3_K_M", path_k=62, on_k=54, passes=("on", "on", "off", "off"))), reference)
    assert "vLLM vs llama.cpp" in lines_of(comparison, "Table V")[0].verdict
    q8 = lines_of(comparison, "Table V", "this run: Qwen2.5-7B llama.cpp Q8_0")
    assert q8 and q8[0].verdict == "not comparable: prompt cache disabled vs default"
    # pass order matters only for the cache-on rerun: path divergence is still compared
    row = "llama.cpp Qwen2.5-7B Q3_K_M"
    assert only(comparison, "Table V", row, "path divergence").verdict == "consistent"
    assert only(comparison, "Table V", row, "run-to-run divergence, cache on").verdict == \
        "not comparable: pass order adjacent vs cache-off pass in between"


def test_vllm_checkpoints_compare_as_bf16(reference):
    comparison = compare(grid_findings(syn.grid_run("unknown", path_k=50, on_k=7, engine="vLLM",
                                                    passes=("on", "on", "off", "off"))), reference)
    line = only(comparison, "Table V", "vLLM Qwen2.5-7B BF16", "run-to-run divergence, cache on")
    assert line.verdict == "consistent" and "format read as BF16" in line.note


def test_table_iii_cells_by_prompt_cache_and_order(reference):
    rows = [syn.table_iii_row(31, order="adjacent"), syn.table_iii_row(30, order="cache-off pass in between"),
            syn.table_iii_row(1, prompt_cache="disabled", order="adjacent"),
            syn.table_iii_row(2, prompt_cache="4096 MiB", order="adjacent")]
    comparison = compare(syn.findings([], {"III": rows}), reference)
    verdicts = [line.verdict for line in lines_of(comparison, "Table III")]
    assert verdicts == ["consistent", "inconsistent", "consistent",
                        "not comparable: prompt cache 4096 MiB vs default/disabled"]
    assert [a["rows"] for a in comparison.absent if a["table"] == "Table III"] == [
        ["prompt cache disabled, a cache-off pass in between"]]


def test_table_iv_every_session_must_hold_the_published_count(reference):
    rows = [syn.table_iv_row("Q8_0", [43, 43, 43]), syn.table_iv_row("Q3_K_M", [60, 60, 30]),
            syn.table_iv_row("F16", [2, 2, 2], reproduces=97), syn.table_iv_row("Q4_K_M", [43, 43])]
    runs = [syn.run_entry(r["run"], "reset", r["format"]) for r in rows]
    vii = [{**syn.table_vii_row(r["format"], 100, 40, 1, 90, 91, 1.0), "run": r["run"]} for r in rows]
    comparison = compare(syn.findings(runs, {"IV": rows, "VII": vii}), reference)
    q8 = only(comparison, "Table IV", "Q8_0", "paths differ (per session)")
    assert q8.verdict == "consistent" and q8.this_run.startswith("43/43/43 of 100 [") and "every session" in q8.rule
    assert only(comparison, "Table IV", "Q3_K_M", "paths differ (per session)").verdict == "inconsistent"
    assert only(comparison, "Table IV", "F16", "recompute path reproduces (per session)").verdict == "inconsistent"
    assert only(comparison, "Table IV", "F16", "cache-hit path reproduces (per session)").verdict == "consistent"
    short = only(comparison, "Table IV", "Q4_K_M", "paths differ (per session)")
    assert short.verdict == "underpowered (n=2 sessions vs the paper's 3)"


def test_table_iv_on_generated_arithmetic_is_not_the_papers_gsm8k(reference):
    row = syn.table_iv_row("Q8_0", [43, 43, 43])
    vii = {**syn.table_vii_row("Q8_0", 100, 43, 0, 90, 90, 1.0, source="arithmetic"), "run": row["run"]}
    comparison = compare(syn.findings([syn.run_entry(row["run"], "reset", "Q8_0")], {"IV": [row], "VII": [vii]}),
                         reference)
    assert lines_of(comparison, "Table IV")[0].verdict == "not comparable: workload arithmetic vs gsm8k"


def test_table_vii_picks_the_row_of_its_size(reference):
    rows = [syn.table_vii_row("Q4_K_M", 500, 227, 12, 453, 459, 0.146),
            syn.table_vii_row("Q4_K_M", 200, 83, 4, 180, 180, 1.0),
            syn.table_vii_row("Q8_0", 100, 45, 2, 92, 91, 1.0)]
    runs = [syn.run_entry(r["run"], "reset", r["format"]) for r in rows]
    comparison = compare(syn.findings(runs, {"VII": rows}), reference)
    big = lines_of(comparison, "Table VII", "Qwen2.5-7B Q4_K_M, 500 items")
    assert {line.run for line in big} == {"bridge-Q4_K_M-500"} and all(x.verdict == "consistent" for x in big)
    assert {line.run for line in lines_of(comparison, "Table VII", "Qwen2.5-7B Q4_K_M, 200 items")} == {
        "bridge-Q4_K_M-200"}
    small = only(comparison, "Table VII", "Qwen2.5-7B Q8_0, 200 items", "cache-attributable path divergence")
    assert small.verdict == "underpowered (n=100 items vs the paper's 200)"
    p = only(comparison, "Table VII", "Qwen2.5-7B Q4_K_M, 500 items", "exact McNemar p")
    assert p.verdict == "consistent" and "both significant or both not at 0.05" in p.rule


def paper_sweep(**kw):
    runs, rows, sweep = syn.sweep({"F16": (0.38, 0.28, 0.48, 32), "Q8_0": (0.60, 0.50, 0.70, 48),
                                   "Q4_K_M": (0.83, 0.75, 0.90, 65), "Q3_K_M": (0.62, 0.55, 0.70, 62)}, **kw)
    return syn.findings(runs, {"VI": rows}, sweep=sweep)


def test_table_vi_means_differences_and_trend(reference):
    comparison = compare(paper_sweep(), reference)
    assert only(comparison, "Table VI", "Q8_0", "mean path divergence over random histories").verdict == "consistent"
    assert only(comparison, "Table VI", "Q3_K_M", "mean path divergence over random histories").verdict == \
        "inconsistent"  # 77.1 lies above [55, 70]
    diff = only(comparison, "Table VI", "Q4_K_M", "paired difference from F16, points")
    assert diff.verdict == "consistent" and diff.published == "+45.1 points [+34.9, +55.6]"
    assert only(comparison, "Table VI", "Q3_K_M", "paired difference from F16, points").verdict == "inconsistent"
    assert only(comparison, "Table VI", "F16", "canonical history path divergence").verdict == "consistent"
    trend = "path divergence over formats (replicated sweep)"
    ratio = only(comparison, "Table VI (trend)", f"Qwen2.5-7B {trend}",
                 "history-averaged random-intercept odds ratio per format step")
    assert ratio.verdict == "consistent" and "same side of 1 and the 95% intervals overlap" in ratio.rule
    assert only(comparison, "Table VI (trend)", f"Qwen2.5-7B {trend}", "rate slope, points per format step").verdict \
        == "consistent"
    assert only(comparison, "Table VI (trend)", f"Qwen2.5-7B {trend}",
                "exact within-episode permutation test p").verdict == "consistent"


def test_a_sweep_of_fewer_histories_is_underpowered(reference):
    comparison = compare(paper_sweep(histories=3), reference)
    mean = only(comparison, "Table VI", "Q8_0", "mean path divergence over random histories")
    assert mean.verdict == "underpowered (n=3 histories vs the paper's 10)"
    # the canonical history is one pass of 80 episodes: the number of random histories does not matter to it
    assert only(comparison, "Table VI", "Q8_0", "canonical history path divergence").verdict == "consistent"


def test_a_trend_with_the_opposite_sign_or_no_significance_is_inconsistent(reference):
    comparison = compare(paper_sweep(odds_ratio=(0.7, 0.5, 0.95), slope=(-0.05, -0.09, -0.01), p=0.3), reference)
    trend = [line for line in comparison.lines if line.table == "Table VI (trend)"]
    assert [line.verdict for line in trend] == ["inconsistent"] * 3


def pv(kind, value, lo=None, hi=None, alternative=None):
    return PublishedValue(quantity="x", kind=kind, value=value, lo=lo, hi=hi, alternative=alternative)


@pytest.mark.parametrize("run, agrees", [
    (Measured(2.0, 1.5, 2.6), True),     # same side of 1, intervals overlap
    (Measured(5.0, 3.5, 7.0), False),    # no overlap with [1.73, 3.08]
    (Measured(0.8, 0.6, 0.95), False),   # the other side of 1
    (Measured(1.2, 0.9, 1.8), True),     # overlaps and above 1, though its interval holds 1
])
def test_odds_ratio_rule(run, agrees):
    assert rule_outcome(pv("odds_ratio", 2.31, 1.73, 3.08), run)[0] is agrees


@pytest.mark.parametrize("run, agrees", [
    (Measured(12.0, 8.0, 16.0), True), (Measured(-3.0, -6.0, 0.5), False), (Measured(30.0, 25.0, 35.0), False),
])
def test_slope_rule(run, agrees):
    assert rule_outcome(pv("slope", 13.8, 9.4, 18.0), run)[0] is agrees


def test_slope_without_a_finite_bound_cannot_be_judged():
    agrees, _, why = rule_outcome(pv("odds_ratio", 2.31, 1.73, 3.08), Measured(900.0, 5.0, None))
    assert agrees is None and "no finite bound" in why


@pytest.mark.parametrize("published, run, alternative, agrees", [
    (1.3e-10, 1e-4, "two-sided", True), (1.3e-10, 0.2, "two-sided", False), (0.625, 0.3, "two-sided", True),
    (0.146, 0.01, "two-sided", False), (1.3e-10, 1e-4, "greater", None),
])
def test_p_value_rule(published, run, alternative, agrees):
    outcome = rule_outcome(pv("p_value", published, alternative="two-sided"),
                           Measured(run, alternative=alternative))
    assert outcome[0] is agrees
