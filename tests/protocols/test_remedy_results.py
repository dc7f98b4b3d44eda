"""The remedy's results from a small run folder of real record files written by hand: divergence per arm
with Wilson intervals, closed / not closed, and the cost per prompt-length bin as ratios to the unfixed arm."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kit.engines.base import Completion, Sent
from kit.protocols import kinds
from kit.protocols.remedy import results as remedy_results
from kit.protocols.remedy import view
from kit.protocols.headline import Headline
from kit.record.files import RecordWriter
from kit.record.model import BfclRecord, Gate, ResetRecord
from kit.stats.intervals import wilson_interval
from tests.answers import STARTED, prompt_body

PHASES = (("cold", "cold"), ("warm", "warm"), ("cold2", "cold"), ("warm2", "warm"))


def completion(ids: list[int], *, prompt: int, prefill_ms: float, decode_ms: float, cached: int = 0,
               text: str = "The answer is 4", wall: float = 1.0) -> Completion:
    return Completion(text=text, token_ids=tuple(ids), tokens=tuple(f"t{i}" for i in ids), logprobs=None,
                      finish_reason="stop", cached_tokens=cached, prompt_tokens=prompt, prefill_tokens=prompt - cached,
                      prefill_ms=prefill_ms, decode_tokens=len(ids), decode_ms=decode_ms, raw={},
                      sent=Sent("/completion", prompt_body("p", cache_prompt=bool(cached)), STARTED, wall))


def gsm8k_pass(folder: Path, pass_id: str, warm_ids: list[int], prefill_ms: float, warm_text: str) -> int:
    """One item (reference 4): cold outputs [1, 2], warm outputs `warm_ids`; 100 prompt tokens."""
    with RecordWriter(folder / f"records/{pass_id}.jsonl", run_id="r", pass_id=pass_id, protocol="reset") as writer:
        for index, (phase, expect) in enumerate(PHASES):
            warm = expect == "warm"
            writer.answered(ResetRecord, completion(warm_ids if warm else [1, 2], prompt=100, prefill_ms=prefill_ms,
                                                    decode_ms=100.0, cached=99 if warm else 0,
                                                    text=warm_text if warm else "The answer is 4"),
                            unit="gsm8k-0", step=0, gate=Gate(True), reference="4", phase=phase,
                            phase_index=index, expect=expect)
        return writer.count


def bfcl_pass(folder: Path, pass_id: str, cache: str, second: list[int], prefill_ms: float) -> int:
    """One episode of two requests: 2000 and 5000 prompt tokens."""
    with RecordWriter(folder / f"records/{pass_id}.jsonl", run_id="r", pass_id=pass_id, protocol="grid") as writer:
        for step, (prompt, ids) in enumerate(((2000, [5, 6]), (5000, second))):
            writer.answered(BfclRecord, completion(ids, prompt=prompt, prefill_ms=prefill_ms * prompt / 1000,
                                                   decode_ms=200.0, wall=2.0 if cache == "on" else 4.0),
                            unit="e0", step=step, gate=Gate(True), arm=cache, action="end_turn")
        return writer.count


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_remedy_run(tmp_path / "remedy-run")


def write_remedy_run(folder: Path) -> Path:
    """A finished remedy run folder of three arms. unfixed: paths differ and flip on GSM8K, BFCL diverges;
    fix-a (twice as slow to prefill): closes both; fix-b: GSM8K still differs (no flip), BFCL closed."""
    passes = {}
    arms = {"unfixed": ([1, 3], "The answer is 5", 10.0, [7]), "fix-a": ([1, 2], "The answer is 4", 20.0, [8]),
            "fix-b": ([1, 9], "The answer is 4", 12.0, [8])}
    for arm, (warm, text, prefill, second_on) in arms.items():
        pid = f"{arm}.gsm8k.gsm8k-0"
        count = gsm8k_pass(folder, pid, warm, prefill, text)
        passes[pid] = {"status": "OK", "file": f"records/{pid}.jsonl", "records": count,
                       "remedy": {"arm": arm, "workload": "gsm8k", "unit": "gsm8k-0"}}
        for cache, second in (("on", second_on), ("off", [8])):
            pid = f"{arm}.bfcl.e0.{cache}"
            count = bfcl_pass(folder, pid, cache, second, prefill)
            passes[pid] = {"status": "OK", "file": f"records/{pid}.jsonl", "records": count,
                           "remedy": {"arm": arm, "workload": "bfcl", "unit": "e0", "cache": cache}}
    passes["fix-b.gsm8k.gsm8k-9"] = {"status": "VOID", "reason": "gate", "remedy": {"arm": "fix-b"}}
    design = [{"name": "unfixed", "fixes": [], "server_args": []},
              {"name": "fix-a", "fixes": [{"name": "chunk-16"}], "server_args": []},
              {"name": "fix-b", "fixes": [], "server_args": ["--swa-full"]}]
    manifest = {"schema": "kit.manifest/1", "run_id": folder.name, "status": "finished",
                "protocol": {"name": "remedy-cpu", "kind": "remedy"}, "passes": passes, "remedy": {"arms": design}}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_divergence_closed_and_intervals_per_arm(run_dir: Path):
    t = remedy_results.remedy_table(run_dir)
    arms = {arm["name"]: arm for arm in t["arms"]}
    unfixed = arms["unfixed"]["divergence"]
    lo, hi = wilson_interval(1, 1)
    assert unfixed["IV"] == {"k": 1, "n": 1, "rate": 1.0, "lo": lo, "hi": hi, "method": "wilson"}
    assert unfixed["VII"]["k"] == 1 and unfixed["V"]["k"] == 1
    assert arms["fix-a"]["divergence"]["IV"]["k"] == 0 and arms["fix-a"]["divergence"]["IV"]["hi"] == pytest.approx(
        wilson_interval(0, 1)[1])
    assert arms["fix-a"]["closed"] == {"IV": "closed", "VII": "closed", "V": "closed"}
    assert arms["fix-b"]["closed"] == {"IV": "not closed", "VII": "closed", "V": "closed"}
    assert arms["fix-b"]["server_args"] == ["--swa-full"] and arms["fix-a"]["fixes"] == ["chunk-16"]
    assert t["not_ok_passes"] == ["fix-b.gsm8k.gsm8k-9"]
    # fix-b is cheaper than fix-a (prefill 1.2x vs 2x the unfixed arm's), so it is the cheapest that closes V
    assert t["cheapest_closing"] == {"IV": "fix-a", "VII": "fix-b", "V": "fix-b"}


def test_cost_per_prompt_length_bin_with_ratios_to_the_unfixed_arm(run_dir: Path):
    t = remedy_results.remedy_table(run_dir)
    arms = {arm["name"]: arm for arm in t["arms"]}
    cost = arms["unfixed"]["cost"]
    assert list(cost) == ["<=256", "1k-4k", ">4k"]  # 100-token GSM8K prompts; 2000 and 5000-token BFCL ones
    assert cost["<=256"]["requests"] == 4 and cost["1k-4k"]["requests"] == 2 and cost[">4k"]["requests"] == 2
    assert cost["1k-4k"]["ttft_ms"] == pytest.approx(20.0)  # 10 ms per 1000 tokens
    assert cost["1k-4k"]["prefill_tps"] == pytest.approx(2000 / 0.020)
    assert cost[">4k"]["latency_s"] == pytest.approx(3.0)  # on 2 s, off 4 s
    slow = arms["fix-a"]["cost"]
    assert slow[">4k"]["ratio"]["ttft_ms"] == pytest.approx(2.0)
    assert slow[">4k"]["ratio"]["prefill_tps"] == pytest.approx(0.5)
    assert slow["<=256"]["ratio"]["decode_tps"] == pytest.approx(1.0)
    assert cost["<=256"]["ratio"]["ttft_ms"] == pytest.approx(1.0)
    assert [b for _, b in remedy_results.BINS] == ["<=256", "257-1k", "1k-4k", ">4k"]
    assert [remedy_results.bin_of(n) for n in (1, 256, 257, 1024, 1025, 4096, 4097)] == [
        "<=256", "<=256", "257-1k", "257-1k", "1k-4k", "1k-4k", ">4k"]


def test_written_shown_and_registered(run_dir: Path):
    kind = kinds.KINDS["remedy"]
    t = kind.results(run_dir)
    assert (run_dir / "results/remedy.json").is_file()
    rows = (run_dir / "results/remedy.csv").read_text().splitlines()
    assert rows[0].startswith("arm,bin,requests") and len(rows) == 1 + 3 * 3
    assert kinds.for_table(t) is kind and kind.analysis.table(run_dir)["arms"] == t["arms"]
    typed = kind.read(t)  # parsed once, as every reader of the table does
    h = Headline("r", "remedy", "finished")
    kind.headline(typed, h)
    assert "Table V: cheapest fix that closes it: fix-b" in " ".join(h.verdict)
    assert [layout.name for layout in h.tables] == ["remedy", "remedy cost"]
    assert ("unfixed Table V", 1, 1, *wilson_interval(1, 1)) in kind.plot_rows(typed)
    assert "Table IV: cheapest fix that closes it: fix-a" in view.remedy_note(run_dir, typed)


def test_each_records_file_and_the_manifest_are_read_once(run_dir: Path, monkeypatch):
    read, loaded = [], []
    real_read, real_load = remedy_results.read_records, remedy_results.Manifest.load
    monkeypatch.setattr(remedy_results, "read_records", lambda path, **kw: read.append(path.name) or real_read(path, **kw))
    monkeypatch.setattr(remedy_results.Manifest, "load", lambda folder: loaded.append(folder) or real_load(folder))
    t = remedy_results.remedy_table(run_dir)
    assert sorted(read) == sorted(p.name for p in (run_dir / "records").iterdir()) and len(read) == 9
    assert loaded == [run_dir] and t["arms"][0]["divergence"]["V"]["k"] == 1
