"""`kit analyze` on real CPU runs of the reset and grid protocols (the session's shared ones, embedded
llama-server, SmolLM2): the tables, figures and findings it writes agree with what the records say."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kit.cli import cli

# the session's shared grid (tests/shared_runs.py) is made in whichever test asks for it first: ~5k prompt
# tokens (two function docs; ~27k with all), seconds on two idle cores and minutes on a busy machine, hence a
# longer limit than the suite's 600 s
pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def analysed(tmp_path_factory, shared_reset_runs, shared_grid_run):
    """The session's small reset run (2 items x 2 sessions) and small grid (one BFCL episode, two requests per
    pass, top-2), both read-only (tests/shared_runs.py), analysed together."""
    root = tmp_path_factory.mktemp("real")
    reset, grid = shared_reset_runs[0], shared_grid_run.result
    assert grid.status == "finished", grid.reason
    out = root / "analysis"
    result = CliRunner().invoke(cli, ["analyze", str(reset), str(grid.run_dir), "--out", str(out),
                                      "--block-replicates", "2000", "--cluster-replicates", "200"])
    assert result.exit_code == 0, result.output
    return reset, grid.run_dir, out, json.loads((out / "findings.json").read_text())


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_tables_iv_and_v_agree_with_each_runs_own_results(analysed):
    reset_dir, grid_dir, _, findings = analysed
    grid = json.loads((grid_dir / "results" / "grid.json").read_text())
    (row,) = findings["tables"]["V"]["rows"]
    assert (row["path_k"], row["path_n"]) == (grid["comparisons"]["path"]["diverged"], 1)
    assert (row["on_k"], row["off_k"]) == (grid["comparisons"]["run-to-run cache-on"]["diverged"],
                                           grid["comparisons"]["run-to-run cache-off"]["diverged"])
    assert row["format"] == "Q4_1" and row["engine"] == "llama.cpp"
    reset = json.loads((reset_dir / "results" / "reset_table.json").read_text())
    (iv,) = findings["tables"]["IV"]["rows"]
    assert iv["paths_differ"] == [s["paths_differ"] for s in reset["sessions"]]
    assert iv["across_sessions"] == reset["across_sessions"]


def test_mechanism_positions_recompute_from_the_records(analysed):
    reset_dir, grid_dir, _, findings = analysed
    # the grid ran top-2: the first hit pass's requests beside the first recompute pass's, in step order, while
    # both sent the same prompt; positions up to and including the first differing token
    on = sorted(lines(grid_dir / "records" / "on1.jsonl"), key=lambda r: r["step"])
    off = sorted(lines(grid_dir / "records" / "off1.jsonl"), key=lambda r: r["step"])
    compared, flipped, margins = 0, False, []
    for hit, recompute in zip(on, off):
        if hit["prompt_sha256"] != recompute["prompt_sha256"]:
            break
        compared += 1
        a, b = hit["completion"]["logprobs"], recompute["completion"]["logprobs"]
        split = next((i for i, (x, y) in enumerate(zip(a, b)) if x["id"] != y["id"]), None)
        margins += [abs(e["top"][0]["logprob"] - e["top"][1]["logprob"])
                    for e in b[:split + 1 if split is not None else min(len(a), len(b))]]
        if split is not None or len(a) != len(b):
            flipped = split is not None
            break
    per = findings["mechanism"]["grid"]["per_format"]["Q4_1"]
    assert (per["positions"], per["flips"], per["requests_compared"]) == (len(margins), int(flipped), compared)
    assert sum(b["positions"] for b in per["hazard"]["bins"]) == per["positions"]
    assert per["near_tie_positions"] == sum(m < 0.1 for m in margins)
    # reset: first cold vs first warm request of every item in session 1
    records = lines(reset_dir / "records" / "s1.jsonl")
    flips = 0
    for unit in {r["unit"] for r in records}:
        cold = next(r for r in records if r["unit"] == unit and r["phase"] == "cold")["completion"]["logprobs"]
        warm = next(r for r in records if r["unit"] == unit and r["phase"] == "warm")["completion"]["logprobs"]
        flips += any(a["id"] != b["id"] for a, b in zip(cold, warm))
    assert findings["mechanism"]["reset"]["per_format"]["Q4_1"]["flips"] == flips
    assert findings["mechanism"]["reset"]["top_k"] == 5


def test_tables_and_figures_are_written(analysed):
    reset_dir, _, out, findings = analysed
    assert findings["excluded_passes"] == []
    assert findings["tables"]["VI"]["skipped"] and findings["tables"]["VI"]["rows"] == []
    (vii,) = findings["tables"]["VII"]["rows"]
    items = {r["unit"] for r in lines(reset_dir / "records" / "s1.jsonl")}
    assert vii["n"] == len(items) == 2 and vii["path_divergence"]["n"] == vii["attributable_items"]
    for name in ("III", "IV", "V", "VII"):
        assert "| Q4_1 |" in (out / "tables" / f"table_{name}.md").read_text()
    for stem in ("fig1_divergence", "fig2_formats", "fig3_mechanism"):
        assert (out / "figures" / f"{stem}.png").stat().st_size > 10_000
