"""Records keep the engine's raw answer less the echoes that agree with the record, each replaced by its digest."""

import copy
import dataclasses
import hashlib

import orjson

from kit.core.digests import canonical_json, sha256_json, sha256_text
from kit.engines import llamacpp, ollama
from kit.engines.base import CompletionRequest, Sent
from kit.record.model import BfclRecord, answered


def answer_fields(completion, body: dict) -> dict:
    """The record of `completion` as a reader sees it (only what raw_echo decides matters here)."""
    sent = Sent("/completion", body, "2026-11-30T00:00:00.000+00:00", 0.1)
    record = answered(BfclRecord, dataclasses.replace(completion, sent=sent), run_id="r", pass_id="p",
                      protocol="grid", seq=0, arm="on", action="end_turn")
    return orjson.loads(orjson.dumps(record))

PROMPT = "<|im_start|>user\nSay héllo: 你好<|im_end|>\n<|im_start|>assistant\n"


def llama_body() -> dict:
    """Shape recorded from llama-server 7e4c0a9 (top-2): two emitted ids folded into one UTF-8 entry."""
    return {"index": 0, "content": "你!", "tokens": [18645, 250, 17], "id_slot": 0, "stop": True,
            "prompt": PROMPT, "stop_type": "limit", "tokens_cached": 25,
            "timings": {"cache_n": 0, "prompt_n": 22, "prompt_ms": 269.1, "predicted_n": 3, "predicted_ms": 50.0},
            "completion_probabilities": [
                {"id": 250, "token": "你", "bytes": [228, 189, 160], "logprob": -0.126,
                 "top_logprobs": [{"id": 250, "token": "\ufffd", "bytes": [160], "logprob": -0.126},
                                  {"id": 112, "token": "\ufffd", "bytes": [162], "logprob": -3.47}]},
                {"id": 17, "token": "!", "bytes": [33], "logprob": -0.2,
                 "top_logprobs": [{"id": 17, "token": "!", "bytes": [33], "logprob": -0.2},
                                  {"id": 30, "token": "?", "bytes": [63], "logprob": -1.9}]}]}


def llama_fields(body: dict) -> dict:
    request = llamacpp.request_body(CompletionRequest(prompt=PROMPT, max_tokens=3, seed=42, top_logprobs=2))
    return answer_fields(llamacpp.normalize(body), request)


def test_llama_echoes_are_dropped_with_digests_that_show_they_agreed():
    body = llama_body()
    fields = llama_fields(body)
    assert set(fields["raw_dropped"]) == {"prompt", "tokens", "completion_probabilities"}
    assert fields["raw_dropped"]["prompt"] == sha256_text(PROMPT) == fields["prompt_sha256"]
    assert fields["raw_dropped"]["tokens"] == sha256_json(fields["completion"]["token_ids"])
    probabilities = canonical_json(body["completion_probabilities"]).encode()
    assert fields["raw_dropped"]["completion_probabilities"] == hashlib.sha256(probabilities).hexdigest()
    assert fields["raw"] == {k: v for k, v in body.items() if k not in fields["raw_dropped"]}
    assert fields["completion"]["token_ids"] == [18645, 250, 17] and len(fields["completion"]["logprobs"]) == 2


def test_an_echo_that_disagrees_stays_verbatim():
    body = llama_body()
    body["prompt"] = "<s>" + PROMPT  # e.g. an engine that echoes its BOS
    completion = llamacpp.normalize(body)
    tampered = copy.deepcopy(body)
    tampered["completion_probabilities"][1]["top_logprobs"][1]["logprob"] = -2.0
    tampered["tokens"] = [18645, 250]
    request = llamacpp.request_body(CompletionRequest(prompt=PROMPT, max_tokens=3, seed=42, top_logprobs=2))
    fields = answer_fields(dataclasses.replace(completion, raw=tampered), request)
    assert fields["raw_dropped"] == {}
    assert fields["raw"] == tampered


def test_ollama_logprobs_echo_is_dropped_and_its_context_kept():
    body = {"model": "m", "response": "Hi", "done": True, "done_reason": "stop", "context": [1, 2, 3],
            "prompt_eval_count": 9, "prompt_eval_duration": 5_000_000, "eval_count": 1, "eval_duration": 2_000_000,
            "logprobs": [{"token": "Hi", "logprob": -0.3, "bytes": [72, 105],
                          "top_logprobs": [{"token": "Hi", "logprob": -0.3, "bytes": [72, 105]}]}]}
    fields = answer_fields(ollama.normalize(body), {"model": "m", "prompt": "Say hi", "raw": True})
    assert set(fields["raw_dropped"]) == {"logprobs"}
    assert fields["raw"]["context"] == [1, 2, 3] and fields["raw"]["response"] == "Hi"
