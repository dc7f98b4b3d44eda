"""A tiny remedy run on the real embedded engine: two items, the unfixed arm against chunk-16 and reuse-off,
each arm on a fresh server per item, interleaved; its results recomputed by `kit verify` from its bundle."""

from __future__ import annotations

import json

import pytest

from tests.bundle.kit_cli import run_here

pytestmark = pytest.mark.engine

TINY = """protocol: remedy
engine: {ctx_size: 1024, cache_ram: 0}
arms:
  - {name: unfixed}
  - {name: chunk-16, fixes: [chunk-16]}
  - {name: reuse-off, fixes: [reuse-off]}
gsm8k:
  workload: {source: arithmetic, items: 2}
  max_tokens: 16
"""


def test_a_tiny_remedy_run_interleaves_its_arms_and_its_bundle_verifies(tmp_path):
    protocol = tmp_path / "tiny-remedy.yaml"
    protocol.write_text(TINY)
    result = run_here("run", str(protocol), "--out", str(tmp_path / "runs"))
    assert result.returncode == 0, result.stderr
    run_dir = next((tmp_path / "runs").glob("tiny-remedy-*"))
    manifest = json.loads((run_dir / "manifest.json").read_text())
    passes = manifest["passes"]
    # units in turn, the arms' order alternating: unfixed, chunk-16 on the first item; chunk-16, unfixed on the next
    started = sorted(passes, key=lambda p: passes[p]["started"])
    assert [passes[p]["remedy"]["arm"] for p in started] == ["unfixed", "chunk-16", "reuse-off", "reuse-off",
                                                             "chunk-16", "unfixed"]
    assert all(info["status"] == "OK" and info["records"] == 4 for info in passes.values())
    for pass_id, info in passes.items():
        argv = info["launch"]["argv"]
        chunked = "--ubatch-size" in argv
        assert chunked == pass_id.startswith("chunk-16")
        if chunked:
            assert argv[argv.index("--ubatch-size") + 1] == "16" and argv[argv.index("--batch-size") + 1] == "16"
    # reuse-off: every request recomputes (cache_prompt false, nothing cached), its warm phases gated as such
    for file in (run_dir / "records").glob("reuse-off.gsm8k.*.jsonl"):
        records = [json.loads(line) for line in file.read_text().splitlines()]
        assert len(records) == 4 and all(r["gate"]["ok"] for r in records)
        assert all(r["request"]["body"]["cache_prompt"] is False and r["completion"]["cached_tokens"] == 0
                   for r in records)
    assert len(list((run_dir / "records").glob("reuse-off.gsm8k.*.jsonl"))) == 2
    arms = {arm["name"]: arm for arm in manifest["remedy"]["arms"]}
    assert arms["chunk-16"]["engine"]["fixes"] == ["chunk-16"] and "fixes" not in arms["unfixed"]["engine"]

    table = json.loads((run_dir / "results" / "remedy.json").read_text())
    for arm in table["arms"]:
        assert arm["divergence"]["IV"]["n"] == 2 and 0 <= arm["divergence"]["IV"]["k"] <= 2
        assert arm["cost"]["<=256"]["requests"] == 8 and arm["cost"]["<=256"]["prefill_tps"] > 0
    unfixed = table["arms"][0]
    assert unfixed["cost"]["<=256"]["ratio"]["latency_s"] == pytest.approx(1.0)
    assert table["arms"][1]["closed"]["IV"] in ("closed", "not closed", "nothing to close")
    assert "Table IV" in result.stdout and "remedy cost" in result.stdout

    bundle = tmp_path / "tiny.tar.gz"
    assert run_here("bundle", str(run_dir), "-o", str(bundle)).returncode == 0
    verified = run_here("verify", str(bundle))
    assert verified.returncode == 0 and "all equal" in verified.stdout, verified.stdout + verified.stderr
