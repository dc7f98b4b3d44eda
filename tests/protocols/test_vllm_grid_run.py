"""`kit run grid` on vLLM end to end, against fake vLLM 0.11.0 server processes (tests/fake_engine/vllm_serve.py): real
HTTP, the kit's real client, BFCL's real agent loop and checker; only the model is fake (a cache hit
changes its answer, see tests/fake_engine/vllm.py). vLLM needs a GPU, so this is how the lane runs in CI.

Three BFCL episodes, two requests each, passes on, on, off, off (the paper's vLLM order). What the
fake model makes of them, and so the exact counts asserted:
- cache-off run-to-run: 0 of 3 (nothing is ever cached on the cache-off server);
- cache-on run-to-run with both cache-on passes from one process (`server: per_arm`): 1 of 3, the
  first episode, whose opening request meets an empty cache in on1 and on1's blocks in on2 (every
  later opening request hits the BFCL system prompt's shared opening blocks in both passes);
- the same with a fresh server per pass (`server: per_pass`, the container path): 0 of 3;
- path (on1 against off1): 3 of 3, since every cache-on episode hits by its second request.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kit.cli import cli
from tests.fake_engine.vllm_serve import SERVER, serve
from tests.fake_engine.vllm_docker import VllmContainers

TINY = """
protocol: grid
engine: {{ctx_size: 16384, cache_ram: null}}
workload:
  episodes: 3
  ids: [multi_turn_base_29, multi_turn_base_0, multi_turn_base_1]
  max_tokens_cap: 16
  max_requests_per_episode: 2
passes: [on, on, off, off]
server: {server}
seed: 7
"""
FLAGS = ("--max-model-len", "16384", "--enable-prompt-tokens-details")


def run_grid(tmp_path: Path, server: str, *options: str) -> Path:
    protocol = tmp_path / f"grid-vllm-{server}.yaml"
    protocol.write_text(TINY.format(server=server))
    result = CliRunner().invoke(cli, ["run", str(protocol), "--engine", "vllm", "--model", "qwen2.5-7b-instruct",
                                      "--out", str(tmp_path / "out"), *options])
    assert result.exit_code == 0, result.output
    (run_dir,) = (tmp_path / "out").glob("grid-vllm-*")
    return run_dir


def analyze(run_dir: Path) -> dict:
    result = CliRunner().invoke(cli, ["analyze", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert "table V: 1 rows" in result.output
    return json.loads((run_dir / "results" / "grid.json").read_text())


def said(result) -> str:
    """What a failed command said: its output and its one-line error (`kit`'s main prints it)."""
    return f"{result.output} {result.exception}"


def diverged(table: dict) -> dict[str, int]:
    return {name: c["diverged"] for name, c in table["comparisons"].items()}


def records(run_dir: Path, pass_id: str) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "records" / f"{pass_id}.jsonl").read_text().splitlines()]


@pytest.fixture
def arm_urls(tmp_path):
    with serve(tmp_path, *FLAGS, "--enable-prefix-caching") as on, \
            serve(tmp_path, *FLAGS, "--no-enable-prefix-caching") as off:
        yield on, off


def test_by_urls_both_cache_on_passes_from_one_process(tmp_path, arm_urls):
    on, off = arm_urls
    run_dir = run_grid(tmp_path, "per_arm", "--engine-url", f"on={on}", "--engine-url", f"off={off}")
    manifest = json.loads((run_dir / "manifest.json").read_text())
    passes = manifest["passes"]
    assert {p: info["status"] for p, info in passes.items()} == dict.fromkeys(("on1", "on2", "off1", "off2"), "OK")
    table = analyze(run_dir)
    assert diverged(table) == {"run-to-run cache-off": 0, "run-to-run cache-on": 1, "path": 3}
    assert table["comparisons"]["run-to-run cache-on"]["per_episode"]["multi_turn_base_29"]["diverged"]
    assert not any("compared_on" in c for c in table["comparisons"].values())  # absent: compared on token ids
    # the cache-off arm: its launch flag, the server's own word, and no hit on its counters over the pass
    assert passes["off1"]["server_arm"] == {"launched_with_prefix_caching": False, "server_says": False,
                                            "hits_over_pass": 0.0, "queries_over_pass": 0.0}
    assert passes["on1"]["server_arm"]["server_says"] is True and passes["on1"]["server_arm"]["hits_over_pass"] > 0
    # both measures of every cache-on request recorded, agreeing; nothing per request on the cache-off arm
    for record in records(run_dir, "on2"):
        measures = record["completion"]["cache_measures"]
        assert measures["usage"] == measures["metrics_hits"] == record["completion"]["cached_tokens"] > 0
        assert measures["disagree"] is False and record["gate"]["ok"]
    for record in records(run_dir, "off1"):
        assert record["completion"]["cached_tokens"] is None and record["gate"]["ok"]
        assert record["request"]["body"]["seed"] == 7 and record["request"]["body"]["return_token_ids"] is True
    assert passes["on1"]["cache_measure_disagreements"] == 0
    # the run is read as the paper's vLLM row of Table V (Qwen2.5-7B BF16): 3 values, each a small sample
    compared = CliRunner().invoke(cli, ["compare", str(run_dir), "--reference", "paper"])
    assert compared.exit_code == 0, compared.output
    lines = json.loads((run_dir / "analysis" / "compare-paper.json").read_text())["lines"]
    assert [line["published"] for line in lines if line["table"] == "Table V"] == [
        "0/80 = 0.0%", "7/80 = 8.8% [2.5, 17.0]", "50/80 = 62.5% [50.0, 75.0]"]


