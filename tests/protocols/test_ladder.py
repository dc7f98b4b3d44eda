"""The determinism ladder's arithmetic without an engine: each rung's pairing, the measures, the VOID rule
(a "hit" the engine's counters do not show is never a pass), the headline, the cache-state gates, the
design of passes and contrasts, and what a protocol file may ask for."""

from __future__ import annotations

import pytest

from kit.core.errors import ConfigError, KitError
from kit.protocols import kinds
from kit.protocols.ladder import plan
from kit.protocols.ladder.aligned import boundary
from kit.protocols.ladder.contrasts import (
    UNFIXED,
    Contrast,
    Out,
    against,
    closes,
    headline,
    logprob_gap,
    measure,
    pairs,
    rung_status,
)
from kit.protocols.ladder.protocol import gate, groups, prepare
from kit.protocols.ladder.table import ContrastRow, Cost
from kit.protocols.procedure import RunInputs


def out(*tokens: int, lps: tuple[float, ...] | None = None, ok: bool = True, wall: float = 1.0) -> Out:
    logprobs = tuple((str(t), lp) for t, lp in zip(tokens, lps if lps is not None else [-0.5] * len(tokens)))
    return Out(tuple(tokens), logprobs, ok, None if ok else "hit: 0 cached tokens", 0, wall, len(tokens))


L0 = Contrast("L0", "repeat", ("base", "miss", 0), ("base", "miss"))
L2 = Contrast("L2", "hit vs miss", ("base", "miss", 0), ("base", "hit"), ("base", "miss", 1))


def test_l0_pairs_the_first_miss_with_every_other_trial_of_its_own_group():
    groups_ = {("base", "miss"): {"a": [out(1, 2), out(1, 2), out(1, 3)], "b": [out(5), out(5), out(5)]}}
    found = pairs(groups_, L0)
    assert [(unit, [trial for trial, _ in treated]) for unit, _, _, treated in found] == [("a", [1, 2]), ("b", [1, 2])]
    row = measure(groups_, L0)
    assert (row.status, row.pairs, row.identical, row.unique_max) == ("diverges", 4, 3, 2)
    assert row.first_difference is not None and row.first_difference.to_json() == {"unit": "a", "trial": 2, "token": 1}
    assert row.control is None  # L0 is its own control


def test_l2_pairs_the_first_miss_with_every_hit_and_checks_its_control():
    groups_ = {("base", "miss"): {"a": [out(1, 2), out(1, 2)]},
               ("base", "hit"): {"a": [out(1, 2, lps=(-0.5, -0.25)), out(1, 2)]}}
    row = measure(groups_, L2)
    assert (row.status, row.pairs, row.identical) == ("holds", 2, 2)
    assert row.logprobs_equal == 1  # one hit's tokens match but its logprobs do not
    assert row.max_logprob_gap == pytest.approx(0.25)
    assert row.control is True
    lo, hi = row.interval
    assert 0 < lo < 1 == hi  # Wilson interval of 2/2
    groups_[("base", "miss")]["a"][1] = out(9)
    assert measure(groups_, L2).control is False


def test_a_hit_the_counters_do_not_show_voids_the_rung_even_with_identical_tokens():
    groups_ = {("base", "miss"): {"a": [out(1), out(1)]}, ("base", "hit"): {"a": [out(1), out(1, ok=False)]}}
    row = measure(groups_, L2)
    assert row.status == "VOID" and "did not show the cache state" in str(row.reason)
    assert "base hit a#1" in str(row.reason)
    assert headline([row]).through is None


def test_a_contrast_with_nothing_to_compare_is_void_and_an_unmeasured_one_says_why():
    assert measure({}, L2).status == "VOID"
    row = measure({}, Contrast("L7", "other hardware", not_measured="another machine"))
    assert (row.status, row.reason) == ("not measured", "another machine")
    assert row.to_json() == {"rung": "L7", "what": "other hardware", "status": "not measured", "reason": "another machine"}


def test_logprob_gap_stops_where_the_tokens_part():
    a, b = out(1, 2, 3, lps=(-1.0, -2.0, -3.0)), out(1, 2, 4, lps=(-1.5, -2.0, -9.0))
    assert logprob_gap(a, b) == pytest.approx(0.5)
    assert logprob_gap(out(), out()) is None


def row(rung: str, status: str) -> ContrastRow:
    return ContrastRow(rung=rung, what="", status=status)


