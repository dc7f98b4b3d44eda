"""`kit check` on the real embedded engine (restarted before every pass), small C and P, and every reported
number recomputed here from the run folder's records without the kit's analysis code."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.record.cache_state import Calibration, classify
from kit.cli import cli
from tests.console_text import printed
from tests.sent_requests import check_sent

pytestmark = pytest.mark.engine

CYCLES, PER_ARM, FRESH, STEADY, ROUNDS = 2, 3, 1, 2, 2


@pytest.fixture(scope="module")
def check_run(tmp_path_factory, embedded_binary):
    out = tmp_path_factory.mktemp("runs")
    result = CliRunner().invoke(cli, ["check", "--cycles", str(CYCLES), "--per-arm", str(PER_ARM),
                                      "--max-tokens", "16", "--calibration-rounds", str(ROUNDS),
                                      "--always-fresh", str(FRESH), "--steady", str(STEADY), "--out", str(out)],
                                catch_exceptions=False)
    [run_dir] = [p for p in out.iterdir() if (p / "manifest.json").is_file()]  # bundles/ is beside it
    return result, run_dir


def read(run_dir: Path):
    manifest = json.loads((run_dir / "manifest.json").read_text())
    records = {pid: [json.loads(line) for line in (run_dir / info["file"]).read_text().splitlines()]
               for pid, info in manifest["passes"].items()}
    return manifest, records


def telemetry_state(record, tolerance=8):
    c = record["completion"]
    if c["cached_tokens"] == 0:
        return "full_eval"
    return "full_kv" if c["prompt_tokens"] - c["cached_tokens"] <= tolerance else "partial"


def named_states(rows):
    """States with the KV's builder, recomputed independently: a full-KV reuse inherits the state of the
    last measured call that evaluated the prompt."""
    builder, names = None, []
    for r in rows:
        s = telemetry_state(r)
        names.append(f"full_kv<-{builder}" if s == "full_kv" and builder else s)
        if r["measured"] and s != "full_kv":
            builder = s
    return names


def wilson(k, n, z=1.959964):
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def test_check_runs_end_to_end_and_prints_a_verdict(check_run):
    result, run_dir = check_run
    assert result.exit_code == 0, result.output
    assert printed("Cache states found", result.output) and printed("gate:", result.output)
    assert printed("pinned regimes", result.output) and printed(f"run folder: {run_dir}", result.output)
    manifest, _ = read(run_dir)
    assert manifest["status"] == "finished"
    assert len(manifest["passes"]) == ROUNDS + CYCLES + FRESH + 1
    for info in manifest["passes"].values():
        assert info["status"] == "OK" and info["reload"]["confirmed"] is True
        assert info["launch"]["build_info"] == "b1-7e4c0a9"
    pids = [info["launch"]["pid"] for info in manifest["passes"].values()]
    assert len(set(pids)) == len(pids)  # every pass on its own server process
    assert "--cache-ram" in manifest["passes"]["c1"]["launch"]["argv"]
    assert manifest["engine"]["cache_ram"] == 0


def test_every_call_sent_carries_the_protocols_seed(check_run):
    _, run_dir = check_run
    calls = (ROUNDS * 5) + CYCLES * (2 + 2 * PER_ARM) + FRESH + (1 + STEADY)
    assert check_sent(run_dir, seed=42) == calls  # protocols/pinning.yaml's seed, in every request sent


def test_every_reported_number_recomputes_from_the_records(check_run):
    _, run_dir = check_run
    _, records = read(run_dir)
    table = json.loads((run_dir / "results" / "pinning.json").read_text())
    labels = {sha: name for name, sha in table["outputs"].items()}
    cycle_rows = []
    for pid in (f"c{i}" for i in range(1, CYCLES + 1)):
        rows = records[pid]
        assert [r["role"] for r in rows] == ["burn_in"] + ["pure"] * PER_ARM + ["other"] + ["contaminated"] * PER_ARM
        for r, name in zip(rows, named_states(rows)):
            r["_name"] = name
        cycle_rows += [r for r in rows if r["measured"]]
    # per-state determinism
    by_state = {}
    for r in cycle_rows:
        by_state.setdefault(r["_name"], []).append(r["output_sha256"])
    assert {s["state"] for s in table["states"]} == set(by_state)
    for s in table["states"]:
        outputs = by_state[s["state"]]
        top, k = Counter(outputs).most_common(1)[0]
        assert (s["n"], s["distinct"], s["modal_count"]) == (len(outputs), len(set(outputs)), k)
        assert s["modal_output"] == labels[top]
        assert s["wilson95"] == pytest.approx(wilson(k, len(outputs)), abs=1e-6)
        times = [r["completion"]["prefill_ms"] for r in cycle_rows if r["_name"] == s["state"]]
        assert s["prefill_ms"]["min"] == min(times) and s["prefill_ms"]["max"] == max(times)
    # gate and arms
    arm_states = {arm: sorted({r["_name"] for r in cycle_rows if r["role"] == arm}) for arm in ("pure", "contaminated")}
    assert table["gate"]["arm_states"] == arm_states
    separate = not set(arm_states["pure"]) & set(arm_states["contaminated"])
    assert table["gate"]["status"] == ("PASS" if separate else "VOID")
    assert table["gate"]["reloads_confirmed"] == [CYCLES, CYCLES]
    pure = [r for r in cycle_rows if r["role"] == "pure"]
    dirty = [r for r in cycle_rows if r["role"] == "contaminated"]
    pure_top = Counter(r["output_sha256"] for r in pure).most_common(1)[0]
    dirty_top = Counter(r["output_sha256"] for r in dirty).most_common(1)[0]
    assert table["arms"]["pure"]["modal_count"] == pure_top[1] and table["arms"]["pure"]["n"] == CYCLES * PER_ARM
    assert table["arms"]["contaminated"]["modal_count"] == dirty_top[1]
    if table["gate"]["status"] == "PASS":
        assert table["arms"]["differ"] == (pure_top[0] != dirty_top[0])
        if table["arms"]["differ"]:
            a = next(r for r in pure if r["output_sha256"] == pure_top[0])
            b = next(r for r in dirty if r["output_sha256"] == dirty_top[0])
            ta, tb = a["completion"]["text"], b["completion"]["text"]
            char = next(i for i, (x, y) in enumerate(zip(ta + "\0", tb + "\1")) if x != y)
            ids_a, ids_b = a["completion"]["token_ids"], b["completion"]["token_ids"]
            token = next(i for i, (x, y) in enumerate(zip(ids_a + [-1], ids_b + [-2])) if x != y)
            assert table["arms"]["fork"]["char"] == char and table["arms"]["fork"]["token"] == token
    else:
        assert table["arms"]["differ"] is None and "gate VOID" in table["arms"]["withheld"]
    # where the bytes flip in each cycle
    for cycle in table["cycles"]:
        measured = [r for r in records[cycle["pass"]] if r["measured"]]
        assert cycle["outputs"] == [labels[r["output_sha256"]] for r in measured]
        flips = [i for i in range(1, len(measured)) if measured[i]["output_sha256"] != measured[i - 1]["output_sha256"]]
        assert len(cycle["flips"]) == len(flips)
        arm_flips = [i for i in flips if i != 1]
        assert cycle["flip_at_interposed_only"] == (arm_flips == [1 + PER_ARM])
    # pinned regimes
    fresh = [records[f"fresh{i}"][0]["output_sha256"] for i in range(1, FRESH + 1)]
    steady = [r["output_sha256"] for r in records["steady"] if r["role"] == "steady"]
    for name, outputs in (("always_fresh", fresh), ("steady", steady)):
        regime = table["regimes"][name]
        assert (regime["n"], regime["modal_count"]) == (len(outputs), Counter(outputs).most_common(1)[0][1])
    assert all(named_states([r])[0] == "full_eval" for pid in (f"fresh{i}" for i in range(1, FRESH + 1))
               for r in records[pid])
    # the CSV holds one row per call
    csv_rows = (run_dir / "results" / "pinning_calls.csv").read_text().splitlines()
    assert len(csv_rows) == 1 + sum(len(rows) for rows in records.values())


def test_timing_classification_agrees_with_telemetry_on_real_calls(check_run):
    """The calibration was fitted on labelled real calls; calls whose prefill time falls inside one
    calibrated class must carry that class's telemetry state, and a merged class is never split."""
    _, run_dir = check_run
    manifest, records = read(run_dir)
    calibration = Calibration.from_json(manifest["calibration"])
    table = json.loads((run_dir / "results" / "pinning.json").read_text())
    assert table["calibration"] == json.loads(json.dumps(calibration.to_json()))
    assert table["telemetry"] is True
    checked = 0
    for pid, rows in records.items():
        for r in rows:
            ms = r["completion"]["prefill_ms"]
            label = classify(calibration, ms)
            if r["phase"] == "calibration":
                assert r["state"]["timing"] is None  # no calibration exists while it is being measured
            else:
                assert r["state"]["timing"]["state"] == label.state  # recorded at run time = recomputed
            inside = [c for c in calibration.classes if c.min_ms <= ms <= c.max_ms]
            if r["measured"] and len(inside) == 1:
                assert telemetry_state(r) in inside[0].states, (pid, r["role"], ms, inside[0].name)
                checked += 1
    assert checked >= ROUNDS * 3  # at least the calibration calls themselves
    if not calibration.separated:
        assert any(len(c.states) > 1 for c in calibration.classes)


