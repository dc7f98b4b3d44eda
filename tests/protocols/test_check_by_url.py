"""`kit check URL` against a llama-server the test starts by hand (the embedded binary, as a user would run
it), not through the kit: with `--slot-save-path` the kit resets it by erasing its slot and confirms every
reset from the next call's counters; without it every erase is refused, and the check measures what needs no
reset and names what cannot be known. A real host-memory prompt cache (`--cache-ram`, on by default) that
survives the erase is caught from the counters."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kit.cli import cli
from kit.core.errors import NoVerdict
from kit.engines.base import CompletionRequest
from kit.launch.instance import url_provider
from kit.launch.native import NativeServer
from kit.protocols.pinning.protocol import MEASURED_PROMPT, OTHER_PROMPT, _pass_status
from kit.record.files import RecordWriter
from kit.record.model import PinningRecord

pytestmark = pytest.mark.engine

SMALL = ["--cycles", "2", "--per-arm", "2", "--max-tokens", "16", "--calibration-rounds", "1",
         "--always-fresh", "1", "--steady", "2"]


def _server(server_spec, tmp_path, **changes):
    return NativeServer(server_spec(ctx_size=2048, **changes), tmp_path / "server.log")


def _check(url, out):
    result = CliRunner().invoke(cli, ["check", url, *SMALL, "--out", str(out)])
    [run_dir] = [p for p in out.iterdir() if (p / "manifest.json").is_file()]
    return result, json.loads((run_dir / "results" / "pinning.json").read_text()), run_dir


def test_a_hand_started_llama_server_with_slot_save_path_gets_the_full_check(server_spec, tmp_path):
    slots = tmp_path / "slots"
    slots.mkdir()
    with _server(server_spec, tmp_path, cache_ram=0, extra_args=("--slot-save-path", str(slots))) as server:
        result, table, run_dir = _check(server.url, tmp_path / "runs")
    assert result.output.splitlines()[0].startswith("engine: llama.cpp (GET /props: build_info b1-"), result.output
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for info in manifest["passes"].values():  # every pass: an erase, confirmed by 0 cached tokens on its first call
        assert info["reload"]["method"] == "POST /slots/0?action=erase" and info["reload"]["confirmed"] is True
        first = json.loads((run_dir / info["file"]).read_text().splitlines()[0])
        assert first["completion"]["cached_tokens"] == 0 and info["status"] == "OK"
    assert table["gate"]["status"] == "PASS" and table["gate"]["reloads_confirmed"] == [2, 2]
    found = {s["state"] for s in table["states"]}
    assert {"full_eval", "partial", "full_kv<-full_eval"} <= found  # the three states, by telemetry
    assert table["arms"]["differ"] is not None and len(table["cycles"]) == 2
    assert table["regimes"]["steady"]["n"] == 2 and table["regimes"]["always_fresh"]["n"] == 1
    assert "without_reset" not in table and result.exit_code == 0, result.exception


def test_without_slot_save_path_every_erase_is_refused_and_what_needs_no_reset_is_measured(server_spec, tmp_path):
    with _server(server_spec, tmp_path, cache_ram=0) as server:
        result, table, _ = _check(server.url, tmp_path / "runs")
    assert all(p["status"] == "VOID" for p in table["passes"])
    unreset = table["without_reset"]
    assert "HTTP 501" in unreset["why"] and "--slot-save-path DIR" in unreset["why"]
    assert unreset["steady"]["n"] == 2 and unreset["states"] and unreset["cycles"]
    assert table["verdict"]["impossible"][0].startswith("manipulation gate: needs a confirmed reset")
    assert "Impossible without a reset" in result.output
    assert isinstance(result.exception, NoVerdict)  # no OK pass: exit 4, the reasons on its last line


def test_the_host_memory_prompt_cache_survives_the_erase_and_is_named(server_spec, tmp_path):
    slots = tmp_path / "slots"
    slots.mkdir()
    outcomes = []
    with _server(server_spec, tmp_path, extra_args=("--slot-save-path", str(slots))) as server:  # --cache-ram default
        provider = url_provider(server.url, "llamacpp", None, 5)
        for name in ("c1", "c2"):
            with provider.session(name, tmp_path) as live:
                path = tmp_path / f"{name}.jsonl"
                with RecordWriter(path, run_id="r", pass_id=name, protocol="pinning") as writer:
                    for prompt in (MEASURED_PROMPT, OTHER_PROMPT):  # the other prompt moves the first to host memory
                        completion = live.engine.complete(CompletionRequest(prompt, max_tokens=2, seed=42))
                        writer.answered(PinningRecord, completion, unit="measured", phase="cycle", role="burn_in",
                                        arm_index=0, measured=True, state={})
                outcomes.append(_pass_status(live.launch["reload"], writer, path))
    assert outcomes[0] == ("OK", None)
    status, reason = outcomes[1]
    assert status == "VOID" and "a second cache survived the reset" in reason and "--cache-ram 0" in reason
