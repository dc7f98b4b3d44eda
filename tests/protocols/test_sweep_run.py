"""The sweep on the real engine, sized down: the shipped Q4_1 and its F16 dequantization made with gguf,
one BFCL episode, two requests. Every number of results/sweep.json is recomputed here from the raw
records; the manifest must show a fresh server per pass, each serving its format's file, in plan order."""

from __future__ import annotations

import json
import statistics

import pytest

from kit.run import runner
from kit.analysis.collect import collect
from kit.models.hashing import sha256_file
from kit.record.files import read_records
from tests.sent_requests import check_sent

pytestmark = pytest.mark.engine

TINY = """
protocol: sweep
engine: {ctx_size: 16384, cache_ram: 0}
workload: {ids: [multi_turn_base_29], max_tokens_cap: 8, max_requests_per_episode: 2, function_docs_max: 2}
formats:
  Q4_1: {model: source}
  F16: {derive: F16}
top_logprobs: 5
seed: 7
"""


def run_sweep(tmp_path, extra: str):
    protocol = tmp_path / "tiny-sweep.yaml"
    protocol.write_text(TINY + extra)
    result = runner.run(runner.RunOptions(protocol=str(protocol), out=tmp_path), say=lambda _: None)
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    return result, manifest


def requests_of(run_dir, info) -> dict[str, list[dict]]:
    by_unit: dict[str, list[dict]] = {}
    for line in (run_dir / info["file"]).read_text().splitlines():
        record = json.loads(line)
        by_unit.setdefault(record["unit"], []).append(record)
    return {u: sorted(rs, key=lambda r: r["step"]) for u, rs in by_unit.items()}


def diverged(a: list[dict], b: list[dict]) -> bool:
    """Independent of kit.record.divergence: same request count, prompts and emitted token ids, request by request."""
    if len(a) != len(b):
        return True
    return any(x["prompt_sha256"] != y["prompt_sha256"] or x["completion"]["token_ids"] != y["completion"]["token_ids"]
               for x, y in zip(a, b))


def check_results(result, manifest) -> dict:
    table = json.loads((result.run_dir / "results" / "sweep.json").read_text())
    passes = manifest["passes"]
    for name, cell in manifest["cells"].items():
        on, reference = cell["passes"]
        a, b = requests_of(result.run_dir, passes[on]), requests_of(result.run_dir, passes[reference])
        expected = sum(diverged(a[u], b[u]) for u in a if u in b)
        assert table["cells"][name]["diverged"] == expected
        assert table["cells"][name]["episodes"] == len(set(a) & set(b))
    for label, row in table["formats"].items():
        rates = [c["rate"] for c in table["cells"].values() if c["format"] == label]
        assert row["mean"] == pytest.approx(statistics.fmean(rates))
        assert (row["min"], row["max"]) == (min(rates), max(rates))
    return table


def test_a_small_sweep_serves_each_format_from_a_fresh_server_and_its_numbers_recompute(tmp_path, embedded_binary):
    result, manifest = run_sweep(tmp_path, "histories: 1\nreference_orders: [0]\n")
    assert result.status == "finished", result.reason
    passes = manifest["passes"]
    assert list(passes) == ["Q4_1-ref-o0", "Q4_1-h0-on", "F16-ref-o0", "F16-h0-on"]  # plan order, Williams row 0
    assert all(info["status"] == "OK" for info in passes.values())
    # a sweep pass writes the grid's records, which say the protocol's own name and its kind
    name = manifest["protocol"]["name"]
    for info in passes.values():
        for file in (info["file"], info["episodes_file"]):
            said = {(r["protocol"], r["protocol_name"], r["protocol_kind"])
                    for r in read_records(result.run_dir / file).records}
            assert said == {("grid", name, "sweep")}, file
    assert check_sent(result.run_dir, seed=7) == 4 * 2  # the protocol's seed in every request sent
    pids = {info["launch"]["pid"] for info in passes.values()}
    assert len(pids) == 4  # a fresh server for every pass
    files = manifest["formats"]
    derived = files["F16"]
    assert derived["how"] == "derived F16" and derived["from_sha256"] == files["Q4_1"]["sha256"]
    assert sha256_file(derived["path"]) == derived["sha256"]
    for pass_id, info in passes.items():
        argv = info["launch"]["argv"]
        assert argv[argv.index("-m") + 1] == files[info["format"]]["path"]
        assert argv[argv.index("--cache-ram") + 1] == "0"
    table = check_results(result, manifest)
    assert set(table["formats"]) == {"Q4_1", "F16"}
    # kit analyze reads the run as one sweep cell per (format, history), each with its two passes only
    views = collect([result.run_dir]).runs
    assert sorted(r.run_id.split("/", 1)[1] for r in views) == ["F16/h0", "Q4_1/h0"]
    for run in views:
        assert run.kind == "sweep" and len(run.ok_passes) == 2
        assert run.format in ("Q4_1", "F16") and run.manifest.engine.model_path == files[run.format]["path"]


@pytest.mark.slow
def test_references_under_two_orders_and_a_second_process_are_checked(tmp_path, embedded_binary):
    result, manifest = run_sweep(tmp_path, "histories: 2\nreference_orders: [0, 1]\nreplicate: true\n")
    assert result.status == "finished", result.reason
    table = check_results(result, manifest)
    for label in ("Q4_1", "F16"):
        ref0, ref1 = (requests_of(result.run_dir, manifest["passes"][f"{label}-ref-o{o}"]) for o in (0, 1))
        same = not any(diverged(ref0[u], ref1[u]) for u in ref0)
        assert table["reference_check"][label]["identical"] == same
        on, again = (requests_of(result.run_dir, manifest["passes"][p]) for p in (f"{label}-h0-on", f"{label}-h0-on-r2"))
        assert table["replicates"][label]["diverged"] == sum(diverged(on[u], again[u]) for u in on)
    assert [p for p in manifest["passes"] if p.endswith("-on")] == ["Q4_1-h0-on", "F16-h0-on", "F16-h1-on",
                                                                     "Q4_1-h1-on"]
