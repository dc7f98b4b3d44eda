"""`kit analyze` on small run folders written by the test (grid and the assumed sweep layout): every
count in findings.json and the tables is the one the test built in."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kit.analysis.findings import Settings, analyze, compute
from kit.cli import cli
from kit.core.errors import KitError
from tests.analysis.records_builder import position, write_grid_like

FAST = Settings(block_bootstrap_replicates=300, sweep_replicates=40, cluster_replicates=40, workers=1)
EPISODES = [f"e{i}" for i in range(8)]


def episode(unit: str, flip: bool, depth: int) -> list[tuple]:
    """Two requests; with `flip`, the hit path flips at request 0 and later prompts differ."""
    first = [position(1, 1.5, 2, depth), position(3, 0.02, 4, depth)]
    if flip:
        first = [first[0], position(4, 0.01, 3, depth)]
    return [(f"{unit}-p0", first, 30), (f"{unit}-p1" + ("-x" if flip else ""), [position(5, 2.0, 6, depth)], 60)]


def grid_like(folder, diverged: dict[str, set], arms: list[str], depth: int, **kw):
    """diverged: pass id -> units that differ from the cache-off reference."""
    passes = {}
    for pass_id, arm in zip(diverged, arms):
        eps = {u: episode(u, u in diverged[pass_id], depth) for u in EPISODES}
        if arm == "off":
            eps = {u: [(p, pos, 0) for p, pos, _ in steps] for u, steps in eps.items()}
        passes[pass_id] = {"arm": arm, "order": kw.pop(f"order_{pass_id}", EPISODES), "episodes": eps}
    for pass_id, status in kw.pop("statuses", {}).items():
        passes[pass_id].update(status=status, reason="gate failed")
    return write_grid_like(folder, passes, depth=depth, **kw)


SWEEP = {  # (format, history) -> episodes whose cache-on pass departs from the reference
    ("F16", 0): {"e0"}, ("F16", 1): {"e0", "e1"}, ("F16", 2): {"e1"},
    ("Q4_K_M", 0): {"e0", "e1", "e2", "e3"}, ("Q4_K_M", 1): {"e0", "e2", "e3", "e5", "e6"},
    ("Q4_K_M", 2): {"e0", "e1", "e2", "e4", "e7"},
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    for (fmt, h), units in SWEEP.items():
        grid_like(root / "sweep" / f"sweep-{fmt}-h{h}", {"on1": units, "off1": set()}, ["on", "off"], 5,
                  sweep={"format": fmt, "history": h}, model_name=f"toy-{fmt}", cache_ram=0)
    # a sweep folder whose cache-on pass is VOID: excluded, listed, and its history left out
    grid_like(root / "sweep" / "sweep-Q4_K_M-h3", {"on1": {"e0"}, "off1": set()}, ["on", "off"], 5,
              sweep={"format": "Q4_K_M", "history": 3}, model_name="toy-Q4_K_M", statuses={"on1": "VOID"})
    grid_like(root / "grid" / "grid-toy-F16", {"on1": {"e1", "e4", "e6"}, "off1": set(), "on2": {"e1"},
                                               "off2": set()}, ["on", "off", "on", "off"], 1, model_name="toy-F16")
    return root


@pytest.fixture(scope="module")
def sweep_findings(folders):
    return compute([folders / "sweep"], FAST).to_json()


def test_sweep_table_vi_counts(sweep_findings):
    findings = sweep_findings
    sweep = findings["sweep"]
    assert sweep["formats"] == ["F16", "Q4_K_M"] and sweep["random_histories"] == [1, 2]
    assert sweep["per_history_counts"] == {"F16": [2, 1], "Q4_K_M": [5, 5]}
    assert sweep["canonical"]["F16"]["k"] == 1 and sweep["canonical"]["Q4_K_M"]["k"] == 4
    rows = {r["format"]: r for r in findings["tables"]["VI"]["rows"]}
    assert rows["F16"]["mean"] == pytest.approx(3 / 16) and rows["Q4_K_M"]["mean"] == pytest.approx(10 / 16)
    assert rows["Q4_K_M"]["diff"] == pytest.approx(7 / 16) and rows["Q4_K_M"]["above_reference"] == 2
    assert rows["F16"]["lo"] <= rows["F16"]["mean"] <= rows["F16"]["hi"]
    # e0..e7 over histories 1, 2: e0 diverges in both at F16? no: {e0,e1} then {e1} -> e0 changes, e1 stays
    assert sweep["episodes_changing_status"]["F16"] == 1
    assert sweep["permutation"]["statistic"] == 10  # rank 1 (Q4_K_M) x 10 divergences
    excluded = findings["excluded_passes"]
    assert [(e["run"], e["pass"], e["status"]) for e in excluded] == [("sweep-Q4_K_M-h3", "on1", "VOID")]
    assert {"run": "sweep-Q4_K_M-h3", "reason": "needs one OK cache-on pass and one OK cache-off reference pass"} \
        in sweep["skipped"] and 3 not in sweep["histories"]


def test_sweep_mechanism_uses_the_canonical_history(sweep_findings):
    block = sweep_findings["mechanism"]["sweep"]
    assert block["formats"] == ["F16", "Q4_K_M"] and block["top_k"] == 5
    # canonical history: F16 flips in e0 only, Q4_K_M in e0..e3; each flip at the 2nd position of request 0
    assert block["per_format"]["F16"]["flips"] == 1 and block["per_format"]["Q4_K_M"]["flips"] == 4
    # positions: a flipped episode stops after its flip (2); the others give 3
    assert block["per_format"]["F16"]["positions"] == 2 + 7 * 3
    assert block["per_format"]["Q4_K_M"]["margin_at_flips"]["median"] == pytest.approx(0.02)


def test_grid_tables_and_dependence_aware_intervals(folders):
    findings = compute([folders / "grid"], FAST).to_json()
    (row,) = findings["tables"]["V"]["rows"]
    assert (row["path_k"], row["path_n"], row["on_k"], row["off_k"]) == (3, 8, 2, 0)
    grid = findings["grid"][0]["comparisons"]
    assert grid["path"]["indicators_in_execution_order"] == [0, 1, 0, 0, 1, 0, 1, 0]
    assert grid["path"]["interval"]["lo"] <= grid["path"]["interval"]["wilson_lo"]
    (iii,) = findings["tables"]["III"]["rows"]
    assert iii["order"] == "cache-off pass in between" and iii["prompt_cache"] == "default" and iii["k"] == 2
    reasons = [s["reason"] for s in findings["mechanism"]["grid"]["skipped_runs"]]
    assert reasons == ["top-1 log-probabilities: the top-two margin needs top-2 or deeper"]
    assert findings["tables"]["VI"]["rows"] == [] and "no sweep" in findings["tables"]["VI"]["skipped"][0]["reason"]


def test_cli_writes_tables_figures_and_findings(folders, tmp_path):
    out = tmp_path / "analysis"
    result = CliRunner().invoke(cli, ["analyze", str(folders / "grid"), str(folders / "sweep"), "--out", str(out),
                                      "--block-replicates", "500", "--sweep-replicates", "30",
                                      "--cluster-replicates", "30", "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert "excluded pass sweep-Q4_K_M-h3/on1 (VOID)" in result.output
    findings = json.loads((out / "findings.json").read_text())
    assert findings["settings"]["seed"] == 20261007 and findings["settings"]["block_bootstrap_replicates"] == 500
    for name in ("III", "IV", "V", "VI", "VII"):
        for ext in ("csv", "md", "tex"):
            assert (out / "tables" / f"table_{name}.{ext}").is_file()
    assert "| llama.cpp | toy | F16 | default | 8 | 0.0 | 25.0 |" in (out / "tables" / "table_V.md").read_text()
    assert r"\begin{tabular}" in (out / "tables" / "table_VI.tex").read_text()
    for stem in ("fig1_divergence", "fig2_formats", "fig3_mechanism"):
        assert (out / "figures" / f"{stem}.png").stat().st_size > 10_000
        assert (out / "figures" / f"{stem}.pdf").read_bytes().startswith(b"%PDF")


def test_analyze_refuses_nothing_silently(tmp_path):
    (tmp_path / "empty").mkdir()
    findings = compute([tmp_path / "empty"], FAST).to_json()
    assert findings["skipped_inputs"][0]["reason"].startswith("no manifest.json")
    assert all(t["rows"] == [] and t["skipped"] for t in findings["tables"].values())
    with pytest.raises(KitError, match=r"^no run folder to analyse \(.*empty: no manifest.json here"):
        analyze([tmp_path / "empty"], tmp_path / "out", FAST, figures=False)
    assert not (tmp_path / "out").exists()
