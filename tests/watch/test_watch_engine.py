"""`kit watch` in front of the real embedded llama-server: each call classified cold or warm, an alarm for a
prompt whose cold and warm answers differ and none for one whose answers agree, streamed bytes passed
unchanged, concurrent clients, an upstream that dies mid-answer."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest

from kit.launch.native import NativeServer
from kit.protocols import kinds
from kit.record.files import read_records
from kit.watch.serve import in_thread
from kit.workloads.items import MATH_SYSTEM_PROMPT
from tests.watch.tap import Relay

pytestmark = pytest.mark.engine
SCANNED = 16  # GSM8K test items the alarm test may send before it has one that differs and one that agrees


def _records(run_dir: Path) -> list[dict]:
    found = []
    for path in sorted((run_dir / "records").glob("calls-*.jsonl")):
        found.extend(read_records(path, logprobs=False).records)
    return found


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "manifest.json").read_text())


def test_cold_and_warm_calls_are_classified_and_recorded_as_hashes(llama_server_url, tmp_path):
    body = {"prompt": "The capital of France is", "n_predict": 8, "temperature": 0, "seed": 3}
    with in_thread(llama_server_url, tmp_path, quiet=True, store_bodies=True) as watch:
        with httpx.Client(base_url=watch.url, timeout=120) as client:
            cold = client.post("/completion", json={**body, "cache_prompt": False},
                               headers={"Authorization": "Bearer watch-test-secret"})
            warm = client.post("/completion", json={**body, "cache_prompt": True})
            models = client.get("/v1/models")
    assert cold.status_code == warm.status_code == models.status_code == 200
    run_dir = watch.recorder.run_dir
    records = _records(run_dir)
    assert [r["state"]["state"] for r in records] == ["full_eval", "full_kv"]  # GET /v1/models passes unrecorded
    assert [r["cached_tokens"] for r in records] == [cold.json()["timings"]["cache_n"], warm.json()["timings"]["cache_n"]]
    assert records[0]["request_sha256"] == records[1]["request_sha256"]  # cache_prompt is a state directive
    assert records[0]["decoding"] == "greedy" and records[0]["gen_ai"]["gen_ai.request.seed"] == 3
    assert records[1]["completion"]["text"] == warm.json()["content"]  # --store-bodies keeps the normalized answer
    assert "watch-test-secret" not in "".join(p.read_text() for p in run_dir.rglob("*") if p.is_file())
    manifest = _manifest(run_dir)
    assert manifest["status"] == "finished" and manifest["passes"]["calls-0001"]["status"] == "OK"
    table = kinds.of_run(run_dir).results(run_dir).to_json()
    assert table["by_state"] == {"full_eval": 1, "full_kv": 1} and table["recorded_alarms_agree"]


def test_an_alarm_for_a_prompt_whose_cold_and_warm_answers_differ_and_none_where_they_agree(
        llama_server_url, llama_engine, gsm8k_file, tmp_path):
    # Which GSM8K items give two answers cold vs warm depends on the CPU backend's arithmetic (the wheel's and
    # the portable one sum differently): the items are sent in order, each cold, warm, warm, until one of each
    # kind has been seen, and what the client got decides the alarms expected
    lines = gsm8k_file.read_text().splitlines()[:SCANNED]
    got: dict[int, list[str]] = {}
    with in_thread(llama_server_url, tmp_path, quiet=True) as watch:
        with httpx.Client(base_url=watch.url, timeout=300) as client:
            for index, line in enumerate(lines):
                prompt = llama_engine.apply_template([{"role": "system", "content": MATH_SYSTEM_PROMPT},
                                                      {"role": "user", "content": json.loads(line)["question"]}])
                body = {"prompt": prompt, "n_predict": 64, "temperature": 0, "seed": 42}
                got[index] = [client.post("/completion", json={**body, "cache_prompt": cache}).json()["content"]
                              for cache in (False, True, True)]
                if {answers[0] == answers[1] for answers in got.values()} == {True, False}:
                    break
    counts = dict(watch.proxy.tracker.counts)  # once stopped: every call handed over has been observed
    differ = [index for index, answers in got.items() if answers[0] != answers[1]]
    assert differ and len(differ) < len(got), (
        f"among GSM8K's first {len(got)} items, {len(differ)} differ cold vs warm on this backend: the test needs "
        "one that differs and one that agrees (scan more items)")
    assert all(answers[1] == answers[2] for answers in got.values()), "a warm repeat changed its answer"
    records = _records(watch.recorder.run_dir)
    assert [r["state"]["state"] for r in records] == ["full_eval", "full_kv", "full_kv"] * len(got)
    for n, index in enumerate(got):
        expected = [[], ["state_mixture"], []] if index in differ else [[], [], []]
        assert [r["alarms"] for r in records[3 * n:3 * n + 3]] == expected, index
    assert counts["state_mixture"] == len(differ) and counts["determinism"] == 0
    metrics = watch.proxy.metrics.text().decode()
    assert f'kit_watch_alarms_total{{kind="state_mixture"}} {float(len(differ))}' in metrics
    table = kinds.of_run(watch.recorder.run_dir).results(watch.recorder.run_dir).to_json()
    assert table["alarms"]["state_mixture"] == len(differ) and table["recorded_alarms_agree"]


@pytest.mark.parametrize("path, body", [
    ("/completion", {"prompt": "Count: one, two,", "n_predict": 24, "temperature": 0, "stream": True}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Name three colours."}], "max_tokens": 24,
                              "temperature": 0, "stream": True}),
])
def test_streamed_bytes_the_client_gets_are_the_bytes_the_upstream_sent(llama_server_url, tmp_path, path, body):
    with Relay(llama_server_url) as relay, in_thread(relay.url, tmp_path, quiet=True) as watch:
        with httpx.Client(base_url=watch.url, timeout=120) as client, client.stream("POST", path, json=body) as answer:
            chunks = list(answer.iter_raw())
    received = b"".join(chunks)
    assert received == relay.answer_body(path)  # what the upstream put on the wire, de-chunked
    assert received.count(b"data: ") > 10  # it was streamed, event by event
    record, = _records(watch.recorder.run_dir)
    assert record["stream"] and record["state"]["source"] == "telemetry" and record["error"] is None


def test_concurrent_clients_each_get_their_own_answer_and_one_record(llama_server_url, tmp_path):
    prompts = [f"Write the number {n} in words:" for n in range(4)]
    answers: dict[int, str] = {}

    def ask(index: int) -> None:
        with httpx.Client(base_url=watch.url, timeout=300) as client:
            reply = client.post("/completion", json={"prompt": prompts[index], "n_predict": 8, "temperature": 0})
            answers[index] = reply.json()["content"]

    with in_thread(llama_server_url, tmp_path, quiet=True) as watch:
        threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    records = _records(watch.recorder.run_dir)
    assert len(answers) == len(records) == len(prompts)
    assert sorted(r["seq"] for r in records) == list(range(len(prompts)))
    from kit.core.digests import sha256_text

    assert {r["output_sha256"] for r in records} == {sha256_text(text) for text in answers.values()}
    assert all(r["error"] is None and r["state"]["state"] is not None for r in records)


def test_an_upstream_that_dies_mid_stream_cuts_the_client_and_is_recorded(server_spec, tmp_path):
    server = NativeServer(server_spec(ctx_size=1024, threads=1), tmp_path / "dying.log")
    with server, in_thread(server.url, tmp_path, quiet=True) as watch:
        body = {"prompt": "Tell me a very long story about a dragon.", "n_predict": 900, "ignore_eos": True,
                "temperature": 0, "stream": True}  # far longer than the test waits: it cannot end by itself
        with httpx.Client(base_url=watch.url, timeout=120) as client:
            with pytest.raises(httpx.HTTPError), client.stream("POST", "/completion", json=body) as answer:
                for number, _ in enumerate(answer.iter_raw()):
                    if number == 2:
                        server.process.kill()
    record, = _records(watch.recorder.run_dir)
    assert "cut the answer short" in record["error"] and record["output_sha256"] is None
    assert record["alarms"] == [] and _manifest(watch.recorder.run_dir)["status"] == "finished"
