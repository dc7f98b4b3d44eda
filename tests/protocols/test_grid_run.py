"""The grid on the real embedded engine (one BFCL episode, two requests per pass), checked against its
records: every number it reports recomputes here without the kit's analysis code."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from kit.core.events import EpisodeVerdict
from kit.protocols.bfcl_passes.model import GridGates
from kit.protocols.bfcl_passes.one_pass import gate
from tests.sent_requests import check_sent

# the session's shared grid (tests/shared_runs.py) is made in whichever test asks for it first: ~5k prompt
# tokens (two function docs; ~27k with all), seconds on two idle cores and minutes on a busy machine, hence a
# longer limit than the suite's 600 s
pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]


@pytest.fixture(scope="module")
def grid_run(shared_grid_run):
    """The session's small grid (tests/shared_runs.py: one BFCL episode, two requests per pass, on/off/on/off,
    top-2, seed 7), shared with the modules that read it."""
    return shared_grid_run.result, shared_grid_run.events


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def walk(run_dir, pass_info):
    per_unit = defaultdict(list)
    for record in sorted(lines(run_dir / pass_info["file"]), key=lambda r: (r["unit"], r["step"])):
        per_unit[record["unit"]].append((record["prompt_sha256"], record["completion"]["token_ids"]))
    return per_unit


def first_split(a, b):
    for index, ((pa, ta), (pb, tb)) in enumerate(zip(a, b)):
        if pa != pb:
            return index
        if ta != tb:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def test_divergence_and_identity_recompute_from_the_records(grid_run):
    result, _ = grid_run
    assert result.status == "finished", result.reason
    run_dir = result.run_dir
    manifest = json.loads((run_dir / "manifest.json").read_text())
    table = json.loads((run_dir / "results" / "grid.json").read_text())
    assert table == result.table and not table["void_passes"]
    walks = {pid: walk(run_dir, info) for pid, info in manifest["passes"].items()}
    for name, comparison in table["comparisons"].items():
        a, b = comparison["passes"]
        splits = {u: first_split(walks[a][u], walks[b][u]) for u in walks[a]}
        diverged = [s for s in splits.values() if s is not None]
        assert comparison["episodes"] == len(splits)
        assert comparison["diverged"] == len(diverged), name
        assert comparison["first_request_index"] == diverged
        assert comparison["interval"]["k"] == len(diverged) and comparison["interval"]["n"] == len(splits)
    identity = table["comparisons"]["run-to-run cache-off"]["identity"]
    off1, off2 = (lines(run_dir / manifest["passes"][p]["file"]) for p in ("off1", "off2"))
    entries = [(x, y) for r1, r2 in zip(off1, off2)
               for x, y in zip(r1["completion"]["logprobs"], r2["completion"]["logprobs"])]
    assert identity["logprob_records"] == sum(len(r["completion"]["logprobs"]) for r in off1)
    assert identity["logprobs_identical"] == sum(x == y for x, y in entries)


def test_outcomes_and_flips_recompute_from_episode_records(grid_run):
    result, _ = grid_run
    run_dir = result.run_dir
    manifest = json.loads((run_dir / "manifest.json").read_text())
    episodes = {pid: lines(run_dir / info["episodes_file"]) for pid, info in manifest["passes"].items()}
    for row in result.table["passes"]:
        mine = episodes[row["pass"]]
        assert row["outcomes"]["episodes"] == len(mine)
        assert row["outcomes"]["valid"] == sum(e["score"]["valid"] for e in mine)
        # the cap of 2 requests ends every episode that the model's own answers (the backend's arithmetic) did not
        assert all(1 <= e["requests"] <= 2 and (e["outcome"] == "request_cap") == (e["requests"] == 2) for e in mine)
    flips = result.table["flips"]["path"]
    on = {e["unit"]: e["score"]["valid"] for e in episodes["on1"]}
    off = {e["unit"]: e["score"]["valid"] for e in episodes["off1"]}
    assert flips["valid_off_invalid_on"] == sum(off[u] and not on[u] for u in on)
    assert flips["invalid_off_valid_on"] == sum(on[u] and not off[u] for u in on)


def test_requests_show_the_cache_state_of_their_arm(grid_run):
    result, _ = grid_run
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert [p for p in manifest["passes"]] == ["on1", "off1", "on2", "off2"]
    assert len({info["launch"]["pid"] for info in manifest["passes"].values()}) == 1  # one shared server
    for pass_id, info in manifest["passes"].items():
        for record in lines(result.run_dir / info["file"]):
            body = record["request"]["body"]
            assert body["cache_prompt"] is (info["arm"] == "on") and body["n_probs"] == 2 and body["seed"] == 7
            cached = record["completion"]["cached_tokens"]
            if info["arm"] == "off":
                assert cached == 0
            elif record["step"] > 0:
                assert cached > 0
            assert record["gate"]["ok"]
            assert record["completion"]["prompt_tokens"] == record["prompt_tokens_counted"]
    assert manifest["workload"]["dataset_sha256"] and manifest["estimate"]["seconds"] > 0
    # the BFCL worker's hello, with the confinement it ran under
    assert manifest["workload"]["worker"]["confinement"]["limits"]["processes"] == 0


def test_every_request_sent_carries_the_protocols_seed(grid_run):
    result, _ = grid_run
    assert check_sent(result.run_dir, seed=7) == 4 * 2


def test_live_verdicts_match_the_table(grid_run):
    result, events = grid_run
    verdicts = [e for e in events if isinstance(e, EpisodeVerdict)]
    assert {v.comparison for v in verdicts} == set(result.table["comparisons"])
    for verdict in verdicts:
        comparison = result.table["comparisons"][verdict.comparison]
        assert comparison["per_episode"][verdict.unit]["diverged"] == verdict.diverged
        assert comparison["per_episode"][verdict.unit]["request_index"] == verdict.request_index


def test_gate_rules():
    gates, isolated = GridGates(), GridGates(episode_start_cold=True)
    assert gate("off", 3, 0, gates) == (True, None)
    assert gate("off", 0, 12, gates)[0] is False
    assert gate("on", 0, 40, gates) == (True, None)  # an episode's first request may hit or miss ...
    assert gate("on", 0, 40, isolated)[0] is False  # ... unless its cache state must be isolated
    assert gate("on", 1, 0, gates)[0] is False
    assert gate("on", 1, None, gates)[0] is False  # unknown telemetry never passes


def test_a_bundle_of_the_grid_run_verifies_and_detects_a_changed_record(grid_run, tmp_path):
    from kit.bundle.verify import verify_bundle
    from kit.bundle.writer import write_bundle

    result, _ = grid_run
    written = write_bundle([result.run_dir], tmp_path / "grid.tar.gz")
    verdict = verify_bundle(written.path)
    assert verdict.ok, verdict.lines()
    assert any(name.endswith("records/off1.jsonl") for name in written.files)
