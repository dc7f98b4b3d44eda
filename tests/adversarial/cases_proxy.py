"""`kit watch` under a hostile client or upstream (issue #35, item 5): the proxy runs as a user runs it, in a
process of its own, in front of a raw-socket upstream (tests/watch/raw_upstream.py) or the hostile engine;
an attacker thread of this process waits for it to listen, attacks, notes what it found, and stops it with
SIGINT. A case is clear when every attack met its bound (the proxy's answer, the time it took, what reached
the upstream, the proxy's own /metrics), the proxy printed no traceback, and its run ended `finished`."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import threading
from collections.abc import Callable

from tests.adversarial.cases_console import _free_port, _kit_process  # one definition of each
from tests.adversarial.corpus import Case, Ending, Scratch
from tests.adversarial.hostile_engine import HostileEngine
from tests.watch.raw_upstream import RawUpstream, exchange, until

CLS = "proxy client"
BOUNDS = ["--idle-timeout", "1", "--header-timeout", "1"]
GET = b"GET %s HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n"
Attack = Callable[[int, RawUpstream | None], list[str]]  # (the proxy's port, the raw upstream) -> problems


def _status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def _metric(port: int, name: str) -> float | None:
    answer, _ = exchange(port, GET % b"/metrics")
    found = re.search(rb"^" + re.escape(name.encode()) + rb" (\S+)$", answer, re.M)
    return float(found.group(1)) if found else None


def _listening(port: int) -> bool:
    try:
        return _status(exchange(port, GET % b"/metrics", wait=2)[0]) == 200
    except OSError:
        return False


def _watch(attack: Attack, upstream: str = "raw", url: Callable[[str], str] = str, *more: str):
    """A case's `make`: the upstream, the attacker thread, and `kit watch` in front of that upstream."""
    def make(scratch: Scratch) -> list[str]:
        raw = RawUpstream() if upstream == "raw" else None
        engine = HostileEngine(upstream) if raw is None else None
        scratch.defer(raw.stop if raw else engine.stop)
        port = _free_port()
        problems: list[str] = []
        scratch.problems = problems

        def attacker() -> None:
            try:
                if not until(lambda: _listening(port), seconds=60, step=0.1):
                    problems.append("the proxy never answered /metrics")
                    return
                problems.extend(attack(port, raw))
                if _metric(port, "kit_watch_in_flight") != 0:
                    problems.append(f"requests left in flight after the attack: {_metric(port, 'kit_watch_in_flight')}")
            except Exception as exc:  # noqa: BLE001 - the attack's own failure is the case's finding
                problems.append(f"the attack failed: {type(exc).__name__}: {exc}")
            finally:
                pid = _kit_process(str(scratch.outputs))  # this case's own `kit watch`
                if pid is not None:
                    os.kill(pid, signal.SIGINT)
        threading.Thread(target=attacker, daemon=True).start()
        target = url(raw.url if raw else engine.url)
        return ["watch", "--upstream", target, "--listen", f"127.0.0.1:{port}", "--out", str(scratch.outputs),
                "--quiet", *BOUNDS, *more]
    return make


def _judged(scratch: Scratch, ending: Ending) -> str | None:
    """The attack's findings, then the run: ended `finished` by the signal, its manifest holding the bounds."""
    problems = getattr(scratch, "problems", ["the attacker never ran"])
    if problems:
        return "; ".join(problems)[:600]
    manifests = sorted(scratch.outputs.glob("*/manifest.json"))
    if not manifests:
        return f"no run folder (exit {ending.code}): {ending.lines[-1:]}"
    manifest = json.loads(manifests[0].read_text())
    if manifest.get("status") != "finished" or (manifest.get("watch") or {}).get("stopped_by") != "SIGINT":
        return f"the run ended {manifest.get('status')!r}, stopped by {(manifest.get('watch') or {}).get('stopped_by')!r}"
    if "alarm_requests" not in ((manifest.get("protocol") or {}).get("resolved") or {}).get("bounds", {}):
        return "the manifest does not record the alarm tracker's cap"
    if "\x1b" in ending.text:
        return "a terminal escape sequence reached the console"
    return None


def _case(name: str, attack: Attack, upstream: str = "raw", url: Callable[[str], str] = str, *more: str) -> Case:
    return Case(cls=CLS, name=name, make=_watch(attack, upstream, url, *more), expect="handled", check=_judged,
                timeout=90, own_process=True)


# -- attacks ------------------------------------------------------------------------------------------------

