"""The sweep's plan without an engine: Williams rows, references before a format's first cell, the
comparisons, the cells `kit analyze` reads, and the errors a bad protocol file gets."""

from __future__ import annotations

import pytest

from kit.core.errors import ConfigError
from kit.launch.provider import ExternalProvider
from kit.protocols import kinds
from kit.protocols.sweep import protocol as sweep
from kit.protocols.sweep.formats import FormatSource, resolve


def load(name: str, **overrides):
    protocol, _, _ = kinds.load(name, overrides)
    return protocol


def test_the_paper_sweep_runs_formats_in_the_williams_row_of_each_history():
    protocol = load("sweep")
    cells = [p for p in sweep.pass_plan(protocol) if p.role == "cell"]
    assert len(cells) == 4 * 11
    rows = {h: [p.format for p in cells if p.history == h] for h in range(11)}
    assert rows[0] == ["F16", "Q8_0", "Q3_K_M", "Q4_K_M"]
    assert rows[1] == ["Q8_0", "Q4_K_M", "F16", "Q3_K_M"]
    assert rows[2] == ["Q4_K_M", "Q3_K_M", "Q8_0", "F16"]
    assert rows[3] == ["Q3_K_M", "F16", "Q4_K_M", "Q8_0"]
    assert rows[7] == rows[3] and rows[10] == rows[2]  # history k uses row k mod 4
    assert all(p.order == p.history and p.arm == "on" for p in cells)


def test_each_reference_runs_under_two_orders_before_its_format_first_serves_a_cell():
    plans = sweep.pass_plan(load("sweep-cpu"))
    ids = [p.pass_id for p in plans]
    for label in ("F16", "Q8_0", "Q4_1", "Q4_0"):
        refs = [p for p in plans if p.role == "reference" and p.format == label]
        assert [(p.arm, p.order) for p in refs] == [("off", 0), ("off", 1)]
        first_cell = min(ids.index(p.pass_id) for p in plans if p.role == "cell" and p.format == label)
        assert all(ids.index(r.pass_id) < first_cell for r in refs)
    assert len(ids) == len(set(ids)) == 4 * 2 + 4 * 3


def test_comparisons_pair_every_cell_with_its_format_reference_and_the_references_across_orders():
    protocol = load("sweep-cpu", replicate=True)
    pairs = sweep.comparisons(protocol)
    assert pairs["path Q4_0 h2"] == ("Q4_0-h2-on", "Q4_0-ref-o0")
    assert pairs["reference F16 (order 0 vs 1)"] == ("F16-ref-o0", "F16-ref-o1")
    assert pairs["replicate Q8_0 h0"] == ("Q8_0-h0-on", "Q8_0-h0-on-r2")
    cells = sweep.cells(protocol, {label: {"format": label} for label in protocol.formats})
    assert cells["Q4_1/h1"] == {"passes": ["Q4_1-h1-on", "Q4_1-ref-o0"], "sweep": {"format": "Q4_1", "history": 1},
                                "engine": {"format": "Q4_1"}}
    assert len(cells) == 12


def test_histories_and_episodes_size_a_sweep_down():
    protocol = load("sweep-cpu", histories=1, workload={"episodes": 1})
    assert protocol.workload.chosen_ids() == ["multi_turn_base_29"]
    assert [p.pass_id for p in sweep.pass_plan(protocol)] == [
        "F16-ref-o0", "F16-ref-o1", "F16-h0-on", "Q8_0-ref-o0", "Q8_0-ref-o1", "Q8_0-h0-on",
        "Q4_0-ref-o0", "Q4_0-ref-o1", "Q4_0-h0-on", "Q4_1-ref-o0", "Q4_1-ref-o1", "Q4_1-h0-on"]


@pytest.mark.parametrize(("overrides", "names"), [
    ({"format_rows": [["F16", "Q8_0"]]}, "format_rows"),
    ({"formats": {"F16": {"derive": "F16", "of": "Q8_0"}, "Q8_0": {"model": "source"}}}, "formats"),
    ({"formats": {"bad label": {"model": "source"}}}, "formats"),
    ({"formats": {"F16": {"model": "source", "derive": "F16"}}}, "formats"),
    ({"histories": 0}, "histories"),
])
def test_a_bad_sweep_file_gets_an_error_naming_the_key(overrides, names):
    with pytest.raises(ConfigError) as caught:
        load("sweep-cpu", **overrides)
    assert names in caught.value.line()


def test_a_derived_format_needs_to_know_the_run_model():
    with pytest.raises(ConfigError, match="does not say which model file"):
        resolve({"F16": FormatSource(derive="F16")}, ExternalProvider("http://127.0.0.1:9"))


def test_a_dequantized_format_sorts_beside_the_kernels_it_runs():
    from kit.analysis.collect import format_rank

    labels = ["Q4_K_M", "Q4_K_M-deq-F16", "Q8_0", "F16", "Q3_K_M"]
    assert sorted(labels, key=format_rank) == ["F16", "Q4_K_M-deq-F16", "Q8_0", "Q4_K_M", "Q3_K_M"]


def test_a_sweep_whose_formats_separate_the_outcomes_says_its_slope_is_not_an_estimate(tmp_path):
    from kit.analysis.collect import RunFolder
    from kit.analysis.sweep_findings import sweep_findings
    from kit.record.manifest import RunManifest

    episodes = ["e1", "e2", "e3", "e4"]
    cells = []
    for history in (0, 1, 2):
        for label, outcome in (("F16", 0), ("Q8_0", 1)):
            manifest = RunManifest(run_id=f"r/{label}/h{history}", sweep={"format": label, "history": history})
            run = RunFolder(tmp_path, manifest, "sweep")
            cells.append((run, {"episodes": episodes, "indicators": [outcome] * 4, "diverged": 4 * outcome, "n": 4,
                                "passes": ["on", "off"], "first_request_index": []}))
    result = sweep_findings(cells, replicates=50, seed=20261007)
    assert result.per_history_counts == {"F16": [0, 0], "Q8_0": [4, 4]}
    assert "separated" in result.bootstrap["glmm_note"]
