"""A llama-server-shaped upstream on raw sockets (standard library only) that keeps the exact bytes of every
request head it gets, and answers as its scenario says: a proxy's tests hold what reached it against what the
client sent, and see how the proxy takes answers no well-behaved server gives. Raw client helpers too.

Scenarios (applied to every request but the start probe, `GET /props`, which is always answered well):
- `ok`: a llama.cpp `/completion` answer (timings, so the call is classified) for every request.
- `cookie`: the same answer, with a Set-Cookie header.
- `ok-close`: the `ok` answer, then the connection closed 50 ms later (no `Connection: close` said).
- `status-999`: a status line with a status no HTTP server sends.
- `ctl-header`: a header value with a control character.
- `long-header`: a header line of 100 KB.
- `garbage`: a reply that is not HTTP at all.
- `events`: a chunked event stream of EVENTS events whose end (the last chunk) is sent with them, in one write.
- `events-cut`: the same events, then the connection closed with no last chunk (an upstream dying mid-answer).
- `events-once`: `events` on a new connection; a later request on a kept-alive one is read, not answered, and the
  connection closed (llama-server closes its end some time after a streamed answer, saying nothing before).
- `endless`: an event stream that never ends (until the connection is closed).
- `silent`: reads the request, answers nothing, holds the connection.
"""

from __future__ import annotations

import json
import select
import socket
import threading
import time

SCENARIOS = ("ok", "ok-close", "cookie", "status-999", "ctl-header", "long-header", "garbage", "events", "events-cut",
             "events-once", "endless", "silent")
EVENTS = 8
ANSWER = {"index": 0, "content": " Paris", "tokens": [], "id_slot": 0, "stop": True, "model": "raw",
          "tokens_predicted": 1, "tokens_evaluated": 6, "stop_type": "limit", "stopping_word": "", "tokens_cached": 6,
          "timings": {"cache_n": 5, "prompt_n": 1, "prompt_ms": 11.2, "predicted_n": 1, "predicted_ms": 0.1}}


def events() -> list[bytes]:
    """The `events` scenario's server-sent events (llama-server's shape: the last one stops, with timings)."""
    return [b"data: " + json.dumps({**ANSWER, "content": f" w{n}"} if n == EVENTS - 1
                                   else {"content": f" w{n}", "stop": False}).encode() + b"\n\n" for n in range(EVENTS)]


def _reply(status: bytes, body: bytes, extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n" + extra
            + b"content-length: %d\r\n\r\n" % len(body) + body)


class RawUpstream:
    """Serves 127.0.0.1:<port> (`url`) in threads of its own until `stop()`; `heads` keeps each request's
    line and headers as received, `bodies` their bodies."""

    def __init__(self, scenario: str = "ok"):
        if scenario not in SCENARIOS:
            raise ValueError(f"unknown scenario {scenario!r}")
        self.scenario = scenario
        self.heads: list[bytes] = []
        self.bodies: list[bytes] = []
        self.open = 0  # connections held open now
        self.connections = 0  # connections accepted (the start probe's included)
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.url = "http://127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        self.open += 1
        self.connections += 1
        kept_alive = False  # a request on this connection was answered already
        try:
            with conn:
                data = b""
                while True:
                    while b"\r\n\r\n" not in data:
                        more = conn.recv(65536)
                        if not more:
                            return
                        data += more
                    head, _, data = data.partition(b"\r\n\r\n")
                    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")[1:]
                                   if line.lower().startswith(b"content-length:")), 0)
                    while len(data) < length:
                        more = conn.recv(65536)
                        if not more:
                            return
                        data += more
                    body, data = data[:length], data[length:]
                    if head.startswith((b"GET /props ", b"GET /props?")):
                        conn.sendall(_reply(b"200 OK", b'{"build_info": "b1-raw"}'))
                        continue
                    self.heads.append(head)
                    self.bodies.append(body)
                    if not self._answer(conn, head, kept_alive):
                        return
                    kept_alive = True
        except OSError:
            return
        finally:
            self.open -= 1

    def _answer(self, conn: socket.socket, head: bytes, kept_alive: bool) -> bool:
        """Answer one request as the scenario says (`kept_alive`: not the connection's first); False: the
        connection is done."""
        good = json.dumps(ANSWER).encode()
        if self.scenario == "ok":
            conn.sendall(_reply(b"200 OK", good).partition(b"\r\n\r\n")[0] + b"\r\n\r\n" if head.startswith(b"HEAD ")
                         else _reply(b"200 OK", good))
            return True
        if self.scenario == "ok-close":
            conn.sendall(_reply(b"200 OK", good))
            time.sleep(0.05)
            return False
        if self.scenario == "cookie":
            conn.sendall(_reply(b"200 OK", good, b"set-cookie: session=s1; Path=/\r\n"))
            return True
        if self.scenario == "status-999":
            conn.sendall(_reply(b"999 Weird", good))
        elif self.scenario == "ctl-header":
            conn.sendall(_reply(b"200 OK", good, b"x-evil: a\x01b\x1b[2Jc\r\n"))
        elif self.scenario == "long-header":
            conn.sendall(_reply(b"200 OK", good, b"x-long: " + b"a" * 100_000 + b"\r\n"))
        elif self.scenario == "garbage":
            conn.sendall(b"\x00\x01 not HTTP \x1b[31m at all\r\n\r\n")
        elif self.scenario == "events-once" and kept_alive:
            return False
        elif self.scenario in ("events", "events-cut", "events-once"):
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                         + b"".join(b"%x\r\n%s\r\n" % (len(event), event) for event in events())
                         + (b"" if self.scenario == "events-cut" else b"0\r\n\r\n"))
            return self.scenario != "events-cut"
        elif self.scenario == "endless":
            conn.sendall(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n")
            event = b"data: " + json.dumps({"content": "x" * 4000, "stop": False}).encode() + b"\n\n"
            while True:
                conn.sendall(event)
        elif self.scenario == "silent":
            while conn.recv(65536):
                pass
        return False

    def stop(self) -> None:
        """Stop listening (a thread blocked in accept() keeps a closed socket listening: shut it down first)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def until(predicate, seconds: float = 10.0, step: float = 0.02) -> bool:
    """Poll `predicate` until it holds or `seconds` pass; whether it held."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return bool(predicate())


def exchange(port: int, data: bytes, *, drip: float | None = None, wait: float = 10.0) -> tuple[bytes, float]:
    """Send `data` to 127.0.0.1:port (a byte every `drip` seconds if given, else 16 KiB at a time), stop
    sending once the proxy answers, and read until it closes the connection or `wait` seconds after the first
    byte was sent: (what came back, seconds from the first byte sent to the close; inf if it never closed)."""
    step = 1 if drip is not None else 16 << 10
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as conn:
        started = time.monotonic()
        try:
            for at in range(0, len(data), step):
                if select.select([conn], [], [], 0)[0]:
                    break  # answered (or closed) already
                conn.sendall(data[at:at + step])
                if drip is not None:
                    time.sleep(drip)
        except OSError:
            pass  # the proxy closed the connection while we still sent: read what it answered
        got = b""
        deadline = started + wait
        try:
            while time.monotonic() < deadline:
                conn.settimeout(max(0.01, deadline - time.monotonic()))
                if not (more := conn.recv(65536)):
                    return got, time.monotonic() - started
                got += more
        except socket.timeout:
            pass
        except OSError:
            return got, time.monotonic() - started
        return got, float("inf")
