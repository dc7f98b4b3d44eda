"""The pinning protocol against Ollama, which cannot run here: the real runner, procedure, Ollama client,
provider and analysis, with the network replaced by httpx.MockTransport serving Ollama's documented
response shapes (tests/fixtures/ollama; tests/fake_engine/ollama.py). `SimulatedOllama` adds the one thing fixtures cannot: an instance
whose prefill time and output bytes follow seed 002's three states (fresh load 216 ms; full-KV reuse
~17.8 ms on an instance that never saw another prompt; template checkpoint ~35 ms, permanent after one
different prompt). The numbers are seed 002's; the engine is simulated, and said so."""

from __future__ import annotations

import json

import pytest

from kit.run import runner
from kit.run.resume import resume
from kit.core.digests import canonical_json, sha256_text
from kit.engines.ollama import OllamaEngine
from kit.launch.instance import OllamaProvider
from tests.fake_engine.clock import Clock
from tests.fake_engine.core import recorded
from tests.fake_engine.ollama import Ollama

SMALL = {"cycles": 2, "per_arm": 3, "max_tokens": 32, "calibration": {"rounds": 2, "repeats": 2},
         "regimes": {"always_fresh": 2, "steady": 3}, "seed": 7}


class SimulatedOllama(Ollama):
    """An Ollama server with one model whose instance has seed 002's three cache states."""

    def __init__(self, unload_works: bool = True):
        super().__init__(chat="chat_no_logprobs.json")
        self.PREFILL_NS = {"fresh": 216_000_000, "full_kv": 17_800_000, "checkpoint": 35_000_000}
        self.unload_works = unload_works
        self.loaded = False
        self.served: list[str] = []
        self.calls_answered = 0

    def state_for(self, prompt: str) -> str:
        if not self.loaded:
            return "fresh"
        if any(p != prompt for p in self.served):
            return "checkpoint"
        return "full_kv"

    def ps_answer(self) -> dict:
        return recorded("ollama", "ps_loaded.json" if self.loaded else "ps_empty.json")

    def unload(self) -> None:
        if self.unload_works:
            self.loaded, self.served = False, []

    def chat_answer(self, body: dict) -> dict:
        prompt = body["messages"][-1]["content"]
        state = self.state_for(prompt)
        self.loaded = True
        self.served.append(prompt)
        self.calls_answered += 1
        answer = super().chat_answer(body)
        jitter = (self.calls_answered % 7) * 150_000  # up to 0.9 ms, deterministic
        answer.update(prompt_eval_duration=self.PREFILL_NS[state] + jitter, prompt_eval_count=116,
                      done_reason="length", model="llama3.2")
        answer["message"] = {"role": "assistant", "content": f"{state} bytes for {prompt[:20]}"}
        return answer


def run_against(fake, tmp_path, unload_timeout=2.0):
    clock = Clock()
    provider = OllamaProvider("http://ollama.test:11434", "llama3.2", unload_timeout=unload_timeout,
                              make_engine=lambda url, model: OllamaEngine(url, model, transport=fake.transport(),
                                                                          sleep=clock.sleep, clock=clock))
    return runner.run(runner.RunOptions(protocol="pinning", overrides=SMALL, out=tmp_path, provider=provider),
                      say=lambda _: None)