def test_the_headline_climbs_until_the_first_rung_that_does_not_hold():
    rows = [row("L0", "holds"), row("L1", "holds"), row("L2", "diverges"), row("L3", "holds"),
            row("L4", "holds"), row("L4", "not measured"), row("L7", "not measured")]
    found = headline(rows)
    assert found.through == "L1"
    assert found.rungs["L4"] == "holds"  # its measured contrast holds; the unmeasured part is named beside
    assert found.text == "invariant through L1; then L2 diverges, L3 holds, L4 holds, L7 not measured"
    assert headline([row("L0", "diverges")]).text.startswith("not invariant even at L0")
    assert headline([row("L0", "holds"), row("L1", "not measured")]).through == "L0"
    assert rung_status([row("L3", "holds"), row("L3", "VOID"), row("L3", "diverges")]) == "VOID"


def test_closes_names_the_fixes_that_hold_and_cost_is_against_the_unfixed_arm():
    fixes = [ContrastRow(rung="L2", what="", fix=name, status=status)
             for name, status in ((UNFIXED, "diverges"), ("F16", "holds"), ("one thread", "VOID"))]
    assert closes(fixes) == ["F16"]
    fix = ContrastRow(rung="L2", what="", fix="F16", status="holds", cost=Cost(requests=1, latency_s=3.0, tokens_per_s=10.0))
    against(fix, Cost(requests=1, latency_s=1.0, tokens_per_s=20.0))
    assert (fix.latency_ratio, fix.throughput_change_pct) == (3.0, -50.0)
    unmeasured = ContrastRow(rung="L2", what="", fix="x", status="VOID")
    against(unmeasured, Cost(requests=1, latency_s=1.0, tokens_per_s=1.0))
    assert "latency_ratio" not in unmeasured.to_json()


def test_the_gates_prove_each_cache_state_and_unknown_never_passes():
    assert gate("miss", 0).ok and gate("hit", 57).ok and gate("aligned", 48, 48).ok
    assert not gate("hit", 0).ok and "not a hit" in gate("hit", 0).reason
    assert not gate("miss", 3).ok and not gate("prime", 1).ok and not gate("batched", 2).ok
    assert not gate("aligned", 47, 48).ok
    assert not gate("hit", None).ok and not gate("miss", None).ok


def test_batches_fill_the_last_group_with_neighbours_from_the_start():
    assert groups(["a", "b", "c", "d", "e"], 2) == [[("a", True), ("b", True)], [("c", True), ("d", True)],
                                                   [("e", True), ("a", False)]]
    assert groups(["a", "b"], 2) == [[("a", True), ("b", True)]]


def test_the_aligned_boundary_leaves_a_token_to_compute_and_holds_text():
    assert boundary(90, 16, 0) == 80
    assert boundary(96, 16, 0) == 80  # 96 would leave nothing to compute
    assert boundary(17, 16, 1) == 16
    assert boundary(10, 16, 0) is None and boundary(17, 16, 16) is None


DESIGN = plan.Design(trials=3, neighbours=4, chunk=16, formats=("F16", "Q8_0"), threads=2, other_threads=1,
                     backend="portable", backend_reason="this CPU lacks avx_vnni")


def test_every_measured_contrast_points_at_steps_its_passes_send():
    sent = {(p.pass_id, label) for p in plan.passes(DESIGN) for label in p.labels()}
    contrasts = plan.rungs(DESIGN) + plan.fixes(DESIGN)
    for contrast in contrasts:
        if contrast.not_measured:
            continue
        for where in (contrast.ref, contrast.treat, contrast.control, contrast.served):
            assert where is None or tuple(where[:2]) in sent, (contrast, where)
    assert {c.rung for c in plan.rungs(DESIGN)} == {f"L{k}" for k in range(8)}
    assert [c.fix for c in plan.fixes(DESIGN)][0] == UNFIXED
    reasons = {c.what: c.not_measured for c in plan.rungs(DESIGN) if c.not_measured}
    assert reasons["the wheel's CPU backend vs the portable one"] == "this CPU lacks avx_vnni"
    assert all(Contrast.from_json(c.to_json(), "manifest") == c for c in contrasts)



@pytest.mark.parametrize(("data", "field"), [({"rung": "L0", "what": "x", "ref": ["base", "miss", "first"]}, "ref.2"),
                                             ({"rung": "L0"}, "what"), (["L0", "x"], "the top level")])
