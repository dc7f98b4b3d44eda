"""kit watch under a hostile client or upstream, on real loopback sockets (uvicorn serving the proxy in a
thread, a raw-socket upstream keeping the bytes it got): the request target reaches the upstream byte for
byte; credentials in the upstream URL replace a client's Authorization; every failure is a one-line JSON
answer, never a traceback, and gives the in-flight count back; a client that is silent, slow with its
headers or body, or does not read is cut within its bound; past the connection cap new requests get 503;
the alarm tracker remembers at most its cap, recorded in the manifest, exported on /metrics and used by the
results' recomputation."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import socket
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from kit.protocols import kinds
from kit.record.alarms import Call, Tracker
from kit.watch.connections import Bounds
from kit.watch import proxy
from kit.watch.serve import Watch, in_thread
from tests.watch.raw_upstream import ANSWER, RawUpstream, events, exchange, until

FAST = Bounds(idle_timeout=0.6, header_timeout=0.6, max_connections=8)
GET = b"GET %s HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n"


@contextmanager
def watching(tmp_path: Path, scenario: str = "ok", url: Callable[[str], str] = str, bounds: Bounds = FAST,
             observer: bool = False, **options: Any) -> Iterator[tuple[Watch, RawUpstream, int]]:
    """A watch (in a thread) in front of a raw upstream (at `url(its URL)`); (the watch, the upstream, the
    proxy's port). The bounds are the forwarding path's: calls are read on the proxy's loop unless `observer`
    (the observer process, whose starting would add its imports' half second to each test that waits for a
    record, reads what the loop reads: tests/watch/test_watch_observer.py)."""
    raw = RawUpstream(scenario)
    try:
        with in_thread(url(raw.url), tmp_path, quiet=True, bounds=bounds, observer=observer, **options) as watch:
            yield watch, raw, int(watch.url.rsplit(":", 1)[1])
    finally:
        raw.stop()


def metric(watch: Watch, name: str) -> float:
    """A metric's value as GET /metrics on the proxy serves it."""
    text = httpx.get(watch.url + "/metrics", timeout=10).text
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert found, f"{name} not exported: {text[:300]!r}"
    return float(found.group(1))


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


TARGETS = [b"/a%20b", b"/a%0d%0ab", b"/a%00b", b"/completion%00", b"/a%2Fb/%2e%2e/c", b"//x//y/./z/../w",
           b"/v1/x?q=%20&r=%0d%0a&s=%00&t=a+b", b"/p;x=1,y?k=%E2%82%AC&&=", b"/" + b"a" * 8000]


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t[:24].decode())
def test_the_request_target_reaches_the_upstream_byte_for_byte(tmp_path, capfd, target):
    with watching(tmp_path) as (watch, raw, port):
        answer, _ = exchange(port, GET % target)
        assert status(answer) == 200
        assert raw.heads[0].split(b"\r\n")[0] == b"GET " + target + b" HTTP/1.1"
        assert metric(watch, "kit_watch_in_flight") == 0
    assert "Traceback" not in capfd.readouterr().err


def test_the_upstream_urls_own_query_follows_the_clients(tmp_path):
    with watching(tmp_path, url=lambda url: url + "/?api_key=k%2B1") as (_, raw, port):
        exchange(port, GET % b"/a?x=%20")
        exchange(port, GET % b"/b")
    assert [head.split(b"\r\n")[0] for head in raw.heads] == [b"GET /a?x=%20&api_key=k%2B1 HTTP/1.1",
                                                             b"GET /b?api_key=k%2B1 HTTP/1.1"]


def test_the_upstreams_cookies_go_back_to_the_client_and_never_to_the_upstream_again(tmp_path):
    """The proxy keeps no cookie jar: a Set-Cookie is the client's alone (by a host name, which a jar would
    keep; an IP address it would not)."""
    with watching(tmp_path, "cookie", url=lambda url: url.replace("127.0.0.1", "localhost")) as (_, raw, port):
        first, _ = exchange(port, GET % b"/a")
        exchange(port, GET % b"/b")
    assert b"\r\nset-cookie: session=s1; Path=/\r\n" in first
    assert len(raw.heads) == 2 and b"cookie" not in raw.heads[1].lower()