def test_three_states_found_from_prefill_time_alone_and_the_flip_sits_at_the_interposed_call(tmp_path):
    result = run_against(SimulatedOllama(), tmp_path)
    assert result.status == "finished", result.reason
    table = result.table
    assert table["telemetry"] is False  # Ollama has no cached-token count: timing did all the work
    calibration = table["calibration"]
    assert calibration["separated"] and [c["name"] for c in calibration["classes"]] == ["full_eval", "partial",
                                                                                         "full_kv"]
    states = {s["state"]: s for s in table["states"]}
    assert set(states) == {"full_eval", "full_kv<-full_eval", "partial"}
    assert all(s["modal_share"] == 1.0 for s in states.values())
    assert table["gate"]["status"] == "PASS" and table["gate"]["arm_prefill_times"]["separate"] is True
    assert table["arms"]["differ"] is True
    assert table["arms"]["fork"]["char"] == 0 and table["arms"]["fork"]["token"] is None  # no tokens asked for
    assert all(c["flip_at_interposed_only"] for c in table["cycles"]) and len(table["cycles"]) == 2
    assert table["regimes"]["always_fresh"]["modal_share"] == 1.0
    assert table["regimes"]["steady"]["states"] == {"full_kv<-full_eval": 3}
    assert table["verdict"]["state_change_flips_bytes"] is True
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    launch = manifest["passes"]["c1"]["launch"]
    assert launch["version"] == "0.12.11" and launch["template"] and launch["parameters"]
    assert manifest["passes"]["c1"]["reload"]["confirmed"] is True
    record = json.loads((result.run_dir / "records" / "c1.jsonl").read_text().splitlines()[1])
    assert record["request"]["endpoint"] == "/api/chat"
    assert record["request"]["body"]["options"] == {"temperature": 0.0, "seed": 7, "num_predict": 32}
    # the protocol's seed is in every request sent; a chat request's prompt hash is that of its messages as sent
    for path in (result.run_dir / "records").glob("*.jsonl"):
        for line in path.read_text().splitlines():
            sent = json.loads(line)
            assert sent["request"]["body"]["options"]["seed"] == 7
            assert sent["prompt_sha256"] == sha256_text(canonical_json(sent["request"]["body"]["messages"]))
    assert record["state"]["source"] == "timing" and record["state"]["state"] == "full_kv"


def test_an_unload_the_roster_never_confirms_voids_every_pass_with_a_clear_message(tmp_path):
    result = run_against(SimulatedOllama(unload_works=False), tmp_path, unload_timeout=1.0)
    assert result.status == "finished"
    table = result.table
    # the first unload finds nothing loaded (confirmed); every later one leaves the model listed
    assert [p["status"] for p in table["passes"]] == ["OK"] + ["VOID"] * (len(table["passes"]) - 1)
    gate = table["gate"]
    assert gate["status"] == "VOID" and gate["reloads_confirmed"] == [0, 2]
    assert "reload not confirmed before c1, c2" in gate["reasons"][0]
    assert "still listed by /api/ps after 1 s" in gate["reasons"][0]
    assert table["arms"]["differ"] is None
    assert table["regimes"]["always_fresh"]["n"] == 0 and table["regimes"]["always_fresh"]["void_passes"]
    assert table["verdict"]["advice"][0].startswith("Manipulation gate VOID: reload not confirmed")


def test_states_that_prefill_time_cannot_separate_are_not_claimed(tmp_path):
    fake = SimulatedOllama()
    fake.PREFILL_NS = {"fresh": 30_000_000, "full_kv": 30_000_000, "checkpoint": 30_000_000}  # all alike
    result = run_against(fake, tmp_path)
    table = result.table
    assert table["calibration"]["separated"] is False
    assert len(table["calibration"]["classes"]) == 1
    assert table["gate"]["status"] == "VOID" and "overlap" in " ".join(table["gate"]["reasons"])
    assert table["arms"]["differ"] is None
    assert table["verdict"]["advice"][0].startswith("Prefill times could not tell")


def test_a_check_against_a_url_records_its_provider_and_refuses_resume(tmp_path):
    from kit.core.errors import KitError
    from kit.record.manifest import Manifest

    result = run_against(SimulatedOllama(), tmp_path)
    manifest = Manifest.load(result.run_dir)
    assert manifest.run.options["provider"] == "ollama"
    assert manifest.run.engine.kind == "ollama" and manifest.run.engine.model == "llama3.2"
    manifest.update(status="failed")  # as if it had stopped half-way
    with pytest.raises(KitError, match="reached by URL"):
        resume(result.run_dir, say=lambda _: None)