def test_a_contrast_of_another_shape_in_the_manifest_is_refused_in_one_line_naming_its_field(data, field):
    with pytest.raises(KitError) as caught:
        Contrast.from_json(data, "run/manifest.json: ladder.rungs")
    assert caught.value.line().startswith(f"run/manifest.json: ladder.rungs: a contrast's {field}: ")
    assert "\n" not in caught.value.line()

def test_the_design_changes_one_setting_per_pass():
    passes = {p.pass_id: p for p in plan.passes(DESIGN)}
    assert list(passes) == ["base", "control", "batch", "chunk", "threads", "format-F16", "format-Q8_0"]
    assert passes["base"].steps == ("miss",) * 3 + ("hit",) * 3
    assert {name: len(p.settings()) for name, p in passes.items()} == {
        "base": 0, "control": 0, "batch": 1, "chunk": 1, "threads": 1, "format-F16": 1, "format-Q8_0": 1}
    same = plan.Design(3, 4, 16, (), threads=1, other_threads=1)
    assert "threads" not in {p.pass_id for p in plan.passes(same)}
    assert next(c for c in plan.fixes(same) if c.fix == "one thread").not_measured


def test_protocol_files_load_and_bad_values_are_refused_before_anything_runs():
    protocol, _, _ = kinds.load("ladder-cpu")
    prepared = prepare(protocol, RunInputs())
    assert prepared.plan["items"] == 8 and len(prepared.payload) == 8
    with pytest.raises(ConfigError, match="cannot fill L1's groups"):
        prepare(kinds.load("ladder-cpu", {"workload": {"items": 3}})[0], RunInputs())
    with pytest.raises(ConfigError, match="trials"):
        kinds.load("ladder-cpu", {"trials": 2})
    with pytest.raises(ConfigError, match="formats"):
        kinds.load("ladder-cpu", {"formats": ["Q4_K_M"]})


def test_the_console_shows_both_tables_and_the_launcher_plots_divergence_with_its_interval(tmp_path):
    from rich.console import Console

    from kit.app.console import results_note, results_view
    from kit.tui.widgets.divergence_plot import rows_for

    groups_ = {("base", "miss"): {"a": [out(1, 2), out(1, 2)], "b": [out(3), out(3)]},
               ("base", "hit"): {"a": [out(1, 4)], "b": [out(3)]}}
    rungs = [measure(groups_, L0), measure(groups_, L2), measure({}, Contrast("L7", "hardware", not_measured="elsewhere"))]
    fixes = [measure(groups_, Contrast("L2", "hit vs miss", ("base", "miss", 0), ("base", "hit"), served=("base", "hit"),
                                       fix=UNFIXED))]
    table = {"table": "ladder", "design": {}, "headline": headline(rungs).to_json(),
             "rungs": [r.to_json() for r in rungs], "fixes": [f.to_json() for f in fixes], "closes_L2": closes(fixes)}
    console = Console(record=True, width=200)
    console.print(results_view(table))
    text = console.export_text()
    assert "invariant through L0; then L2 diverges, L7 not measured" in text
    assert "Fixes for L2" in text and "no fix measured here closes L2" in text and "elsewhere" in text
    plotted = {label: (k, n) for label, k, n, _, _ in rows_for(table)}
    assert plotted[f"L2 {L2.what}"] == (1, 2) and plotted[f"fix: {UNFIXED}"] == (1, 2)
    assert all(lo <= k / n <= hi for _, k, n, lo, hi in rows_for(table))
    note = results_note(tmp_path, table)
    assert note.startswith("invariant through L0") and "no fix closed L2" in note


def test_the_launchers_estimate_counts_the_requests_the_design_sends():
    import yaml

    from kit.core.paths import protocols_dir
    from kit.protocols.ladder.protocol import estimate_on_cpu

    data = yaml.safe_load((protocols_dir() / "ladder-cpu.yaml").read_text())
    design = plan.Design(data["trials"], data["neighbours"], data["chunk"], tuple(data["formats"]), threads=2,
                         other_threads=1)
    items = data["workload"]["items"]
    sent = sum(len(p.steps) * items + (len(groups(["x"] * items, design.neighbours)) * design.neighbours
                                       if p.batched else 0) for p in plan.passes(design))
    assert str(estimate_on_cpu(data)).startswith(f"{sent} requests on {len(plan.passes(design))} servers")