def test_an_answers_headers_are_the_upstreams_with_none_of_the_servers_own_added(tmp_path):
    with watching(tmp_path) as (_, _, port):
        answer, _ = exchange(port, GET % b"/a")
    head = answer.partition(b"\r\n\r\n")[0].lower().split(b"\r\n")
    assert head[0] == b"http/1.1 200 ok"
    assert sorted(line.split(b":")[0] for line in head[1:]) == [b"connection", b"content-length", b"content-type"]


def test_credentials_in_the_upstream_url_replace_the_clients_authorization(tmp_path, capfd):
    with watching(tmp_path, url=lambda url: url.replace("http://", "http://watch%20user:p%40ss@")) as \
            (watch, raw, port):
        answers = [exchange(port, b"POST /completion HTTP/1.1\r\nHost: p\r\nAuthorization: Bearer sk-client\r\n"
                                  b"Content-Length: 17\r\nConnection: close\r\n\r\n{\"temperature\":0}")[0],
                   exchange(port, GET % b"/v1/models")[0]]
        assert [status(a) for a in answers] == [200, 200]
        assert metric(watch, "kit_watch_in_flight") == 0
    expected = b"authorization: Basic " + base64.b64encode(b"watch user:p@ss")
    for head in raw.heads:
        assert [line.lower() for line in head.split(b"\r\n") if line.lower().startswith(b"authorization:")] == \
            [expected.lower()]
    manifest = (watch.recorder.run_dir / "manifest.json").read_text()
    assert "p@ss" not in manifest and "p%40ss" not in manifest and "sk-client" not in manifest
    assert "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize("scenario, request_bytes, expected", [
    ("status-999", GET % b"/x", 502),
    ("ctl-header", GET % b"/x", 502),
    ("long-header", GET % b"/x", 502),
    ("garbage", GET % b"/x", 502),
    ("ok", b"OPTIONS * HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n", 400),
    ("ok", b"GET /x HTTP/1.1\r\nHost: p\r\nX-Name: caf\xe9\r\nConnection: close\r\n\r\n", 400),
    ("ok", b"TRACE /x HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n", 405),
    ("ok", b"POST /metrics HTTP/1.1\r\nHost: p\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", 405),
    ("ok", b"HEAD /x HTTP/1.1\r\nHost: p\r\nConnection: close\r\n\r\n", 200),
])
def test_a_request_that_cannot_be_relayed_is_answered_in_one_json_line_and_leaves_nothing_in_flight(
        tmp_path, capfd, scenario, request_bytes, expected):
    with watching(tmp_path, scenario) as (watch, _, port):
        answer, _ = exchange(port, request_bytes)
        assert status(answer) == expected, answer[:200]
        if expected != 200:
            body = answer.partition(b"\r\n\r\n")[2]
            assert json.loads(body)["error"]["message"].startswith("kit watch: ") and b"\n" not in body
        assert metric(watch, "kit_watch_in_flight") == 0
    err = capfd.readouterr().err
    assert "Traceback" not in err and "\x1b" not in err


def test_a_watched_call_the_upstream_cannot_answer_is_recorded_with_its_error(tmp_path):
    with watching(tmp_path, "status-999") as (watch, _, port):
        answer, _ = exchange(port, b"POST /completion HTTP/1.1\r\nHost: p\r\nContent-Length: 2\r\n"
                                   b"Connection: close\r\n\r\n{}")
        assert status(answer) == 502
        assert until(lambda: watch.proxy.calls == 1)
    record, = [json.loads(line) for line in next((watch.recorder.run_dir / "records").glob("*.jsonl")).open()]
    assert "cannot be relayed" in record["error"] and record["output_sha256"] is None


def test_a_client_silent_slow_with_its_headers_or_its_body_is_cut_within_its_bound(tmp_path):
    with watching(tmp_path, bounds=Bounds(idle_timeout=0.3, header_timeout=0.3, max_connections=8)) as \
            (watch, raw, port):
        silent, silent_s = exchange(port, b"")
        empty_lines, empty_s = exchange(port, b"\r\n" * 40, drip=0.05)  # 2 s of bytes that begin no request
        slowloris, slowloris_s = exchange(port, GET % b"/x", drip=0.1)  # 5 s of headers, a byte at a time
        body, body_s = exchange(port, b"POST /completion HTTP/1.1\r\nHost: p\r\nContent-Length: 100\r\n\r\n{\"a\"")
        assert (silent, status(slowloris), status(body)) == (b"", 408, 408)
        assert empty_lines == b""
        assert max(silent_s, empty_s, slowloris_s, body_s) < 3  # 0.3 s bounds; uncut, each takes 4 s or more
        assert raw.heads == []  # nothing was forwarded
        assert metric(watch, 'kit_watch_refused_total{reason="header_timeout"}') == 1
        assert metric(watch, 'kit_watch_refused_total{reason="body_timeout"}') == 1
        assert metric(watch, "kit_watch_in_flight") == 0


