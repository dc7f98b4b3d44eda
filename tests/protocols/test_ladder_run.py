"""A tiny determinism ladder on the real embedded engine: 2 problems, 3 trials, 8-token answers, the F16
format only. Each pass must run on a fresh server that changes its one setting (its argv says so), every
hit and aligned hit must be proven by the engine's cached-token count, and the ladder's L0 and L2 numbers
are recomputed here from the raw records, independently of kit.protocols.ladder."""

from __future__ import annotations

import json

import pytest

from kit.launch.cpu import cpu_backend
from kit.protocols import kinds
from kit.record.files import read_records
from kit.run import runner

pytestmark = pytest.mark.engine

TINY = """
protocol: ladder
engine: {ctx_size: 2048, cache_ram: 0}
workload: {items: 2}
max_tokens: 8
trials: 3
neighbours: 2
chunk: 16
threads: 1
formats: [F16]
seed: 7
"""


def records(run_dir, manifest, pass_id) -> list[dict]:
    return sorted(read_records(run_dir / manifest["passes"][pass_id]["file"]).records, key=lambda r: r["seq"])


def test_a_tiny_ladder_on_the_real_engine(tmp_path):
    protocol = tmp_path / "tiny-ladder.yaml"
    protocol.write_text(TINY)
    result = runner.run(runner.RunOptions(protocol=str(protocol), out=tmp_path, threads=2), say=lambda _: None)
    assert result.status == "finished", result.reason
    run_dir = result.run_dir
    manifest = json.loads((run_dir / "manifest.json").read_text())
    passes = manifest["passes"]
    # L6 adds a pass on the other CPU backend where this CPU runs both (the manifest names the run's backend)
    ran_on = manifest["provenance"]["cpu_backend"]["name"]
    other = "portable" if ran_on == "wheel" else "wheel"
    lacking = cpu_backend.missing(other, cpu_backend.cpu_flags())
    both = [] if lacking else [f"backend-{other}"]
    assert list(passes) == ["base", "control", "batch", "chunk", "threads", "format-F16", *both]
    assert {info["launch"]["cpu_backend"] for name, info in passes.items() if name not in both} == {ran_on}
    assert all(passes[name]["launch"]["cpu_backend"] == other for name in both)
    assert len({info["launch"]["pid"] for info in passes.values()}) == len(passes)  # a fresh server each
    argv = {name: info["launch"]["argv"] for name, info in passes.items()}
    assert argv["batch"][argv["batch"].index("-np") + 1] == "2"
    assert argv["chunk"][argv["chunk"].index("--ubatch-size") + 1] == "16"
    assert argv["threads"][argv["threads"].index("-t") + 1] == "1"
    assert argv["base"][argv["base"].index("-t") + 1] == "2"
    assert "F16" in argv["format-F16"][argv["format-F16"].index("-m") + 1]

    base = records(run_dir, manifest, "base")
    assert [r["label"] for r in base] == ["miss"] * 3 + ["hit"] * 3 + ["miss"] * 3 + ["hit"] * 3
    assert all(r["gate"]["ok"] for r in base)
    assert all(r["completion"]["cached_tokens"] > 0 for r in base if r["label"] == "hit")
    aligned = [r for r in records(run_dir, manifest, "chunk") if r["label"] == "aligned"]
    assert aligned and all(r["completion"]["cached_tokens"] == r["boundary"] and r["boundary"] % 16 == 0
                           for r in aligned)

    table = json.loads((run_dir / "results" / "ladder.json").read_text())
    rows = {(row["rung"], row["what"].split(",")[0]): row for row in table["rungs"]}
    ids = {}
    for r in base:
        ids.setdefault((r["unit"], r["label"]), []).append(r["completion"]["token_ids"])
    l0 = rows[("L0", "the identical request")]
    assert l0["pairs"] == 2 * 2 and l0["identical"] == sum(
        trials[0] == other for (unit, label), trials in ids.items() if label == "miss" for other in trials[1:3])
    l2 = next(row for row in table["rungs"] if row["rung"] == "L2")
    assert l2["pairs"] == 2 * 3 and l2["identical"] == sum(
        ids[(unit, "miss")][0] == hit for (unit, label), hits in ids.items() if label == "hit" for hit in hits[:3])
    assert l2["status"] == ("holds" if l2["identical"] == l2["pairs"] else "diverges")
    assert {row["rung"] for row in table["rungs"]} == {f"L{k}" for k in range(8)}
    assert [row["status"] for row in table["rungs"] if row["rung"] == "L7"] == ["not measured"]
    l6 = next(row for row in table["rungs"] if row["rung"] == "L6" and "CPU backend" in row["what"])
    if lacking:
        assert l6["status"] == "not measured" and all(flag in l6["reason"] for flag in lacking), l6
    else:
        assert l6["status"] in ("holds", "diverges") and l6["what"].startswith(f"the {other} CPU backend vs"), l6
    assert table["headline"]["text"].startswith(("invariant through", "not invariant"))
    assert table["fixes"][0]["fix"] == "none (unfixed)" and table["fixes"][0]["cost"]["tokens_per_s"] > 0

    before = (run_dir / "results" / "ladder.json").read_bytes()
    kinds.of_run(run_dir).results(run_dir)  # what `kit verify` recomputes from the records
    assert (run_dir / "results" / "ladder.json").read_bytes() == before

    # `kit analyze` keeps the table in its findings, and `kit show` / the bundle's report lead with its headline
    from click.testing import CliRunner

    from kit.bundle.show import describe
    from kit.bundle.writer import write_bundle
    from kit.cli import cli

    analyzed = CliRunner().invoke(cli, ["analyze", str(run_dir), "--out", str(tmp_path / "analysis"), "--no-figures"])
    assert analyzed.exit_code == 0, analyzed.output
    assert f"ladder run {manifest['run_id']}:" in analyzed.output and table["headline"]["text"] in analyzed.output
    found = json.loads((tmp_path / "analysis" / "findings.json").read_text())["kinds"]["ladder"]
    assert [(run["run"], run["headline"]) for run in found] == [(manifest["run_id"], table["headline"])]
    bundle = write_bundle([run_dir], tmp_path / "ladder.tar.gz", environ={}).path
    shown = "\n".join(describe(bundle))
    assert table["headline"]["text"] in shown and "Fixes for L2 with their cost" in shown
