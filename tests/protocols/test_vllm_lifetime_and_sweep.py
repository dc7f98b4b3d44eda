"""Flag × order's server-lifetime variant and the sweep at one format on vLLM, end to end through the
container path: the fake Docker SDK starts fake vLLM 0.11.0 server processes (tests/fake_engine/vllm_serve.py), whose
model answers differently on a cache hit. Three BFCL episodes, two requests each.

What the fake model makes of them (see tests/protocols/test_vllm_grid_run.py for the reasoning):
- a cache-on pass repeated on a fresh server diverges on 0 of 3 episodes; repeated on the same process
  on 1 of 3 (the first episode, whose opening request meets an empty cache only the first time), with or
  without a cache-off pass in between (that pass runs on a cache-off server of its own);
- a cache-on pass against a cache-off one: 3 of 3.
"""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kit.cli import cli
from tests.fake_engine.vllm_docker import VllmContainers

EPISODES = """
workload:
  episodes: 3
  ids: [multi_turn_base_29, multi_turn_base_0, multi_turn_base_1]
  max_tokens_cap: 16
  max_requests_per_episode: 2
engine: {ctx_size: 16384}
seed: 5
"""
FLAG_ORDER = """
protocol: flag_order
arms:
  - {name: fresh, passes: [on, on], server: per_pass}
  - {name: adjacent, passes: [on, on]}
  - {name: between, passes: [on, off, on]}
""" + EPISODES
SWEEP = """
protocol: sweep
formats: {BF16: {model: source}}
histories: 2
reference_orders: [0, 1]
""" + EPISODES


def run(tmp_path: Path, monkeypatch, name: str, text: str) -> tuple[Path, VllmContainers]:
    protocol = tmp_path / f"{name}.yaml"
    protocol.write_text(text)
    client = VllmContainers.installed(monkeypatch, tmp_path)
    try:
        result = CliRunner().invoke(cli, ["run", str(protocol), "--engine", "vllm", "--launcher", "docker",
                                          "--model", "qwen2.5-7b-instruct", "--out", str(tmp_path / "out")])
    finally:
        client.kill_all()
    assert result.exit_code == 0, f"{result.output} {result.exception}"
    (run_dir,) = (tmp_path / "out").glob(f"{name}-*")
    return run_dir, client


def prefix_caching(client: VllmContainers) -> list[str]:
    return ["on" if "--enable-prefix-caching" in call[1]["command"] else "off"
            for call in client.called("containers.run")]


def test_flag_order_server_lifetime(tmp_path, monkeypatch):
    run_dir, client = run(tmp_path, monkeypatch, "flag-order-vllm", FLAG_ORDER)
    table = json.loads((run_dir / "results" / "flag_order.json").read_text())
    cells = table["cells"]
    assert {name: c["run_to_run"]["diverged"] for name, c in cells.items()} == {"fresh": 0, "adjacent": 1,
                                                                                 "between": 1}
    assert cells["between"]["path"]["diverged"] == 3
    assert {name: (c["lifetime"], c["server"]["one_server"]) for name, c in cells.items()} == {
        "fresh": ("per_pass", False), "adjacent": ("shared", True), "between": ("shared", True)}
    assert table["fresh_server_per_arm"] is True
    # the speed probe's cache-off server; fresh: a server per pass; adjacent: one; between: one per setting
    assert prefix_caching(client) == ["off", "on", "on", "on", "on", "off"]
    passes = json.loads((run_dir / "manifest.json").read_text())["passes"]
    assert passes["between-off1"]["server_arm"]["hits_over_pass"] == 0.0
    assert passes["between-on1"]["server_session"] == passes["between-on2"]["server_session"]
    assert passes["between-on1"]["server_session"] != passes["between-off1"]["server_session"]
    analyzed = CliRunner().invoke(cli, ["analyze", str(run_dir)])
    assert analyzed.exit_code == 0 and "table III: 3 rows" in analyzed.output, analyzed.output


def test_sweep_at_the_checkpoints_one_format(tmp_path, monkeypatch):
    run_dir, client = run(tmp_path, monkeypatch, "sweep-vllm", SWEEP)
    table = json.loads((run_dir / "results" / "sweep.json").read_text())
    rows = (run_dir / "results" / "sweep.csv").read_text().splitlines()
    assert rows[0].startswith("cell,format,history") and len(rows) == 3, rows
    diverged = {row.split(",")[0]: int(row.split(",")[6]) for row in rows[1:]}
    assert diverged == {"BF16/h0": 3, "BF16/h1": 3}, table
    # the probe, the two references (cache off) and one cache-on pass per history, each a fresh server
    assert prefix_caching(client) == ["off", "off", "off", "on", "on"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["cells"]["BF16/h1"]["engine"]["format"] == "BF16"
    # a vLLM run cannot be replayed (its checkpoint has no sha256 to find it by): refused in one line
    replayed = CliRunner().invoke(cli, ["replay", str(run_dir)])
    assert replayed.exit_code != 0 and "ran on vLLM" in str(replayed.exception)