def test_the_stricter_prefill_time_gate_is_recomputed_from_the_same_records(check_run, tmp_path):
    """With `gate_on: prefill_times` (seed 002's literal gate) the same records give PASS exactly when the
    two arms' raw prefill times do not overlap."""
    import shutil

    from kit.protocols.pinning import results as analysis

    _, run_dir = check_run
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["protocol"]["resolved"]["gate_on"] = "prefill_times"
    (copy / "manifest.json").write_text(json.dumps(manifest))
    _, records = read(copy)
    rows = [r for pid in (f"c{i}" for i in range(1, CYCLES + 1)) for r in records[pid]]
    pure = [r["completion"]["prefill_ms"] for r in rows if r["role"] == "pure"]
    dirty = [r["completion"]["prefill_ms"] for r in rows if r["role"] == "contaminated"]
    apart = min(dirty) > max(pure) or min(pure) > max(dirty)
    strict = analysis.pinning_table(copy).to_json()
    default = json.loads((run_dir / "results" / "pinning.json").read_text())
    assert strict["gate"]["gate_on"] == "prefill_times" and default["gate"]["gate_on"] == "states"
    assert strict["gate"]["arm_prefill_times"]["separate"] == apart
    assert strict["gate"]["status"] == ("PASS" if apart and default["gate"]["status"] == "PASS" else "VOID")
    if not apart:
        assert strict["arms"]["differ"] is None