def test_headers_past_the_limit_are_refused_with_431(tmp_path):
    with watching(tmp_path) as (watch, raw, port):
        answer, _ = exchange(port, b"GET /x HTTP/1.1\r\nHost: p\r\n" + b"X-Pad: " + b"a" * 1000 + b"\r\n" * 1
                             + b"".join(b"X-%d: %s\r\n" % (n, b"b" * 1000) for n in range(1000)) + b"\r\n")
        assert status(answer) == 431 and raw.heads == []
        assert metric(watch, 'kit_watch_refused_total{reason="header_too_large"}') == 1


def test_a_client_that_does_not_read_its_answer_is_cut_and_the_upstream_let_go(tmp_path):
    with watching(tmp_path, "endless") as (watch, raw, port):
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            conn.sendall(b"POST /completion HTTP/1.1\r\nHost: p\r\nContent-Length: 17\r\n\r\n{\"temperature\":0}")
            assert until(lambda: raw.open == 1 and watch.proxy.in_flight == 1)
            assert until(lambda: watch.proxy.in_flight == 0 and raw.open == 0, seconds=5)
        assert until(lambda: watch.proxy.calls == 1)
    record, = [json.loads(line) for line in next((watch.recorder.run_dir / "records").glob("*.jsonl")).open()]
    assert record["error"] == "the client went away before the answer was in"


def test_a_client_that_leaves_before_the_upstream_answers_lets_the_upstream_go(tmp_path, monkeypatch):
    monkeypatch.setattr(proxy, "CLIENT_CHECK_S", 0.1)  # the proxy listens for the client leaving this soon (1 s)
    with watching(tmp_path, "silent") as (watch, raw, port):
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(b"POST /completion HTTP/1.1\r\nHost: p\r\nContent-Length: 17\r\n\r\n{\"temperature\":0}")
            assert until(lambda: raw.open == 1 and watch.proxy.in_flight == 1)
        assert until(lambda: watch.proxy.in_flight == 0 and raw.open == 0, seconds=5)
        assert until(lambda: watch.proxy.calls == 1)
    record, = [json.loads(line) for line in next((watch.recorder.run_dir / "records").glob("*.jsonl")).open()]
    assert record["error"] == "the client went away before the upstream answered"


def test_past_the_connection_cap_new_requests_get_503(tmp_path):
    with watching(tmp_path, bounds=Bounds(idle_timeout=30, header_timeout=30, max_connections=3)) as (_, _, port):
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(3)]
        try:
            assert until(lambda: status(exchange(port, GET % b"/x")[0]) == 503)
        finally:
            for conn in held:
                conn.close()
        assert until(lambda: status(exchange(port, GET % b"/x")[0]) == 200)


def test_the_alarm_tracker_forgets_the_least_recently_seen_request_past_its_cap():
    tracker = Tracker(cap=2)
    calls = [Call(request, "greedy", "full_kv", output) for request, output in
             [("a", "x"), ("b", "x"), ("a", "x"), ("c", "x"),  # b is the least recently seen: forgotten
              ("a", "y"), ("b", "y")]]  # a remembered: determinism; b forgotten: its first call again
    assert [tracker.see(call) for call in calls] == [[], [], [], [], ["determinism"], []]
    assert list(tracker.seen) == ["a", "b"] and tracker.forgotten == 2


