"""Sentinel isolation on the real engine: with the sentinel, every episode starts cold; without it, the
isolation gate sees the shared prefix reused and the pass comes out VOID."""

from __future__ import annotations

import json

import pytest

from kit.run import runner
from tests.sent_requests import check_sent

pytestmark = pytest.mark.engine

TWO_EPISODES = """
protocol: grid
engine: {ctx_size: 16384, cache_ram: 0}
workload:
  ids: [multi_turn_base_29, multi_turn_base_10]   # the two shortest first-turn prompts
  max_tokens_cap: 4
  max_requests_per_episode: 1
  function_docs_max: 2   # BFCL's instructions and two docs: the prefix the episodes share
passes: [on]
server: shared
gates: {episode_start_cold: true}
seed: 7
"""


def run(tmp_path, sentinel: bool):
    protocol = tmp_path / f"sentinel-{sentinel}.yaml".lower()
    protocol.write_text(TWO_EPISODES + f"sentinel: {str(sentinel).lower()}\n")
    return runner.run(runner.RunOptions(protocol=str(protocol), out=tmp_path), say=lambda _: None)


def records(result):
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    info = manifest["passes"]["on1"]
    return info, [json.loads(line) for line in (result.run_dir / info["file"]).read_text().splitlines()]


def test_with_the_sentinel_every_episode_starts_cold(tmp_path, embedded_binary):
    result = run(tmp_path, sentinel=True)
    info, recs = records(result)
    assert info["status"] == "OK", info["reason"]
    sentinels = [r for r in recs if r["action"] == "sentinel"]
    assert [r["unit"] for r in sentinels] == ["multi_turn_base_29", "multi_turn_base_10"]
    assert all(r["request"]["body"]["prompt"] == "Sentinel cache reset. " * 32 for r in sentinels)
    assert all(r["request"]["body"]["n_predict"] == 1 and r["request"]["body"]["cache_prompt"] for r in sentinels)
    assert check_sent(result.run_dir, seed=7) == 4  # sentinels and episode steps alike carry the protocol's seed
    firsts = [r for r in recs if r["step"] == 0]
    assert len(firsts) == 2 and all(r["completion"]["cached_tokens"] == 0 for r in firsts)
    # sentinel requests are not part of the episode walk
    assert result.table["passes"][0]["outcomes"]["episodes"] == 2


def test_skipping_the_sentinel_voids_the_pass(tmp_path, embedded_binary):
    result = run(tmp_path, sentinel=False)
    info, recs = records(result)
    assert not any(r["action"] == "sentinel" for r in recs)
    second = next(r for r in recs if r["unit"] == "multi_turn_base_10" and r["step"] == 0)
    assert second["completion"]["cached_tokens"] > 0 and second["gate"]["ok"] is False
    assert info["status"] == "VOID" and "was not isolated" in info["reason"]
    assert result.table["void_passes"] == ["on1"]