def test_token_strings_when_the_endpoint_gives_no_ids(tmp_path):
    no_ids = {"FAKE_VLLM_NO_TOKEN_IDS": "1"}
    with serve(tmp_path, *FLAGS, "--enable-prefix-caching", env=no_ids) as on, \
            serve(tmp_path, *FLAGS, "--no-enable-prefix-caching", env=no_ids) as off:
        run_dir = run_grid(tmp_path, "per_arm", "--engine-url", f"on={on}", "--engine-url", f"off={off}")
    table = analyze(run_dir)
    assert {c["compared_on"] for c in table["comparisons"].values()} == {"token_strings"}
    assert diverged(table) == {"run-to-run cache-off": 0, "run-to-run cache-on": 1, "path": 3}
    passes = json.loads((run_dir / "manifest.json").read_text())["passes"]
    assert passes["on1"]["emitted_as"] == {"token_ids": 0, "token_strings": 6}


def test_arms_given_the_wrong_way_round_are_refused_before_any_request(tmp_path, arm_urls):
    on, off = arm_urls
    protocol = tmp_path / "grid.yaml"
    protocol.write_text(TINY.format(server="per_arm"))
    result = CliRunner().invoke(cli, ["run", str(protocol), "--engine", "vllm", "--model", "qwen2.5-7b-instruct",
                                      "--out", str(tmp_path / "out"), "--engine-url", f"on={off}",
                                      "--engine-url", f"off={on}"])
    assert result.exit_code != 0
    assert "pass on1 is a cache-on pass but its server says enable_prefix_caching=False" in said(result)
    assert not list((tmp_path / "out").glob("*/records/on1.jsonl"))  # refused before its first request


@pytest.mark.parametrize("argv, says", [
    (["--engine-url", "on=http://127.0.0.1:1"], "no --engine-url for the cache-off arm"),
    (["--engine-url", "http://127.0.0.1:1"], "names one server, but vLLM fixes prefix caching per server"),
    (["--engine-url", "on=http://127.0.0.1:1", "--engine-url", "off=http://127.0.0.1:1"], "same server for both"),
])
def test_url_mistakes_are_refused_in_one_line(tmp_path, argv, says):
    protocol = tmp_path / "grid.yaml"
    protocol.write_text(TINY.format(server="per_arm"))
    result = CliRunner().invoke(cli, ["run", str(protocol), "--engine", "vllm", "--out", str(tmp_path / "out"), *argv])
    assert result.exit_code != 0 and says in said(result)
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


@pytest.mark.parametrize("server, says", [("shared", "vLLM fixes prefix caching per server process"),
                                          ("per_pass", "cannot restart a server it reaches by --engine-url")])
def test_server_settings_a_url_pair_cannot_serve_are_refused(tmp_path, server, says):
    protocol = tmp_path / "grid.yaml"
    protocol.write_text(TINY.format(server=server))
    result = CliRunner().invoke(cli, ["run", str(protocol), "--engine", "vllm", "--out", str(tmp_path / "out"),
                                      "--engine-url", "on=http://127.0.0.1:1", "--engine-url", "off=http://127.0.0.1:2"])
    assert result.exit_code != 0 and says in said(result) and not (tmp_path / "out").exists()


def test_container_path_fresh_server_per_pass(tmp_path, monkeypatch):
    client = VllmContainers.installed(monkeypatch, tmp_path)
    try:
        run_dir = run_grid(tmp_path, "per_pass", "--launcher", "docker")
    finally:
        client.kill_all()
    table = analyze(run_dir)
    assert diverged(table) == {"run-to-run cache-off": 0, "run-to-run cache-on": 0, "path": 3}
    runs = [call[1] for call in client.called("containers.run")]
    commands = [run["command"] for run in runs]
    # the speed probe's cache-off server, then one container per pass, each with its arm's flag
    assert [("--enable-prefix-caching" in c, "--no-enable-prefix-caching" in c) for c in commands] == \
        [(False, True), (True, False), (True, False), (False, True), (False, True)]
    assert all(run["ipc_mode"] == "host" and run["device_requests"] for run in runs)
    assert all({"--max-num-seqs", "1", "--seed", "7", "--enable-prompt-tokens-details"} <= set(c) for c in commands)
    assert all(c.removed for c in client.containers_made)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    launch = manifest["passes"]["on2"]["launch"]
    assert launch["image_info"]["repo_digests"] and launch["log"] == "container-on2.log"
    assert (run_dir / "logs" / "container-on2.log").is_file()
    assert manifest["engine"]["kind"] == "per_arm" and manifest["engine"]["arms"]["off"]["kind"] == "docker"