def test_many_distinct_calls_stay_within_the_cap_recorded_in_the_manifest_and_recomputed(tmp_path):
    body = b'{"prompt": "q%d", "temperature": 0}'
    with watching(tmp_path, alarm_requests=5) as (watch, _, port):
        with httpx.Client(base_url=watch.url, timeout=30) as client:
            for n in [*range(12), 0]:  # request 0 again, after it was forgotten: no alarm for it
                assert client.post("/completion", content=body % n).status_code == 200
        assert until(lambda: watch.proxy.calls == 13)
        assert len(watch.proxy.tracker.seen) == 5 and watch.proxy.tracker.forgotten == 8
        assert metric(watch, "kit_watch_alarm_requests") == 5 and metric(watch, "kit_watch_alarm_requests_cap") == 5
        assert metric(watch, "kit_watch_alarm_requests_forgotten_total") == 8
    manifest = json.loads((watch.recorder.run_dir / "manifest.json").read_text())
    assert manifest["protocol"]["resolved"]["bounds"]["alarm_requests"] == 5
    assert manifest["protocol"]["resolved"]["bounds"]["idle_timeout_s"] == FAST.idle_timeout
    assert manifest["watch"]["alarm_requests_forgotten"] == 8
    table = kinds.of_run(watch.recorder.run_dir).results(watch.recorder.run_dir).to_json()
    assert table["recorded_alarms_agree"] and table["alarm_requests"] == {"cap": 5, "forgotten": 8}


def test_the_results_recompute_alarms_with_the_recorded_cap(tmp_path):
    from kit.watch.recorder import Recorder

    def run(cap: int | None) -> dict[str, Any]:
        resolved = {"bounds": {"alarm_requests": cap}} if cap else {}
        recorder = Recorder.open(tmp_path, protocol={"name": "watch", "kind": "watch", "resolved": resolved})
        tracker = Tracker(cap=2)  # the proxy's, live
        for n, (request, output) in enumerate([("a", "x"), ("b", "x"), ("c", "x"), ("a", "y")]):
            fields = {"prompt_sha256": "p" * 64, "endpoint": "/completion", "request_sha256": request,
                      "stream": False, "status": 200, "decoding": "greedy", "output_sha256": output,
                      "tokens_sha256": None, "model": "m", "engine_build": None, "gen_ai": {}, "wall_seconds": 0.01,
                      "state": {"state": "full_kv", "confidence": 1.0, "source": "telemetry", "detail": ""},
                      "started": "2026-01-01T00:00:00.000+00:00"}
            fields["alarms"] = tracker.see(Call(request, "greedy", "full_kv", output))
            recorder.add(fields)
        recorder.close()
        return kinds.of_run(recorder.run_dir).results(recorder.run_dir).to_json()

    capped, uncapped = run(2), run(None)  # `a` was forgotten before its second output: no alarm, live
    assert capped["recorded_alarms_agree"] and capped["alarms"]["determinism"] == 0
    assert capped["alarm_requests"] == {"cap": 2, "forgotten": 2}
    assert not uncapped["recorded_alarms_agree"] and uncapped["alarms"]["determinism"] == 1
    assert "alarm_requests" not in uncapped  # a run recorded before the cap: its table as before
    from rich.console import Console

    from kit.protocols.watch.results import WatchResults
    from kit.protocols.watch.view import watch_table

    console = Console(record=True, width=200)
    console.print(watch_table(WatchResults.of(capped)))
    assert "at most 2 requests: 2 forgotten" in console.export_text()


def test_a_connection_cap_past_the_open_file_limit_is_refused_before_anything_is_written(tmp_path):
    import resource
    import subprocess
    import sys

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (500, 600))

    result = subprocess.run([sys.executable, "-m", "kit.cli", "watch", "--upstream", "http://127.0.0.1:9",
                             "--max-connections", "2000", "--out", str(tmp_path / "out")], capture_output=True,
                            text=True, timeout=120, preexec_fn=limited)
    assert result.returncode != 0 and result.stdout == "" and list(tmp_path.iterdir()) == []
    assert result.stderr.startswith("kit: error: --max-connections 2000 needs 2320 open files and this process "
                                    "may open 600; pass --max-connections 280 or less")



def test_a_client_that_leaves_mid_stream_ends_the_relay_lets_the_upstream_go_and_is_recorded(tmp_path):
    with watching(tmp_path, "endless") as (watch, raw, port):
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(b"POST /completion HTTP/1.1\r\nHost: p\r\nContent-Length: 17\r\n\r\n{\"temperature\":0}")
            assert conn.recv(65536).startswith(b"HTTP/1.1 200")  # the stream has begun
            assert until(lambda: raw.open == 1 and watch.proxy.in_flight == 1)
        assert until(lambda: watch.proxy.in_flight == 0 and raw.open == 0, seconds=5)
        assert until(lambda: watch.proxy.calls == 1)
    record, = [json.loads(line) for line in next((watch.recorder.run_dir / "records").glob("*.jsonl")).open()]
    assert record["error"] == "the client went away before the answer was in"


