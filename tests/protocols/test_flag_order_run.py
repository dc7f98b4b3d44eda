"""Flag × order on the real embedded engine (one BFCL episode, two requests per pass, four arms), checked
against its records: every number of results/flag_order.json recomputes here from the raw records
without the kit's analysis code, each arm ran on a server of its own with its own --cache-ram, and
`kit analyze` reads the run as the four cells of Table III."""

from __future__ import annotations

import itertools
import json
import math
from collections import defaultdict
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.run import runner
from kit.cli import cli
from kit.core.events import EpisodeVerdict
from tests.sent_requests import check_sent

# ten passes on four servers (and a speed probe on a fifth), ~7k prompt tokens in all (~40k with every function
# doc): half a minute on two idle cores, far more on a busy machine, hence a longer limit than the suite's
# 600 s (the whole run happens in the first test)
pytestmark = [pytest.mark.engine, pytest.mark.timeout(1800)]

TINY = """
protocol: flag_order
engine: {ctx_size: 16384}
workload:
  ids: [multi_turn_base_29]      # the shortest first-turn prompt (~4.4k tokens with every function doc)
  function_docs_max: 2           # BFCL's instructions and the first two function docs: a seventh of the
                                 # system prompt (3.2k of 22.6k characters); the long prompt is
                                 # tests/workloads/bfcl/test_bfcl_engine.py's
  max_tokens_cap: 8
  max_requests_per_episode: 2
seed: 7
"""
ARMS = {"default-adjacent": (None, ["on", "on"]), "default-between": (None, ["on", "off", "on"]),
        "disabled-adjacent": ("0", ["on", "on"]), "disabled-between": ("0", ["on", "off", "on"])}


@pytest.fixture(scope="module")
def flag_run(tmp_path_factory, embedded_binary):
    folder = tmp_path_factory.mktemp("flag")
    protocol = folder / "flag-order-tiny.yaml"
    protocol.write_text(TINY)
    events = []
    result = runner.run(runner.RunOptions(protocol=str(protocol), out=folder), emit=events.append, say=lambda _: None)
    assert result.status == "finished", result.reason
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    return result, manifest, events


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def walk(run_dir, info):
    """Per episode, the requests in step order as (prompt sha256, completion token ids)."""
    per_unit = defaultdict(list)
    for record in sorted(lines(run_dir / info["file"]), key=lambda r: (r["unit"], r["step"])):
        per_unit[record["unit"]].append((record["prompt_sha256"], record["completion"]["token_ids"]))
    return per_unit


def diverged(a, b) -> bool:
    return len(a) != len(b) or any(pa != pb or ta != tb for (pa, ta), (pb, tb) in zip(a, b))


