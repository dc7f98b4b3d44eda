"""Each engine's own cache reset (kit.engines.cache_reset) against the recorded shapes: llama-server's slot erase
(501 without --slot-save-path, recorded from the embedded engine), SGLang's /flush_cache, vLLM's
/reset_prefix_cache; and how a pass reads it: confirmed only by the next call's counters, a refusal naming the
server option, a second cache named with how to switch it off."""

from __future__ import annotations

from kit.engines.llamacpp import LlamaCppEngine
from kit.engines.sglang import SglangEngine
from kit.engines.vllm import VllmEngine
from kit.launch.instance import url_provider
from kit.protocols.pinning.protocol import _pass_status
from kit.record.files import RecordWriter
from kit.record.model import PinningRecord
from kit.engines.base import CompletionRequest
from tests.fake_engine.llamacpp import LlamaCpp
from tests.fake_engine.sglang import Sglang
from tests.fake_engine.vllm import VllmModel

URL = "http://engine.test:8080"


def test_llama_server_erases_its_slot_only_with_slot_save_path():
    refused = LlamaCppEngine(URL, transport=LlamaCpp().transport()).reset_cache()
    assert not refused.accepted and "--slot-save-path DIR" in refused.detail and "HTTP 501" in refused.detail
    reload = refused.reload()
    assert reload["confirmed"] is False and reload["without_reset"] is True  # never assumed
    fake = LlamaCpp(slot_save_path=True)
    done = LlamaCppEngine(URL, transport=fake.transport()).reset_cache()
    assert done.accepted and "58 tokens" in done.detail and "--cache-ram 0" in (done.second_cache or "")
    assert done.reload()["confirmed"] is None and done.reload()["confirm_by_telemetry"] is True
    assert (fake.requests[-1].method, fake.requests[-1].url.path) == ("POST", "/slots/0")


def test_sglang_flushes_and_a_busy_server_refuses():
    fake = Sglang()
    assert SglangEngine(URL, transport=fake.transport()).reset_cache().accepted and fake.flushes == 1
    busy = SglangEngine(URL, transport=Sglang(busy=True).transport()).reset_cache()
    assert not busy.accepted and "HTTP 400" in busy.detail


def test_vllm_without_dev_mode_refuses_naming_it():
    refused = VllmEngine(URL, transport=VllmModel(dev_mode=False).transport()).reset_cache()
    assert not refused.accepted and "VLLM_SERVER_DEV_MODE=1" in refused.detail


def _first_call(tmp_path, live, name):
    """Record the session's first call as the pinning protocol does; (writer, path) for _pass_status."""
    path = tmp_path / f"{name}.jsonl"
    prompt = live.engine.apply_template([{"role": "user", "content": "the measured prompt"}])
    with RecordWriter(path, run_id="r", pass_id=name, protocol="pinning") as writer:
        writer.answered(PinningRecord, live.engine.complete(CompletionRequest(prompt, max_tokens=2, seed=42)),
                        unit="measured", phase="cycle", role="burn_in", arm_index=0, measured=True, state={})
    return writer, path


def _sessions(tmp_path, fake):
    with fake.serve() as url:
        provider = url_provider(url, "llamacpp", None, 5)
        for name in ("c1", "c2"):
            with provider.session(name, tmp_path) as live:
                reload = live.launch["reload"]
                yield reload, _pass_status(reload, *_first_call(tmp_path, live, name))


def test_the_reset_is_confirmed_by_the_next_calls_counters(tmp_path):
    found = list(_sessions(tmp_path, LlamaCpp(slot_save_path=True)))
    assert [(status, reload["confirmed"]) for reload, (status, _) in found] == [("OK", True), ("OK", True)]


def test_a_cache_that_survives_the_erase_is_seen_in_the_counters_and_named(tmp_path):
    fake = LlamaCpp(slot_save_path=True, host_cache=True)  # the erase answers 200; the prompt stays cached
    (first, (ok, _)), (second, (status, reason)) = _sessions(tmp_path, fake)
    assert ok == "OK" and first["confirmed"] is True  # nothing was cached yet
    assert status == "VOID" and second["confirmed"] is False
    assert "a second cache survived the reset" in reason and "--cache-ram 0" in reason


def test_a_refused_erase_voids_the_pass_naming_the_option(tmp_path):
    (reload, (status, reason)), _ = _sessions(tmp_path, LlamaCpp())
    assert status == "VOID" and "--slot-save-path DIR" in reason and reload["without_reset"] is True