TARGETS = [b"/a%00b", b"/a%0d%0aInjected:%20yes", b"/a%20b", b"/%2e%2e/%2e%2e/etc/passwd", b"/a%2Fb",
           b"/v1/x?q=%00&r=%0d%0a&s=%20", b"/completion%00", b"/" + b"p" * 60_000]


def _targets(port: int, raw: RawUpstream | None) -> list[str]:
    assert raw is not None
    problems = []
    for target in TARGETS:
        answer, _ = exchange(port, GET % target)
        line = raw.heads[-1].split(b"\r\n")[0] if raw.heads else b""
        if _status(answer) != 200 or line != b"GET " + target + b" HTTP/1.1":
            problems.append(f"{target[:40]!r}: answered {_status(answer)}, upstream got {line[:60]!r}")
    return problems


def _overlong(port: int, raw: RawUpstream | None) -> list[str]:
    assert raw is not None
    path, _ = exchange(port, GET % (b"/" + b"a" * 100_000))
    headers, _ = exchange(port, b"GET /x HTTP/1.1\r\nHost: p\r\n" + b"X-Pad: " + b"b" * (1 << 20) + b"\r\n\r\n")
    problems = []
    if _status(path) not in (400, 414, 431):
        problems.append(f"a 100 KB path answered {_status(path)}")
    if _status(headers) != 431:
        problems.append(f"1 MiB of headers answered {_status(headers)}")
    if raw.heads:
        problems.append(f"{len(raw.heads)} of them reached the upstream")
    return problems


def _slow(port: int, raw: RawUpstream | None) -> list[str]:
    """Slowloris (headers a byte every 0.3 s), empty lines only, silence, a body that never comes: each cut
    within about its bound (1 s), while a client arriving meanwhile is served."""
    assert raw is not None
    found: dict[str, tuple[bytes, float]] = {}
    attacks = {"slowloris": (GET % b"/x", 0.3), "empty lines": (b"\r\n" * 20, 0.3), "silence": (b"", None),
               "no body": (b"POST /completion HTTP/1.1\r\nHost: p\r\nContent-Length: 1000\r\n\r\n{", None)}
    threads = [threading.Thread(target=lambda k=key, d=data, s=drip: found.__setitem__(k, exchange(port, d, drip=s)))
               for key, (data, drip) in attacks.items()]
    for thread in threads:
        thread.start()
    meanwhile = _status(exchange(port, GET % b"/served")[0])
    for thread in threads:
        thread.join(30)
    problems = [f"{key}: held {seconds:.1f} s" for key, (_, seconds) in found.items() if seconds > 4]
    problems += [f"{key}: answered {_status(found[key][0])}" for key in ("slowloris", "no body")
                 if key in found and _status(found[key][0]) != 408]
    if meanwhile != 200:
        problems.append(f"a client arriving meanwhile got {meanwhile}")
    if [head for head in raw.heads if not head.startswith(b"GET /served ")]:
        problems.append("a request cut short reached the upstream")
    return problems