def wilson(k, n, z=1.959964):
    p, denom = k / n, 1 + z * z / n
    centre, half = (p + z * z / (2 * n)) / denom, z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def test_every_number_recomputes_from_the_records(flag_run):
    result, manifest, _ = flag_run
    run_dir, table = result.run_dir, result.table
    assert json.loads((run_dir / "results" / "flag_order.json").read_text()) == table
    assert list(table["cells"]) == list(ARMS) and not table["void_passes"]
    walks = {pid: walk(run_dir, info) for pid, info in manifest["passes"].items()}
    for name, (_, kinds) in ARMS.items():
        cell = table["cells"][name]
        on1, on2, off = f"{name}-on1", f"{name}-on2", f"{name}-off1"
        order = manifest["passes"][on1]["order"]
        flags = [int(diverged(walks[on1][u], walks[on2][u])) for u in order]
        k, n = sum(flags), len(flags)
        r2r = cell["run_to_run"]
        assert (r2r["diverged"], r2r["episodes"], r2r["passes"]) == (k, n, [on1, on2])
        assert (r2r["interval"]["lo"], r2r["interval"]["hi"]) == pytest.approx(wilson(k, n))
        # one episode: it sits in the first quartile; the placement test over C(1, k) placements gives p = 1
        assert r2r["quartiles"]["diverged"] == [k, 0, 0, 0] and r2r["quartiles"]["episodes"] == [1, 0, 0, 0]
        scores = [4 * i // n + 1 for i in range(n)]
        null = [sum(scores[i] for i in c) for c in itertools.combinations(range(n), k)]
        observed = sum(s * f for s, f in zip(scores, flags))
        mean = sum(null) / len(null)
        assert r2r["quartiles"]["trend"]["p"] == sum(abs(t - mean) >= abs(observed - mean) for t in null) / len(null)
        if "off" in kinds:
            path = sum(diverged(walks[on1][u], walks[off][u]) for u in order)
            assert cell["path"]["diverged"] == path and cell["path"]["passes"] == [on1, off]
        else:
            assert "path" not in cell
        first = lines(run_dir / manifest["passes"][on1]["file"])
        assert cell["requests_first_pass"] == len([r for r in first if r["action"] != "sentinel"]) == 2
    for setting in ("default", "disabled"):
        check = table["orders"][f"{setting}: {setting}-adjacent vs {setting}-between"]
        for repeat in (1, 2):
            a, b = (walks[f"{setting}-{order}-on{repeat}"] for order in ("adjacent", "between"))
            same = [not diverged(a[u], b[u]) for u in a]
            found = check["cache_on"][f"on{repeat}"]
            assert found["identical"] is all(same) and found["episodes_identical"] == sum(same)
            assert found["tokens"] == sum(len(tokens) for requests in a.values() for _, tokens in requests)
        assert check["identical"] is all(c["identical"] for c in check["cache_on"].values())


def test_each_arm_ran_on_a_fresh_server_of_its_own(flag_run):
    result, manifest, _ = flag_run
    passes = manifest["passes"]
    assert list(passes) == [f"{name}-{kind}" for name, (_, kinds) in ARMS.items()
                            for kind in (["on1", "on2"] if kinds == ["on", "on"] else ["on1", "off1", "on2"])]
    pids = {}
    for name, (flag, _) in ARMS.items():
        launches = [info["launch"] for pid, info in passes.items() if pid.startswith(name + "-")]
        assert len({launch["pid"] for launch in launches}) == 1, name  # the passes of one arm share its server
        pids[name] = launches[0]["pid"]
        argv = launches[0]["argv"]
        assert (argv[argv.index("--cache-ram") + 1] if "--cache-ram" in argv else None) == flag, argv
        assert (result.run_dir / "logs" / f"server-{name}.log").is_file()
        # a fresh server: the arm's very first request found nothing cached
        first = lines(result.run_dir / passes[f"{name}-on1"]["file"])[0]
        assert first["step"] == 0 and first["completion"]["cached_tokens"] == 0
        assert result.table["cells"][name]["server"]["pids"] == [pids[name]]
    assert len(set(pids.values())) == 4 and result.table["fresh_server_per_arm"] is True
    # the speed probe ran on a server of its own, not on the first arm's, or an earlier run's measurement of the
    # same request on the same servers was read from the kit's speed cache (the shared grid's, where it ran first)
    speed, probe_log = manifest["estimate"]["speed"], result.run_dir / "logs" / "server-estimate.log"
    assert manifest["estimate"]["seconds"] > 0 and speed["measured_at"]
    if speed["measured"].startswith("by this run"):
        assert probe_log.is_file()
    else:
        assert speed["measured"].startswith("by an earlier run") and not probe_log.exists()
        key = json.loads(Path(speed["cache_file"]).read_text())["key"]
        assert key["cpu_backend_sha256"] == manifest["provenance"]["cpu_backend"]["library_sha256"]
    for pass_id, info in passes.items():
        assert info["status"] == "OK", (pass_id, info.get("reason"))
        for record in lines(result.run_dir / info["file"]):
            assert record["request"]["body"]["cache_prompt"] is (info["arm"] == "on")
            if info["arm"] == "off":
                assert record["completion"]["cached_tokens"] == 0


def test_every_request_sent_carries_the_protocols_seed(flag_run):
    result, _, _ = flag_run
    assert check_sent(result.run_dir, seed=7) == 10 * 2  # ten passes of one two-request episode


def test_live_verdicts_cover_every_comparison(flag_run):
    result, _, events = flag_run
    verdicts = {e.comparison: e for e in events if isinstance(e, EpisodeVerdict)}
    assert set(verdicts) == {f"run-to-run cache-on {name}" for name in ARMS} | {
        "path default-between", "path disabled-between"}
    for name in ARMS:
        assert verdicts[f"run-to-run cache-on {name}"].diverged == bool(
            result.table["cells"][name]["run_to_run"]["diverged"])


def test_kit_analyze_gives_table_iii_rows_for_the_cells(flag_run, tmp_path):
    result, _, _ = flag_run
    out = tmp_path / "analysis"
    analysed = CliRunner().invoke(cli, ["analyze", str(result.run_dir), "--out", str(out), "--no-figures",
                                        "--block-replicates", "200", "--cluster-replicates", "50"])
    assert analysed.exit_code == 0, analysed.output
    rows = json.loads((out / "findings.json").read_text())["tables"]["III"]["rows"]
    expected = {(c["prompt_cache"], c["order"]): (c["run_to_run"]["diverged"], c["run_to_run"]["episodes"])
                for c in result.table["cells"].values()}
    assert {(r["prompt_cache"], r["order"]): (r["k"], r["n"]) for r in rows} == expected
    assert set(expected) == {("default", "adjacent"), ("default", "cache-off pass in between"),
                             ("disabled", "adjacent"), ("disabled", "cache-off pass in between")}
    assert {r["format"] for r in rows} == {"Q4_1"}
