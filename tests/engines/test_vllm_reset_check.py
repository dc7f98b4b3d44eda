"""The pinning protocol's vLLM path, which cannot run here: a prefix-cache reset per pass (dev mode), chat
requests through the OpenAI-compatible client, and cached tokens read from `/metrics` deltas. The
network is the shared fake engine's VllmReplay (tests/fake_engine/vllm.py) serving the vLLM 0.11.0 fixtures of tests/fixtures/vllm (see its README:
shapes from vLLM's sources, values illustrative); the chat body is constructed in the OpenAI chat shape."""

from __future__ import annotations

from pathlib import Path


from kit.engines.base import CompletionRequest
from kit.launch.instance import VllmResetProvider
from kit.protocols.pinning.protocol import _pass_status
from kit.record.model import PinningRecord
from kit.record.files import RecordWriter
from tests.answers import answer
from tests.fake_engine.openai import CHAT
from tests.fake_engine.vllm import VllmReplay

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"
def test_each_session_resets_the_prefix_cache_and_reads_cached_tokens_from_metrics(tmp_path):
    fake = VllmReplay(metrics=["metrics_before.txt", "metrics_after_cold.txt", "metrics_after_cold.txt",
                               "metrics_after_warm.txt"], reset_status=200, chat=CHAT)
    provider = VllmResetProvider("http://vllm.test:8000", transport=fake.transport())
    messages = [{"role": "user", "content": "Why is floating-point addition not associative?"}]
    with provider.session("c1", tmp_path) as live:
        assert live.launch["reload"]["confirm_by_telemetry"] is True
        assert live.launch["reload"]["confirmed"] is None  # a 200 proves nothing yet
        request = CompletionRequest(messages=tuple(messages), max_tokens=2, seed=42, top_logprobs=0)
        cold = live.engine.complete(request)
        warm = live.engine.complete(request)
    assert fake.paths().index("/reset_prefix_cache") < fake.paths().index("/v1/chat/completions")
    assert cold.cached_tokens == 0 and cold.prefill_tokens == 64
    assert warm.cached_tokens == 48 and warm.prefill_tokens == 16


def _records(tmp_path, cached):
    path = tmp_path / f"r{cached}.jsonl"
    body = {"model": "m", "messages": [{"role": "user", "content": "x"}], "seed": 42}
    with RecordWriter(path, run_id="r", pass_id="c1", protocol="pinning") as writer:
        writer.answered(PinningRecord, answer([], body=body, cached=cached, endpoint="/v1/chat/completions", ids=False),
                        unit="measured", phase="cycle", role="burn_in", arm_index=0, measured=True, state={})
    return writer, path


def test_a_reset_counts_as_confirmed_only_when_the_first_request_reused_nothing(tmp_path):
    reload = {"method": "POST /reset_prefix_cache", "confirmed": None, "confirm_by_telemetry": True}
    assert _pass_status(dict(reload), *_records(tmp_path, 0)) == ("OK", None)
    status, reason = _pass_status(dict(reload), *_records(tmp_path, 48))
    assert status == "VOID" and "48 cached tokens, not 0" in reason
    status, reason = _pass_status(dict(reload), *_records(tmp_path, None))
    assert status == "VOID" and "did not say how many prompt tokens it reused" in reason