def test_native_vllm_serve_one_process_per_arm(tmp_path):
    """`--launcher native`: the kit starts `vllm serve` itself, one process per arm (here a `vllm` shim
    that runs the fake server with the flags the kit passes)."""
    shim = tmp_path / "bin" / "vllm"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\n[ "$1" = serve ] && shift\nexec {sys.executable} {SERVER} "$@"\n')
    shim.chmod(0o755)
    run_dir = run_grid(tmp_path, "per_arm", "--server-bin", str(shim))
    table = analyze(run_dir)
    assert diverged(table) == {"run-to-run cache-off": 0, "run-to-run cache-on": 1, "path": 3}
    passes = json.loads((run_dir / "manifest.json").read_text())["passes"]
    on, off = passes["on2"]["launch"], passes["off1"]["launch"]
    assert on["argv"][:3] == [str(shim), "serve", "Qwen/Qwen2.5-7B-Instruct"] and "--enable-prefix-caching" in on["argv"]
    assert "--no-enable-prefix-caching" in off["argv"] and on["pid"] != off["pid"]
    assert passes["on1"]["launch"]["pid"] == on["pid"]  # both cache-on passes from one process
    assert "Starting vLLM API server" in (run_dir / "logs" / "server-arm-on.log").read_text()


def test_native_without_vllm_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setattr("kit.launch.gpu_setup.default_vllm_venv", lambda: tmp_path / "no-venv")
    protocol = tmp_path / "grid.yaml"
    protocol.write_text(TINY.format(server="per_arm"))
    result = CliRunner().invoke(cli, ["run", str(protocol), "--engine", "vllm", "--out", str(tmp_path / "out")])
    assert result.exit_code != 0 and "kit engines install vllm" in said(result)
    assert not (tmp_path / "out").exists()


def test_resume_runs_an_arm_cut_short_again_whole_on_one_server(tmp_path, arm_urls):
    """A run stopped after on1 (here: its later passes taken out of the manifest, as a kill leaves them
    unrecorded): on resume on1 is superseded and runs again with on2 on one server, so the cache-on
    run-to-run comparison is again of two passes from one process."""
    on, off = arm_urls
    run_dir = run_grid(tmp_path, "per_arm", "--engine-url", f"on={on}", "--engine-url", f"off={off}")
    manifest_path = run_dir / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    first = manifest["passes"]["on1"]["server_session"]
    for pass_id in ("on2", "off1", "off2"):
        manifest["passes"].pop(pass_id)
        (run_dir / "records" / f"{pass_id}.jsonl").unlink()
        (run_dir / "records" / f"{pass_id}.episodes.jsonl").unlink()
    manifest.update(status="interrupted", reason="killed")
    manifest_path.write_text(json.dumps(manifest))
    result = CliRunner().invoke(cli, ["resume", str(run_dir)])  # the URLs are not taken from the folder
    assert result.exit_code != 0 and f"pass --engine-url off={off} --engine-url on={on}" in str(result.exception)
    result = CliRunner().invoke(cli, ["resume", str(run_dir), "--engine-url", f"on={on}", "--engine-url", f"off={off}"])
    assert result.exit_code == 0, said(result)
    told = " ".join(result.output.split())  # the console wraps long lines
    assert "server arm-on stopped after on1" in told and "runs again whole" in told
    passes = json.loads(manifest_path.read_text())["passes"]
    assert passes["on1"]["server_session"] == passes["on2"]["server_session"] != first
    assert (run_dir / "records" / "superseded").is_dir()
    assert diverged(analyze(run_dir)) == {"run-to-run cache-off": 0, "run-to-run cache-on": 0, "path": 3}


def test_alternating_arms_on_servers_the_kit_starts_are_refused(tmp_path):
    """Two vLLM servers the kit starts would both be up at once on one GPU: refused before anything runs."""
    protocol = tmp_path / "grid.yaml"
    protocol.write_text(TINY.format(server="per_arm").replace("passes: [on, on, off, off]", "passes: [on, off, on, off]"))
    result = CliRunner().invoke(cli, ["run", str(protocol), "--engine", "vllm", "--launcher", "docker",
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code != 0 and "keep a cache-on and a cache-off vLLM server up at once" in said(result)
    assert not (tmp_path / "out").exists()