def _dechunked(body: bytes) -> tuple[bytes, bool]:
    """The data of a chunked body, and whether it ended with the last (empty) chunk."""
    data = b""
    while b"\r\n" in body:
        size, _, body = body.partition(b"\r\n")
        if int(size, 16) == 0:
            return data, True
        data, body = data + body[:int(size, 16)], body[int(size, 16) + 2:]
    return data, False


@pytest.mark.parametrize("scenario", ["events", "events-cut"])
def test_a_streamed_answer_ending_with_its_last_event_ends_in_that_write_and_a_cut_one_gets_no_last_chunk(
        tmp_path, monkeypatch, scenario):
    """The upstream's last events and its end arrive together: they reach the client whole, the end in the same
    write as the events (one write where two went a turn apart). An upstream that dies after its events: the
    client gets no last chunk (the cut is seen, never a whole-looking answer) and the call is recorded cut."""
    from kit.watch import connections

    written: list[bytes] = []  # what uvicorn hands the client's transport, write by write
    write = connections._Coalesced.write
    monkeypatch.setattr(connections._Coalesced, "write", lambda self, data: (written.append(data), write(self, data))[1])
    body = b'{"temperature": 0, "stream": true}'
    with watching(tmp_path, scenario) as (watch, _, port):
        answer, _ = exchange(port, b"POST /completion HTTP/1.1\r\nHost: p\r\nConnection: close\r\n"
                                   b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        assert until(lambda: watch.proxy.calls == 1)
    head, _, chunked = answer.partition(b"\r\n\r\n")
    data, ended = _dechunked(chunked)
    record, = [json.loads(line) for line in next((watch.recorder.run_dir / "records").glob("*.jsonl")).open()]
    assert status(answer) == 200 and b"text/event-stream" in head
    if scenario == "events":
        assert data == b"".join(events()) and ended
        assert len(written) == 2 and written[1].endswith(b"\r\n0\r\n\r\n")  # the head, then the events and the end
        assert record["error"] is None and record["stream"] and record["output_sha256"] is not None
    else:
        assert not ended and not any(piece.endswith(b"0\r\n\r\n") for piece in written)
        assert "cut the answer short" in record["error"] and record["output_sha256"] is None


def test_a_request_on_a_kept_alive_connection_the_upstream_closes_unanswered_goes_again_on_a_new_one(tmp_path):
    """llama-server closes its end of a connection some time after a streamed answer, having said nothing: a
    request sent on it meanwhile is never answered. The proxy sends it again on a new connection (it never
    reached the upstream's handler), and the client gets its answer, not a 502; a new connection's failure
    stays the client's 502 (the tests above)."""
    body = b'{"temperature": 0, "stream": true}'
    request = b"POST /completion HTTP/1.1\r\nHost: p\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    with watching(tmp_path, "events-once") as (watch, raw, port):
        with httpx.Client(base_url=watch.url, timeout=10) as client:
            answers = [client.post("/completion", content=body) for _ in range(4)]
        assert until(lambda: watch.proxy.calls == 4)
        opened = raw.connections
    assert [answer.status_code for answer in answers] == [200] * 4
    assert all(answer.content == b"".join(events()) for answer in answers)
    assert len(raw.heads) == 7 and opened == 5  # each call but the first sent twice: on the kept-alive one, then anew
    assert all(head.startswith(request.partition(b"\r\n")[0]) for head in raw.heads)
    records = [json.loads(line) for line in next((watch.recorder.run_dir / "records").glob("*.jsonl")).open()]
    assert len(records) == 4 and all(record["error"] is None for record in records)


def test_a_pooled_connection_its_upstream_closed_is_not_sent_on_before_the_loop_has_seen_it_close():
    import aiohttp

    from kit.watch.pool import REUSED, FreshConnector

    async def two_calls(connector: type[aiohttp.TCPConnector]) -> tuple[bytes, bool]:
        async with aiohttp.ClientSession(connector=connector()) as session:
            async with session.post(raw.url + "/completion", data=b"{}") as first:
                await first.read()
            # the upstream closes the connection while the loop is held here (a blocking wait): it has not seen it
            assert until(lambda: raw.open == 0)
            async with session.post(raw.url + "/completion", data=b"{}") as second:
                return await second.read(), REUSED.get()

    raw = RawUpstream("ok-close")
    try:
        body, reused = asyncio.run(two_calls(FreshConnector))
        assert body == json.dumps(ANSWER).encode() and not reused and raw.connections == 2
        with pytest.raises((aiohttp.ServerDisconnectedError, aiohttp.ClientOSError)):
            asyncio.run(two_calls(aiohttp.TCPConnector))  # aiohttp's own pool sends on it
    finally:
        raw.stop()


BROKEN = "def broken(*_):\n    raise ValueError('a normalizer bug')\n"


@pytest.mark.parametrize("observer", [True, False], ids=["observer process", "on the loop"])
def test_a_call_that_cannot_be_observed_still_reaches_the_client_is_counted_said_and_fails_the_run(
        tmp_path, monkeypatch, capfd, observer):
    """Observation runs off the forwarding path (after the answer is sent), in the observer process or on the
    proxy's loop: a failure there loses the record, never silently."""
    from kit.watch import observe
    from kit.watch.observer import Observer

    scope: dict[str, Any] = {}
    exec(BROKEN, scope)  # noqa: S102 - the same broken reader here and in the observer process
    monkeypatch.setattr(observe, "answered", scope["broken"])
    monkeypatch.setattr(Observer, "command", (sys.executable, "-c", f"{BROKEN}from kit.watch import observe, "
                                              "observer\nobserve.answered = broken\nobserver.main()"))
    with watching(tmp_path, observer=observer) as (watch, raw, port):
        reply = httpx.post(watch.url + "/completion", json={"prompt": "x", "temperature": 0}, timeout=10)
        assert reply.status_code == 200 and reply.json()["content"]  # the answer is the upstream's
        assert until(lambda: watch.proxy.calls == 1)
    manifest = json.loads((watch.recorder.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "failed" and "could not be observed (ValueError: a normalizer bug)" in \
        manifest["reason"]
    assert manifest["watch"]["calls"] == 1 and manifest["watch"]["calls_recorded"] == 0
    said = capfd.readouterr().err
    assert "kit watch: a call could not be observed" in said and "it may be unrecorded" in said.splitlines()[-1]

class _Recording:
    """The part of an asyncio transport _Coalesced uses, keeping each write."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed or self.aborted

    def get_write_buffer_size(self) -> int:
        return 0

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = True


def test_writes_within_one_turn_of_the_loop_go_out_as_one_in_order_and_none_is_lost():
    from kit.watch.connections import COALESCE_BYTES, _Coalesced

    async def scenario() -> _Recording:
        loop = asyncio.get_running_loop()
        sent = _Recording()
        out = _Coalesced(sent, loop)  # type: ignore[arg-type]
        out.write(b"HTTP/1.1 200 OK\r\n\r\n")
        out.write(b"body")
        assert sent.writes == [] and out.get_write_buffer_size() == len(b"HTTP/1.1 200 OK\r\n\r\nbody")
        await asyncio.sleep(0)  # the loop's next turn
        assert sent.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]
        out.write(b"chunk")  # a later turn of the same answer: straight out
        assert sent.writes[1:] == [b"chunk"]
        out.answered()  # the next answer's first turn is held again
        out.write(b"a" * COALESCE_BYTES)
        out.write(b"b")  # past the bound: written at once
        assert sent.writes[2:] == [b"a" * COALESCE_BYTES + b"b"]
        out.answered()
        out.write(b"0\r\n\r\n")
        out.close()  # what is held goes out before the close
        assert sent.writes[3:] == [b"0\r\n\r\n"] and sent.closed
        return sent

    sent = asyncio.run(scenario())
    assert b"".join(sent.writes).startswith(b"HTTP/1.1 200 OK")

    async def aborted() -> _Recording:
        sent = _Recording()
        out = _Coalesced(sent, asyncio.get_running_loop())  # type: ignore[arg-type]
        out.write(b"dropped")
        out.abort()
        await asyncio.sleep(0)
        return sent

    sent = asyncio.run(aborted())
    assert sent.aborted and sent.writes == []
