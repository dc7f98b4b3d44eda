"""Every protocol kind's engine-error path under `--launcher docker`: the engine fails mid-session and the
run ends `failed` with one line naming the session (pass) and where the container's log is.

What is mocked, and why: no Docker daemon and no GPU run here, so the containers are the recording fake
Docker client's (tests/launch/fake_docker.py) and the llama-server inside them is `FakeLlamaServer`
(tests/fake_engine/llamacpp.py), llama-server's HTTP answers served through `httpx.MockTransport`. It fails
on cue: its container exits (status `exited`, a crash line in its log, the request unanswered) or it answers
HTTP 500 while the container keeps running. Everything else is real: the runner, the DockerProvider and
DockerLauncher, the LlamaCppEngine client, each protocol's procedure, and the BFCL worker (a local process).
"""

from __future__ import annotations

import json

import pytest

from kit.run import runner
from kit.launch.docker.container_spec import LLAMACPP_IMAGE
from kit.launch.docker.docker_run import llamacpp_provider
from kit.models.hashing import sha256_file
from kit.protocols import kinds
from kit.record.files import read_records
from tests.launch.fake_docker import FakeDockerClient
from tests.fake_engine.llamacpp import CRASH_LINE, Failure, engine_factory
from tests.launch.test_docker_provider import launcher_for

BFCL = """
engine: {ctx_size: 16384, cache_ram: 0}
workload: {ids: [multi_turn_base_29], prompt_format: chatml, max_tokens_cap: 8, max_requests_per_episode: 2}
"""
GRID = "protocol: grid\npasses: [on, off]\n" + BFCL
SENTINEL = GRID + "server: per_pass\nsentinel: true\ngates: {episode_start_cold: true}\n"
SWEEP = "protocol: sweep\nformats: {Q4_1: {model: source}}\nhistories: 1\nreference_orders: [0]\n" + BFCL
FLAG_ORDER = "protocol: flag_order\narms: [{name: disabled, cache_ram: 0, passes: [on, on]}]\n" + BFCL
PINNING = """
protocol: pinning
engine: {ctx_size: 2048, cache_ram: 0}
cycles: 1
per_arm: 1
max_tokens: 4
calibration: {rounds: 1, repeats: 1}
regimes: {always_fresh: 1, steady: 1}
"""
RESET = {"sessions": 2, "workload": {"items": 2}, "max_tokens": 4}


def run_on_docker(tmp_path, protocol: str, failure: Failure, overrides: dict | None = None):
    """Run `protocol` (a name, or YAML text) on fake containers whose engine fails as `failure` says."""
    if "\n" in protocol:
        (tmp_path / "p.yaml").write_text(protocol)
        protocol = str(tmp_path / "p.yaml")
    client = FakeDockerClient()
    client.add_image(LLAMACPP_IMAGE)
    client.next_states = [{"Status": "running", "Health": {"Status": "healthy"}}]
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    details = {"model_path": str(model), "model_sha256": sha256_file(model), "model_name": "model"}
    loaded, _, _ = kinds.load(protocol, overrides)
    provider = llamacpp_provider(runner.RunOptions(protocol=protocol, launcher="docker"), model, loaded, details,
                                 lambda _: None, launcher=launcher_for(client))
    provider.make_engine = engine_factory(failure)
    options = runner.RunOptions(protocol=protocol, overrides=overrides or {}, out=tmp_path / "out", provider=provider)
    return runner.run(options, say=lambda _: None), client


def assert_failed_naming(result, client, where: str, session: str, died: bool = True):
    """Failed, in one line naming `where` and the session's container log (which holds the crash line)."""
    assert result.status == "failed"
    reason = result.reason
    assert "\n" not in reason and "internal error" not in reason and "AttributeError" not in reason
    assert where in reason
    log = result.run_dir / "logs" / f"container-{session}.log"
    assert f"its log: {log}" in reason
    assert ("the engine died during" in reason) == died
    if died:
        assert CRASH_LINE in log.read_bytes() and "records so far are kept" in reason
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["reason"] == reason
    assert client.containers_made and all(c.removed for c in client.containers_made)
    return manifest


def test_reset_session_whose_container_exits(tmp_path):
    result, client = run_on_docker(tmp_path, "reset", Failure("s1", after=3), RESET)
    manifest = assert_failed_naming(result, client, "during session s1 (item ", "s1")
    assert "warm2)" in result.reason  # the fourth phase of the first item
    assert manifest["passes"]["s1"]["status"] == "failed" and "s2" not in manifest["passes"]
    assert len(read_records(result.run_dir / "records" / "s1.jsonl").records) == 3


def test_reset_session_whose_engine_answers_http_500_while_its_container_runs(tmp_path):
    result, client = run_on_docker(tmp_path, "reset", Failure("s2", after=1, how="http"), RESET)
    assert_failed_naming(result, client, "during session s2 (item ", "s2", died=False)
    assert "llama-server answered HTTP 500: the slot's KV cache is corrupted" in result.reason
    assert json.loads((result.run_dir / "manifest.json").read_text())["passes"]["s1"]["status"] == "OK"


def test_grid_on_one_shared_container(tmp_path):
    result, client = run_on_docker(tmp_path, GRID, Failure("grid", after=1))
    manifest = assert_failed_naming(result, client, "during pass on1 (episode multi_turn_base_29)", "grid")
    assert manifest["passes"]["on1"]["status"] == "failed"


def test_grid_whose_speed_probe_container_exits(tmp_path):
    result, client = run_on_docker(tmp_path, GRID, Failure("estimate"))
    assert_failed_naming(result, client, "during the speed probe (session estimate)", "estimate")


def test_sentinel_request_on_a_container_per_pass(tmp_path):
    result, client = run_on_docker(tmp_path, SENTINEL, Failure("off1"))
    manifest = assert_failed_naming(result, client, "during pass off1 (episode multi_turn_base_29, sentinel)", "off1")
    assert manifest["passes"]["on1"]["status"] in ("OK", "VOID") and manifest["passes"]["off1"]["status"] == "failed"


def test_sweep_cell_on_its_format_container(tmp_path):
    result, client = run_on_docker(tmp_path, SWEEP, Failure("Q4_1-h0-on", after=1))
    manifest = assert_failed_naming(result, client, "during pass Q4_1-h0-on (episode multi_turn_base_29)",
                                    "Q4_1-h0-on")
    assert manifest["passes"]["Q4_1-ref-o0"]["status"] in ("OK", "VOID")


def test_flag_order_arm_container(tmp_path):
    result, client = run_on_docker(tmp_path, FLAG_ORDER, Failure("disabled", after=3))
    manifest = assert_failed_naming(result, client, "during pass disabled-on2 (episode multi_turn_base_29)",
                                    "disabled")
    run = client.called("containers.run")[-1][1]["command"]
    assert run[run.index("--cache-ram") + 1] == "0"
    assert manifest["passes"]["disabled-on1"]["status"] in ("OK", "VOID")


@pytest.mark.parametrize("how", ["exit", "http"])
def test_pinning_pass_container(tmp_path, how):
    result, client = run_on_docker(tmp_path, PINNING, Failure("c1", after=1, how=how))
    assert_failed_naming(result, client, "during pass c1 (pure)", "c1", died=how == "exit")