def _many_calls(port: int, raw: RawUpstream | None) -> list[str]:
    """2,000 distinct greedy calls with --alarm-requests 100: the tracker holds 100 and says it forgot 1,900."""
    with socket.create_connection(("127.0.0.1", port)) as conn:
        reader = conn.makefile("rb")
        for n in range(2000):
            body = b'{"prompt": "distinct %d", "temperature": 0}' % n
            conn.sendall(b"POST /completion HTTP/1.1\r\nHost: p\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            length = 0
            while (line := reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            reader.read(length)
    until(lambda: _metric(port, "kit_watch_alarm_requests_forgotten_total") == 1900, seconds=20)
    held, forgotten = _metric(port, "kit_watch_alarm_requests"), _metric(port, "kit_watch_alarm_requests_forgotten_total")
    cap = _metric(port, "kit_watch_alarm_requests_cap")
    return [] if (held, forgotten, cap) == (100, 1900, 100) else [f"tracker holds {held}, forgot {forgotten}, cap {cap}"]


def _authorization(port: int, raw: RawUpstream | None) -> list[str]:
    assert raw is not None
    answer, _ = exchange(port, b"POST /completion HTTP/1.1\r\nHost: p\r\nAuthorization: Bearer sk-client-canary\r\n"
                               b"Content-Length: 17\r\nConnection: close\r\n\r\n{\"temperature\":0}")
    sent = [line for head in raw.heads for line in head.split(b"\r\n") if line.lower().startswith(b"authorization:")]
    expected = [b"Authorization: Basic " + base64.b64encode(b"watch:hunter2-canary")]
    return [] if _status(answer) == 200 and sent == expected else [f"answered {_status(answer)}, upstream got {sent}"]


def _no_credentials_kept(scratch: Scratch, ending: Ending) -> str | None:
    for path in scratch.outputs.rglob("*"):
        if path.is_file() and re.search(rb"hunter2-canary|sk-client-canary", path.read_bytes()):
            return f"a credential was written into {path.name}"
    if "hunter2-canary" in ending.text or "sk-client-canary" in ending.text:
        return "a credential was printed"
    return _judged(scratch, ending)


def _flood(port: int, raw: RawUpstream | None) -> list[str]:
    """Past --max-connections 8, a new request gets 503; once the flood ends, 200."""
    held = [socket.create_connection(("127.0.0.1", port)) for _ in range(8)]
    try:
        refused = until(lambda: _status(exchange(port, GET % b"/x")[0]) == 503, seconds=5)
    finally:
        for conn in held:
            conn.close()
    served = until(lambda: _status(exchange(port, GET % b"/x")[0]) == 200, seconds=10)
    return [] if refused and served else [f"503 past the cap: {refused}; 200 after: {served}"]


def _huge_answer(port: int, raw: RawUpstream | None) -> list[str]:
    """An endless answer: the client reads 2 MiB and hangs up; the proxy lets the upstream go."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(b"POST /completion HTTP/1.1\r\nHost: p\r\nContent-Length: 17\r\n\r\n{\"temperature\":0}")
        got = 0
        while got < 2 << 20 and (chunk := conn.recv(65536)):
            got += len(chunk)
    return [] if until(lambda: _metric(port, "kit_watch_in_flight") == 0, seconds=10) else ["still in flight"]


def _slow_answer(port: int, raw: RawUpstream | None) -> list[str]:
    """An answer dripping a byte every 2 s: the client gives up after 3 s; the proxy lets the upstream go."""
    try:
        exchange(port, b"POST /completion HTTP/1.1\r\nHost: p\r\nContent-Length: 17\r\nConnection: close\r\n\r\n"
                       b"{\"temperature\":0}", wait=3)
    except OSError:
        pass
    return [] if until(lambda: _metric(port, "kit_watch_in_flight") == 0, seconds=10) else ["still in flight"]


def _not_reading(port: int, raw: RawUpstream | None) -> list[str]:
    """An endless answer to a client that reads nothing: cut once the idle timeout passes with nothing read."""
    with socket.create_connection(("127.0.0.1", port)) as conn:
        conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        conn.sendall(b"POST /completion HTTP/1.1\r\nHost: p\r\nContent-Length: 17\r\n\r\n{\"temperature\":0}")
        if not until(lambda: _metric(port, "kit_watch_in_flight") == 1, seconds=10):
            return ["the call never went upstream"]
        cut = until(lambda: _metric(port, "kit_watch_in_flight") == 0, seconds=15)
    return [] if cut else ["a client reading nothing still held its answer after 15 s"]


def _hostile_answers(port: int, raw: RawUpstream | None) -> list[str]:
    assert raw is not None
    problems = []
    for scenario in ("status-999", "ctl-header", "long-header", "garbage"):
        raw.scenario = scenario
        answer, _ = exchange(port, b"POST /completion HTTP/1.1\r\nHost: p\r\nContent-Length: 2\r\nConnection: close"
                                   b"\r\n\r\n{}")
        if _status(answer) != 502 or b"\x1b" in answer or b"\x01" in answer:
            problems.append(f"{scenario}: answered {answer[:80]!r}")
    return problems


CASES = [
    _case("%00, %0d%0a, %20 and .. in the path and query reach the upstream byte for byte", _targets),
    _case("a 100 KB path and 1 MiB of headers", _overlong),
    _case("slowloris, empty lines, silence, a body that never comes", _slow),
    _case("2,000 distinct calls against a 100-request alarm store", _many_calls, "raw", str, "--alarm-requests", "100"),
    Case(cls=CLS, name="a client Authorization with a credentialed upstream URL", expect="handled", timeout=90,
         own_process=True,
         make=_watch(_authorization, "raw", lambda url: url.replace("http://", "http://watch:hunter2-canary@")),
         check=_no_credentials_kept),
    _case("a connection flood past --max-connections", _flood, "raw", str, "--max-connections", "8"),
    _case("a client that never reads an endless answer", _not_reading, "huge"),
    _case("an endless answer the client hangs up on", _huge_answer, "huge"),
    _case("an answer dripping a byte every 2 s", _slow_answer, "drip"),
    _case("upstream answers no HTTP server sends: status 999, control characters, a 100 KB header, garbage",
          _hostile_answers),
]
