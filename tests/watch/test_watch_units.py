"""kit watch without an engine: request hashing and decoding, answers normalized from recorded vLLM and Ollama
shapes (tests/fixtures, served by a fake upstream on aiohttp's test server: neither runs here) and classified, the alarm
tracker, records rotating across files, and the command line's refusals."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import json
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from aiohttp import test_utils

from kit.protocols import kinds
from kit.record.alarms import Call, Tracker
from kit.record.cache_state import calibrate
from kit.watch import observe
from kit.watch.proxy import Proxy, Settings
from kit.watch.recorder import Recorder

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
UPSTREAM = "http://upstream.test"
# seed 002's prefill times (ms) on its CUDA box: full evaluation, template checkpoint, full-KV reuse
SEED_002 = calibrate([("full_eval", 216.0), ("full_eval", 199.0), ("partial", 36.1), ("partial", 33.2),
                      ("full_kv", 17.8), ("full_kv", 16.3)])


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


@dataclass
class Answer:
    """A recorded answer as a fake upstream gives it: status, content type, and the chunks it streams."""

    status: int
    chunks: tuple[bytes, ...]
    content_type: str = "application/json"


def answer(status: int, *chunks: bytes, content_type: str = "application/json") -> Answer:
    return Answer(status, chunks, content_type)


def jsonb(value: Any) -> bytes:
    return json.dumps(value).encode()


def test_the_request_hash_leaves_out_transport_and_state_fields_only():
    body = {"prompt": "2+2=", "n_predict": 4, "temperature": 0, "seed": 1}
    same = observe.request_hash("/completion", body)
    assert observe.request_hash("/completion", {**body, "stream": True, "cache_prompt": False}) == same
    assert observe.request_hash("/completion", dict(reversed(body.items()))) == same
    assert observe.request_hash("/completion", {**body, "seed": 2}) != same
    assert observe.request_hash("/completions", body) != same


@pytest.mark.parametrize("body, expected", [
    ({"temperature": 0}, "greedy"), ({"options": {"temperature": 0.0}}, "greedy"), ({"top_k": 1}, "greedy"),
    ({"seed": 7, "temperature": 0.8}, "seeded"), ({"options": {"seed": 7}}, "seeded"), ({"seed": True}, None),
    ({"temperature": 0.7}, None), ({}, None)])
def test_only_greedy_or_seeded_requests_are_deterministic(body, expected):
    assert observe.decoding(body) == expected


def _proxy(handler: Callable[[str], Answer], delay: float = 0.0, received: list[Any] | None = None,
           also: Callable[[dict[str, Any]], None] | None = None,
           **settings: Any) -> tuple[Callable, list[dict[str, Any]]]:
    """A proxy in front of a fake upstream (aiohttp's test server, answering `handler(path)` chunk by chunk,
    keeping the headers of each request it got in `received`) and a function that sends it calls through its
    ASGI app; and the record fields it made (each also given to `also`, the proxy's report)."""
    records: list[dict[str, Any]] = []

    async def upstream(request: web.Request) -> web.StreamResponse:
        await request.read()
        if received is not None and request.path != "/metrics":
            received.append(request.headers.copy())  # case-insensitive, as HTTP names are
        given = handler(request.path)
        if request.path != "/metrics":
            await asyncio.sleep(delay)
        reply = web.StreamResponse(status=given.status, headers={"Content-Type": given.content_type})
        await reply.prepare(request)
        for chunk in given.chunks:
            await reply.write(chunk)
        await reply.write_eof()
        return reply

    def send(calls: list[tuple[str, dict[str, Any]]], together: bool = False,
             headers: dict[str, str] | None = None) -> list[httpx.Response]:
        async def run() -> list[httpx.Response]:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", upstream)
            async with test_utils.TestServer(app) as server:
                proxy = Proxy(Settings(str(server.make_url("/")).rstrip("/"), **settings), record=records.append,
                              report=also)
                async with proxy.upstream(), httpx.AsyncClient(transport=httpx.ASGITransport(app=proxy.app),
                                                               base_url="http://proxy", headers=headers) as client:
                    if together:
                        return list(await asyncio.gather(*(client.post(path, json=body) for path, body in calls)))
                    return [await client.post(path, json=body) for path, body in calls]
        return asyncio.run(run())
    return send, records


@pytest.mark.parametrize("observer", [False, True], ids=["on the loop", "observer process"])
def test_vllm_answers_are_classified_from_usage_or_from_metrics_deltas_and_raise_a_mixture_alarm(observer):
    answers = iter([fixture("vllm/completion_logprobs_null_cached.json"), fixture("vllm/completion_cached_tokens.json")])
    metrics = iter((FIXTURES / "vllm" / name).read_text() for name in
                   ("metrics_before.txt", "metrics_after_cold.txt", "metrics_after_cold.txt", "metrics_after_warm.txt"))

    def upstream(path: str) -> Answer:
        if path == "/metrics":
            return answer(200, next(metrics).encode(), content_type="text/plain")
        return answer(200, jsonb(next(answers)))

    send, records = _proxy(upstream, counters=True, reuse_tolerance=16, observer=observer)
    body = {"model": "Qwen/Qwen2.5-7B-Instruct", "prompt": "Janet's ducks", "max_tokens": 8, "temperature": 0}
    replies = send([("/v1/completions", body), ("/v1/completions", body)])
    assert [r.json() for r in replies] == [fixture("vllm/completion_logprobs_null_cached.json"),
                                           fixture("vllm/completion_cached_tokens.json")]  # passed unchanged
    cold, warm = records
    assert (cold["state"]["state"], cold["cached_tokens"]) == ("full_eval", 0)  # from the /metrics deltas
    assert (warm["state"]["state"], warm["cached_tokens"]) == ("full_kv", 48)  # usage: 48 of 64, a block left
    assert warm["gen_ai"]["gen_ai.usage.cache_read.input_tokens"] == 48
    assert cold["request_sha256"] == warm["request_sha256"] and cold["output_sha256"] != warm["output_sha256"]
    assert (cold["alarms"], warm["alarms"]) == ([], ["state_mixture"])
    assert cold["tokens_sha256"] is None and warm["tokens_sha256"] is not None  # ids only where vLLM gave them


def test_metrics_deltas_are_not_taken_for_calls_that_overlap():
    texts = [(FIXTURES / "vllm" / name).read_text() for name in ("metrics_before.txt", "metrics_after_cold.txt")]
    reads = []

    def upstream(path: str) -> Answer:
        if path == "/metrics":
            reads.append(path)
            return answer(200, texts[min(len(reads), 2) - 1].encode(), content_type="text/plain")
        return answer(200, jsonb(fixture("vllm/completion_logprobs_null_cached.json")))

    send, records = _proxy(upstream, delay=0.3, counters=True, reuse_tolerance=16)
    body = {"prompt": "Janet's ducks", "max_tokens": 8, "temperature": 0}
    send([("/v1/completions", body), ("/v1/completions", {**body, "seed": 1})], together=True)
    assert [r["state"]["state"] for r in records] == [None, None]  # two in flight: no delta is this call's own
    assert [r["cached_tokens"] for r in records] == [None, None]
    assert len(reads) == 1  # only the first found nothing in flight; it was not alone at its end


def test_a_clients_authorization_reaches_the_upstream_and_no_record_file_or_console_line(tmp_path):
    import io

    from kit.core.safe_console import SafeConsole
    from kit.watch.console import Live

    secrets = {"authorization": "Bearer sk-proj-Wq3tZ81xKc", "x-api-key": "sk-ant-Hx7Pq2", "cookie": "sid=c00k1e-9f"}
    answers = iter([answer(200, jsonb(fixture("vllm/completion_cached_tokens.json"))),
                    answer(401, jsonb({"error": {"message": "invalid api key", "type": "auth"}}))])
    received: list[Any] = []
    console = io.StringIO()
    live = Live(SafeConsole(file=console, width=200))
    send, records = _proxy(lambda path: next(answers), received=received, also=live.call, store_bodies=True)
    body = {"model": "m", "prompt": "Janet's ducks", "max_tokens": 8, "temperature": 0}
    replies = send([("/v1/completions", body), ("/v1/completions", body)], headers=secrets)
    assert [r.status_code for r in replies] == [200, 401] and len(records) == 2
    assert [{name: got.get(name) for name in secrets} for got in received] == [secrets] * 2  # forwarded
    recorder = Recorder.open(tmp_path, protocol={"name": "watch", "kind": "watch", "resolved": {}})
    for fields in records:
        recorder.add(fields)
    recorder.close()
    written = "".join(p.read_text() for p in recorder.run_dir.rglob("*") if p.is_file())
    assert '"request"' in written and "HTTP 401" in written  # bodies and the error were recorded
    for secret in ("Wq3tZ81xKc", "Hx7Pq2", "c00k1e-9f"):
        assert secret not in written and secret not in console.getvalue() and secret not in repr(records)


def test_a_request_over_the_size_limit_is_refused_and_not_forwarded(monkeypatch):
    from kit.watch import proxy as proxy_module

    monkeypatch.setattr(proxy_module, "WATCH_REQUEST_BYTES_MAX", 64)
    forwarded = []
    send, records = _proxy(lambda path: forwarded.append(path) or answer(200, b"{}"))
    reply, = send([("/completion", {"prompt": "x" * 100})])
    assert reply.status_code == 413 and "nothing was forwarded" in reply.json()["error"]["message"]
    assert forwarded == [] and records == []


@pytest.mark.parametrize("observer", [False, True], ids=["on the loop", "observer process"])
def test_a_streamed_ollama_answer_is_assembled_and_classified_by_prefill_time(observer):
    final = fixture("ollama/generate.json")
    words = final["response"].split(" ")
    lines = [{"model": final["model"], "response": w + (" " if i < len(words) - 1 else ""), "done": False}
             for i, w in enumerate(words)]
    lines.append({**final, "response": ""})
    stream = b"".join(json.dumps(line).encode() + b"\n" for line in lines)

    def upstream(path: str) -> Answer:
        return answer(200, *stream.splitlines(keepends=True), content_type="application/x-ndjson")

    for calibration, state in ((SEED_002, "full_eval"), (None, None)):
        send, records = _proxy(upstream, calibration=calibration, observer=observer)
        reply, = send([("/api/generate", {"model": "llama3.2", "prompt": "Why is the sky blue?",
                                          "options": {"seed": 42}})])
        assert reply.content == stream
        record, = records
        assert record["stream"] and record["output_sha256"] == observe.sha256_text(final["response"])
        assert record["prefill_ms"] == final["prompt_eval_duration"] / 1e6 and record["state"]["state"] == state
        assert record["state"]["source"] == ("timing" if calibration else "none") and record["decoding"] == "seeded"


def test_the_calibration_of_a_kit_check_run_is_read_from_its_manifest(tmp_path):
    from kit.record.manifest import Manifest
    from kit.watch.cli import calibration_of

    Manifest.create(tmp_path, protocol={"name": "pinning", "kind": "pinning"}, calibration=SEED_002.to_json())
    assert calibration_of(tmp_path) == SEED_002
    assert observe.state_of(None, SEED_002).state is None  # no answer: nothing to classify


def test_an_upstream_error_answer_passes_unchanged_and_is_recorded_as_failed():
    error = fixture("vllm/error_context_overflow.json")
    send, records = _proxy(lambda path: answer(400, jsonb(error)))
    reply, = send([("/v1/completions", {"prompt": "x", "temperature": 0})])
    assert reply.status_code == 400 and reply.json() == error
    assert records[0]["status"] == 400 and records[0]["output_sha256"] is None and "HTTP 400" in records[0]["error"]


def _call(request: str, state: str | None, output: str | None, decoding: str | None = "greedy") -> Call:
    return Call(request, decoding, state, output)


def test_the_alarm_kinds():
    tracker = Tracker()
    seen = [tracker.see(c) for c in (
        _call("a", "full_eval", "x"), _call("a", "full_kv", "y"), _call("a", "full_kv", "y"),  # a mixture, once
        _call("a", "full_kv", "z"),  # a third output in a state that had one: determinism
        _call("b", "full_kv", "x"), _call("b", "full_kv", "x", None), _call("b", "full_kv", "q", None),  # sampled
        _call("b", None, "w"), _call("b", "full_kv", None))]  # unknown state; no answer
    assert seen == [[], ["state_mixture"], [], ["determinism"], [], [], [], ["unexplained"], []]
    assert tracker.counts == {"state_mixture": 1, "determinism": 1, "unexplained": 1, "state_jump": 0}


def test_a_state_jump_is_an_alarm_only_on_a_pinned_instance_and_not_when_warming_up():
    calls = [_call("a", "full_eval", "x"), _call("a", "full_kv", "x"), _call("a", "full_kv", "x"),
             _call("a", "partial", "x")]
    assert [Tracker(pinned=True).see(c) for c in calls][-1] == []  # a fresh tracker per call: nothing seen
    pinned, loose = Tracker(pinned=True), Tracker()
    assert [pinned.see(c) for c in calls] == [[], [], [], ["state_jump"]]
    assert [loose.see(c) for c in calls] == [[], [], [], []]


def _fields(n: int) -> dict[str, Any]:
    return {"prompt_sha256": "p" * 64, "endpoint": "/completion", "request_sha256": f"r{n % 2}", "stream": False,
            "status": 200, "decoding": "greedy", "output_sha256": f"o{n % 3}", "tokens_sha256": None,
            "state": {"state": "full_kv", "confidence": 1.0, "source": "telemetry", "detail": ""},
            "model": "m", "engine_build": None, "alarms": [], "gen_ai": {}, "wall_seconds": 0.01 * (n + 1),
            "started": "2026-01-01T00:00:00.000+00:00"}


def _watch_run(parent: Path, calls: int = 4, rotate: int = 3) -> tuple[Recorder, Tracker]:
    """A closed watch run of `calls` greedy calls (two requests alternating, three outputs in turn: from the
    third call on, each is a determinism alarm), its records rotating every `rotate`; and the tracker that
    saw them."""
    recorder = Recorder.open(parent, rotate=rotate, protocol={"name": "watch", "kind": "watch", "resolved": {}})
    tracker = Tracker()
    for n in range(calls):
        fields = _fields(n)
        fields["alarms"] = tracker.see(Call(fields["request_sha256"], "greedy", "full_kv", fields["output_sha256"]))
        recorder.add(fields)
    recorder.close()
    return recorder, tracker


def test_records_rotate_into_passes_and_the_results_read_them_all_in_order(tmp_path):
    recorder, tracker = _watch_run(tmp_path, calls=5, rotate=2)
    manifest = json.loads((recorder.run_dir / "manifest.json").read_text())
    assert {p: (i["status"], i["records"]) for p, i in manifest["passes"].items()} == {
        "calls-0001": ("OK", 2), "calls-0002": ("OK", 2), "calls-0003": ("OK", 1)}
    assert manifest["status"] == "finished"
    table = kinds.of_run(recorder.run_dir).results(recorder.run_dir).to_json()
    assert table["calls"] == 5 and table["recorded_alarms_agree"]
    assert table["alarms"]["determinism"] == sum(tracker.counts.values()) == 3
    assert (recorder.run_dir / "results" / "watch.csv").read_text().count("\n") == 1 + 2  # two repeated requests


def test_a_watch_run_bundles_and_verifies_with_its_results_recomputed(tmp_path):
    from kit.bundle.show import describe
    from kit.bundle.verify import verify_bundle
    from kit.bundle.writer import write_bundle

    recorder, _ = _watch_run(tmp_path / "runs")  # its results written when it closed, as every run's are
    assert (recorder.run_dir / "results" / "watch.json").is_file()
    bundle = write_bundle([recorder.run_dir], tmp_path / "watch.tar.gz", environ={}).path
    verdict = verify_bundle(bundle)
    assert verdict.ok, verdict
    assert any(name.endswith("results/watch.json") for name in verdict.results_compared)
    assert "4 watched calls; alarms: determinism 2" in "\n".join(describe(bundle))


def test_a_watch_run_stopped_with_ctrl_c_has_its_results_and_its_bundle_verifies(tmp_path, monkeypatch):
    """`kit watch` as Ctrl-C stops it: uvicorn shuts down, then raises KeyboardInterrupt in `serve`; the run
    folder then holds the results of the calls it recorded, and `kit bundle` of it verifies."""
    import threading

    import uvicorn

    from kit.bundle.verify import verify_bundle
    from kit.bundle.writer import write_bundle
    from kit.watch.serve import listening, serve
    from tests.fake_engine.llamacpp import LlamaCpp

    real_run = uvicorn.Server.run

    def run_then_ctrl_c(self, sockets=None):
        thread = threading.Thread(target=real_run, args=(self,), kwargs={"sockets": sockets}, daemon=True)
        thread.start()
        while not self.started and thread.is_alive():
            thread.join(0.01)
        proxy = "http://127.0.0.1:%d" % sockets[0].getsockname()[1]
        for prompt in ("a", "b", "a"):
            httpx.post(proxy + "/completion", json={"prompt": prompt, "temperature": 0, "n_predict": 4}, timeout=30)
        self.should_exit = True
        thread.join(30)
        raise KeyboardInterrupt

    monkeypatch.setattr(uvicorn.Server, "run", run_then_ctrl_c)
    with LlamaCpp().serve() as upstream:
        run_dir = serve(upstream, "auto", listening("127.0.0.1", 0), tmp_path / "runs", quiet=True)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    table = json.loads((run_dir / "results" / "watch.json").read_text())
    assert manifest["status"] == "finished" and table["calls"] == 3, (manifest, table)
    verdict = verify_bundle(write_bundle([run_dir], tmp_path / "stopped.tar.gz", environ={}).path)
    assert verdict.ok, verdict.lines()
    assert any(name.endswith("results/watch.json") for name in verdict.results_compared)


def refusal(*args: str) -> str:
    """The one-line error `kit watch ARGS` stops with (in this process: the command's own checks)."""
    from kit.cli import cli
    from kit.core.errors import KitError

    with pytest.raises(KitError) as raised:
        cli.main(["watch", *args], standalone_mode=False)
    return raised.value.line()


@pytest.mark.parametrize("args, needle", [
    (["--upstream", "ftp://x"], "is not an http(s) URL"),
    (["--upstream", "http://127.0.0.1:9", "--listen", "0.0.0.0:8089"], "pass --allow-remote"),
    (["--upstream", "http://127.0.0.1:9", "--listen", "8089"], "is not HOST:PORT"),
    (["--upstream", "http://127.0.0.1:9", "--listen", "127.0.0.1:70000"], "is not HOST:PORT"),
    (["--upstream", "http://u:hunter2@127.0.0.1:9", "--listen", "127.0.0.1:0"], "does not answer"),
])
def test_bad_options_are_refused_naming_what_is_wrong_and_nothing_is_written(tmp_path, args, needle):
    line = refusal(*args, "--out", str(tmp_path / "out"))
    assert needle in line and "hunter2" not in line
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_port_in_use_and_a_folder_without_calibration_are_refused(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        line = refusal("--upstream", "http://127.0.0.1:9", "--listen", f"127.0.0.1:{port}", "--out", str(tmp_path))
    assert "cannot listen there" in line
    assert "has no manifest.json" in refusal("--upstream", "http://127.0.0.1:9", "--calibration", str(tmp_path),
                                             "--out", str(tmp_path))
    assert list(tmp_path.iterdir()) == []


def test_the_command_line_prints_one_line_and_exits_non_zero(tmp_path):
    result = subprocess.run([sys.executable, "-m", "kit.cli", "watch", "--upstream", "http://127.0.0.1:9", "--listen",
                             "10.1.2.3:8089", "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and result.stdout == ""
    assert result.stderr.startswith("kit: error: --listen 10.1.2.3:8089 would accept calls from other machines")
    assert len(result.stderr.strip().splitlines()) == 1 and list(tmp_path.iterdir()) == []


def _short_upstream(sock: socket.socket) -> None:
    """Answers a POST with a Content-Length of 100 and 12 bytes, then hangs up; anything else with a 404."""
    while True:
        try:
            conn, _ = sock.accept()
        except OSError:
            return
        with conn:
            request = conn.recv(65536)
            if request.startswith(b"POST"):
                conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n"
                             b'{"content": ')
            else:
                conn.sendall(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")


def test_an_answer_of_known_length_cut_short_reaches_the_client_cut_and_is_recorded(tmp_path):
    import threading

    from kit.watch.serve import in_thread

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        threading.Thread(target=_short_upstream, args=(sock,), daemon=True).start()
        upstream = "http://127.0.0.1:%d" % sock.getsockname()[1]
        with in_thread(upstream, tmp_path, quiet=True) as watch:
            with pytest.raises(httpx.HTTPError):
                httpx.post(watch.url + "/completion", json={"prompt": "x", "temperature": 0}, timeout=30)
        sock.shutdown(socket.SHUT_RDWR)  # else the thread blocked in accept() keeps the closed socket listening
    record, = [json.loads(line) for line in next((watch.recorder.run_dir / "records").glob("*.jsonl")).open()]
    assert "cut the answer short" in record["error"] and record["output_sha256"] is None


def test_kit_analyze_keeps_a_watch_runs_table_in_its_findings_and_prints_it(tmp_path):
    from click.testing import CliRunner

    from kit.cli import cli

    recorder, _ = _watch_run(tmp_path / "runs")
    before = {p: p.read_bytes() for p in recorder.run_dir.rglob("*") if p.is_file()}
    out = tmp_path / "analysis"
    result = CliRunner().invoke(cli, ["analyze", str(recorder.run_dir), "--out", str(out), "--no-figures"])
    assert result.exit_code == 0, result.output
    assert f"watch run {recorder.run_id}:" in result.output and "Watched calls (4)" in result.output
    found = json.loads((out / "findings.json").read_text())["kinds"]["watch"]
    assert [(run["run"], run["calls"], run["alarms"]["determinism"]) for run in found] == [(recorder.run_id, 4, 2)]
    after = {p: p.read_bytes() for p in recorder.run_dir.rglob("*") if p.is_file()}
    assert after == before  # analysis reads the run folder, writes nothing into it


def test_a_live_upstream_named_openai_by_kind_is_watched_not_refused(tmp_path):
    """`--kind openai` has no engine-specific endpoint to ask: the upstream answering GET /v1/models is live."""
    from kit.watch.serve import listening, start
    from tests.fake_engine.openai import OpenAIChat

    from kit.core.safe_console import SafeConsole
    from kit.watch.console import Live

    printed = io.StringIO()
    with OpenAIChat().serve() as upstream:
        watch = start(upstream, "openai", listening("127.0.0.1", 0), tmp_path / "runs",
                      live=Live(SafeConsole(file=printed, width=200), quiet=True))
        watch.stop()
    manifest = json.loads((watch.recorder.run_dir / "manifest.json").read_text())
    assert manifest["engine"]["engine_kind"] == "OpenAI-compatible" and manifest["status"] == "finished"
    # the start line says what answered, as `kit check` does
    assert "engine: OpenAI-compatible (--kind openai; GET /v1/models answered)" in printed.getvalue().splitlines()[0]


def test_a_watch_runs_manifest_names_its_results_files_and_is_ended_in_one_write(tmp_path, monkeypatch):
    """The watch run's manifest records its results files (as every kind's run does: `results: {}` before)
    and what the proxy counted, written with the run's end in one save after the last pass is closed."""
    from kit.record.manifest import Manifest

    recorder = Recorder.open(tmp_path, rotate=10, protocol={"name": "watch", "kind": "watch", "resolved": {}})
    for n in range(3):
        recorder.add(_fields(n))
    saves: list[str | None] = []
    real_save = Manifest.save
    monkeypatch.setattr(Manifest, "save", lambda self: (saves.append(self.run.status), real_save(self))[1])
    recorder.close(watch={"stopped_by": "SIGTERM", "calls": 3})
    manifest = json.loads((recorder.run_dir / "manifest.json").read_text())
    assert manifest["results"] == {"watch": "results/watch.json", "watch_csv": "results/watch.csv"}
    assert all((recorder.run_dir / name).is_file() for name in manifest["results"].values())
    assert manifest["watch"] == {"stopped_by": "SIGTERM", "calls": 3, "calls_recorded": 3}
    assert saves == ["started", "finished"], saves  # the last pass closed, then the run ended with all its fields


def test_a_stop_while_a_watch_runs_results_are_written_ends_it_failed_then_is_passed_on(tmp_path, monkeypatch):
    recorder = Recorder.open(tmp_path, rotate=10, protocol={"name": "watch", "kind": "watch", "resolved": {}})
    recorder.add(_fields(0))

    def interrupted(run_dir):
        raise KeyboardInterrupt

    monkeypatch.setitem(kinds.KINDS, "watch", dataclasses.replace(kinds.KINDS["watch"], results=interrupted))
    with pytest.raises(KeyboardInterrupt):
        recorder.close()
    manifest = json.loads((recorder.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["reason"].startswith("writing the results failed")
    assert manifest["watch"] == {"calls_recorded": 1} and not manifest.get("results")


def test_a_watch_run_of_an_earlier_kit_whose_manifest_names_no_results_files_still_verifies(tmp_path):
    from kit.bundle.verify import verify_bundle
    from kit.bundle.writer import write_bundle
    from kit.record.manifest import Manifest

    recorder, _ = _watch_run(tmp_path / "runs")
    Manifest.load(recorder.run_dir).update(results={})  # as every earlier kit's watch run recorded them
    verdict = verify_bundle(write_bundle([recorder.run_dir], tmp_path / "old.tar.gz", environ={}).path)
    assert verdict.ok, verdict.lines()
    assert any(name.endswith("results/watch.json") for name in verdict.results_compared)


def test_the_upstream_urls_credentials_become_a_header_and_its_query_follows_every_metrics_read():
    proxy = Proxy(Settings("http://watch%20user:p%40ss@upstream.test:8000/?api_key=k%2B1", counters=True))
    assert proxy.base == "http://upstream.test:8000" and "p%40ss" not in str(proxy.metrics_url)
    assert str(proxy.metrics_url) == "http://upstream.test:8000/metrics?api_key=k%2B1"
    assert proxy.auth == [("Authorization", "Basic d2F0Y2ggdXNlcjpwQHNz")]  # base64 of "watch user:p@ss"


def test_a_streamed_answer_is_read_and_recorded_as_streamed_whatever_the_case_of_its_media_type():
    from tests.watch.raw_upstream import events

    event = b"".join(events())  # llama-server's streamed shape
    for content_type in ("text/event-stream", "Text/Event-Stream; charset=utf-8"):
        finished = observe.Finished("/completion", b'{"prompt": "x", "temperature": 0}', "t", 0.01, 200,
                                    content_type, None, event, None)
        seen = observe.seen(finished, observe.Reading())
        assert seen.fields["stream"] and seen.fields["error"] is None and not seen.failed
        assert seen.fields["output_sha256"] == observe.sha256_text("".join(f" w{n}" for n in range(8)))
    assert not observe.seen(observe.Finished("/completion", b"{}", "t", 0.01, 200, "application/json", None,
                                             b'{"content": "x"}', None), observe.Reading()).fields["stream"]
