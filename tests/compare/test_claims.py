"""The paper's qualitative claims (kit/compare/claims.yaml) judged on a run's findings: held, not held,
inconclusive and not measured, from the demo's real findings and from findings crafted to break each claim."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.analysis.findings_model import from_json
from kit.compare import claims
from kit.compare.evidence import from_findings, from_reset_table
from kit.compare.run_rows import FindingsShape
from kit.core.errors import ConfigError
from tests.compare import synthetic as syn

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "records_v1"
DEMO = "demo-20261201-070851"


def verdicts(found: dict) -> dict[str, str]:
    return {j.claim.id: j.judgement.verdict for j in claims.judge(from_findings(from_json(found)))}


def judged(found: dict) -> dict[str, claims.Judged]:
    return {j.claim.id: j for j in claims.judge(from_findings(from_json(found)))}


def reset_findings(row: dict) -> dict:
    return syn.findings([syn.run_entry(row["run"], "reset", row["format"])], {"IV": [row]})


def test_the_demo_findings_hold_every_claim_they_measure_and_say_which_are_not_measured():
    found = json.loads((FIXTURES / "findings" / f"{DEMO}.json").read_text())
    result = claims.judge(from_findings(from_json(found)))
    measured = {j.claim.id: j.judgement.verdict for j in result if j.judgement.verdict != "not measured"}
    assert measured == {"IV/each-path-reproduces": "holds", "IV/paths-differ": "holds",
                        "IV/difference-is-the-cache-state": "holds", "IV/same-in-every-session": "holds",
                        "VII/paths-deterministic": "holds", "VII/paths-differ": "holds"}
    assert claims.summary_line(result) == ("qualitative: the paper's findings hold on this run (6 claims measured: "
                                           "Table IV 4/4, Table VII 2/2)")
    assert claims.not_measured_tables(result) == ["Table III", "Table V", "Table VI"]
    flips = next(j for j in result if j.claim.id == "VII/no-net-accuracy-change")
    assert flips.judgement.verdict == "not measured" and "0 flips" in flips.judgement.counts


def test_the_run_s_own_results_table_gives_the_same_table_iv_verdicts_as_its_findings():
    table = json.loads((FIXTURES / DEMO / "results" / "reset_table.json").read_text())
    from_results = {j.claim.id: (j.judgement.verdict, j.judgement.counts)
                    for j in claims.judge(from_reset_table(table, "SmolLM2-135M Q4_1")) if j.claim.table == "IV"}
    found = json.loads((FIXTURES / "findings" / f"{DEMO}.json").read_text())
    from_analysis = {j.claim.id: (j.judgement.verdict, j.judgement.counts)
                     for j in claims.judge(from_findings(from_json(found))) if j.claim.table == "IV"}
    assert from_results == from_analysis
    assert all(verdict == "holds" for verdict, _ in from_results.values())


def test_a_path_that_does_not_reproduce_itself_breaks_the_claim_and_is_named_in_the_summary():
    row = syn.table_iv_row("Q4_K_M", [43, 43, 43], reproduces=98)  # cold != cold2 on 2 items of every session
    found = judged(reset_findings(row))
    assert found["IV/each-path-reproduces"].judgement.verdict == "does not hold"
    assert "recompute s1 98/100, s2 98/100, s3 98/100" in found["IV/each-path-reproduces"].judgement.counts
    assert found["IV/paths-differ"].judgement.verdict == "holds"
    assert found["IV/same-in-every-session"].judgement.verdict == "does not hold"
    # findings without per-session cache-attributable counts cannot tell where the 43 differences fell
    assert found["IV/difference-is-the-cache-state"].judgement.verdict == "not measured"
    line = claims.summary_line(list(found.values()))
    assert line.startswith("qualitative: 1 of the paper's 3 measured findings hold on this run (3 claims measured: "
                           "Table IV 1/3)")
    assert "does not hold: IV/each-path-reproduces (each path reproduces itself); IV/same-in-every-session" in line


def test_differences_on_items_that_did_not_reproduce_are_not_the_cache_state_s():
    row = syn.table_iv_row("Q4_K_M", [5, 5], reproduces=97)
    row["cache_caused"] = [3, 5]  # s1: two of its five differences fell on items whose recompute path wavered
    found = judged(reset_findings(row))
    assert found["IV/difference-is-the-cache-state"].judgement.verdict == "does not hold"
    assert "s1 3 of 5 differing, s2 5 of 5 differing" in found["IV/difference-is-the-cache-state"].judgement.counts
    row["cache_caused"] = [5, 5]
    assert verdicts(reset_findings(row))["IV/difference-is-the-cache-state"] == "holds"


def test_paths_that_never_differ_break_the_difference_and_leave_its_cause_unmeasured():
    found = judged(reset_findings(syn.table_iv_row("F16", [0, 0, 0])))
    assert found["IV/each-path-reproduces"].judgement.verdict == "holds"
    assert found["IV/paths-differ"].judgement.verdict == "does not hold"
    cause = found["IV/difference-is-the-cache-state"].judgement
    assert cause.verdict == "not measured" and "no difference to attribute" in cause.counts
    assert found["IV/difference-is-the-cache-state"].to_json()["verdict"] == "not measured"


def test_table_iii_at_the_paper_s_counts_holds_and_a_reversed_flag_does_not():
    rows = [syn.table_iii_row(31, prompt_cache="default", order="adjacent"),
            syn.table_iii_row(62, prompt_cache="default", order="cache-off pass in between"),
            syn.table_iii_row(1, prompt_cache="disabled", order="adjacent"),
            syn.table_iii_row(1, prompt_cache="disabled", order="cache-off pass in between")]
    found = verdicts(syn.findings([], {"III": rows}))
    assert [found[c] for c in ("III/prompt-cache-drives-reruns", "III/order-inert-without-cache",
                               "III/order-matters-with-cache")] == ["holds"] * 3
    rows[2] = syn.table_iii_row(40, prompt_cache="disabled", order="adjacent")
    found = verdicts(syn.findings([], {"III": rows}))
    assert found["III/prompt-cache-drives-reruns"] == "does not hold"
    assert found["III/order-inert-without-cache"] == "does not hold"
    assert found["III/order-matters-with-cache"] == "holds"
    assert verdicts(syn.findings([], {"III": rows[:1]}))["III/prompt-cache-drives-reruns"] == "not measured"


def test_table_v_holds_at_the_paper_s_shape_and_a_cache_off_rerun_that_diverged_breaks_it():
    configs = [syn.grid_run("Q4_K_M", path_k=60, on_k=62), syn.grid_run("F16", path_k=29, on_k=16)]
    runs, grid, rows = zip(*configs)
    found = verdicts(syn.findings(list(runs), {"V": list(rows)}, grid=list(grid)))
    assert [found[c] for c in ("V/cache-off-reproduces", "V/paths-diverge", "V/reruns-diverge-with-state")] == \
        ["holds"] * 3
    assert found["V/quantization-amplifies"] == "not measured"  # no grid trend in these findings
    broken = [syn.grid_run("Q4_K_M", path_k=0, on_k=0, off_k=1)]
    runs, grid, rows = zip(*broken)
    found = verdicts(syn.findings(list(runs), {"V": list(rows)}, grid=list(grid)))
    assert [found[c] for c in ("V/cache-off-reproduces", "V/paths-diverge", "V/reruns-diverge-with-state")] == \
        ["does not hold"] * 3


@pytest.mark.parametrize("odds_ratio, diff_shift, expected", [
    ((2.2, 1.7, 3.0), 0.0, ("holds", "holds")),
    ((1.3, 0.8, 2.0), -0.10, ("inconclusive", "inconclusive")),  # +3 points [-9, +15]; OR [0.8, 2]
    ((0.7, 0.5, 0.9), -0.30, ("does not hold", "does not hold")),
])
def test_table_vi_claims_read_the_intervals(odds_ratio, diff_shift, expected):
    runs, rows, sweep = syn.sweep({"F16": (0.37, 0.27, 0.48, 32), "Q4_K_M": (0.5 + diff_shift, 0.4, 0.6, 66)},
                                  odds_ratio=odds_ratio)
    found = verdicts(syn.findings(runs, {"VI": rows}, sweep=sweep))
    assert (found["VI/quantized-above-reference"], found["VI/quantization-amplifies"]) == expected


@pytest.mark.parametrize("flips, p, expected", [(4, 0.625, "holds"), (12, 0.0005, "does not hold"),
                                                (0, 1.0, "not measured")])
def test_the_bridge_s_no_net_change_claim_needs_a_flip_and_a_non_significant_test(flips, p, expected):
    row = syn.table_vii_row("Q4_K_M", 200, differ=83, flips=flips, correct_recompute=180, correct_hit=180, p=p)
    found = verdicts(syn.findings([syn.run_entry(row["run"], "reset", "Q4_K_M")], {"VII": [row]}))
    assert found["VII/no-net-accuracy-change"] == expected
    assert found["VII/paths-deterministic"] == "holds" and found["VII/paths-differ"] == "holds"


def test_nothing_measured_says_so():
    result = claims.judge(from_findings(from_json(syn.findings([], {}))))
    assert {j.judgement.verdict for j in result} == {"not measured"}
    assert claims.summary_line(result) == "qualitative: no finding of the paper is measured by this run"


@pytest.mark.parametrize("table, row, needle", [
    ("VII", dict(syn.table_vii_row("Q4_K_M", 100, 3, 0, 90, 90, 1.0), n=100.0), "Table VII: n is 100.0, not a count"),
    ("VII", dict(syn.table_vii_row("Q4_K_M", 100, 3, 0, 90, 90, 1.0), hit_reproduces=-1),
     "Table VII: hit_reproduces is -1, not a count"),
    ("III", {k: v for k, v in syn.table_iii_row(3).items() if k != "order"}, "Table III: a row has no order"),
    ("III", dict(syn.table_iii_row(3), k=3.0), "Table III: k is 3.0 (input should be a valid integer"),
    ("V", dict(syn.grid_run("Q4_K_M", 3, 1)[2], path_n="80"), "Table V: path_n is '80' (input should be a valid"),
])
def test_a_findings_row_of_another_shape_is_refused_in_one_line_as_kit_compare_refuses_it(table, row, needle):
    found = from_json(syn.findings([], {table: [row]}))
    with pytest.raises(FindingsShape) as raised:
        from_findings(found)
    assert str(raised.value).startswith(needle), str(raised.value)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("change, needle", [
    ({"rule": "no_such_rule"}, "is not one of"),
    ({"rule": "prompt_cache_raises_reruns"}, "reads Table III, not Table IV"),
    ({"id": "V/each-path-reproduces"}, "starts with its table"),
])
def test_a_claim_naming_an_unknown_or_foreign_rule_is_refused_on_load(tmp_path, change, needle):
    data = {"version": 1, "claims": [{"id": "IV/each-path-reproduces", "table": "IV", "statement": "s",
                                      "rule": "each_path_reproduces", "decides": "d", "source": "s", **change}]}
    path = tmp_path / "claims.yaml"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError) as raised:
        claims.load_claims(path)
    assert needle in str(raised.value)


def test_the_shipped_claims_cover_every_table_and_every_rule_once():
    shipped = claims.load_claims()
    assert {c.table for c in shipped.claims} == {"III", "IV", "V", "VI", "VII"}
    assert sorted(c.rule for c in shipped.claims) == sorted(set(c.rule for c in shipped.claims))
