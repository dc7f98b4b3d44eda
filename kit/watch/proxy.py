"""The pass-through proxy: an ASGI app (Starlette's responses) served by uvicorn, an aiohttp client session to
the upstream (aiohttp rather than httpx.AsyncClient: a quarter of the CPU time per call here, bench/bench_watch.py).

Every request goes upstream unchanged (method, the request target byte for byte as the client sent it, headers
less the hop-by-hop ones, body bytes) and every answer comes back unchanged (status, headers less hop-by-hop,
the exact bytes, streamed as they arrive). Credentials in the upstream URL are the proxy's own: they are sent
as the Authorization header, in place of any the client sent. A request the proxy cannot forward as sent (a
header that is not UTF-8, which aiohttp would re-encode) gets a 400, one the upstream does not answer a 502,
each a one-line JSON error and one line in the server's log; nothing raises out of a request, and the count
of requests in flight is given back on every path. A client that leaves while the upstream has not begun
its answer makes the proxy give the request up (`_ClientWatch`). The bounds on clients themselves (time,
sizes, connections) are kit.watch.connections'. Generation calls (kit.watch.observe.SHAPES) are also
observed, off the forwarding path: the request's bytes and the answer's are kept (the answer's up to
ANSWER_BYTES_DEFAULT; past that, passed on unread) and, on the loop's turn after the answer's last byte went
to the client, handed over to be read (the request hashed, the answer normalized and classified:
kit.watch.observe.seen), in the observer process (`Settings.observer`, kit.watch.observer) or on this loop;
read, each is checked for alarms, counted in the metrics and handed to the recorder, in the order handed
over. Behind vLLM (`counters`), a call that
starts with nothing else in flight is framed by two reads of the upstream's `/metrics` prefix-cache counters,
whose deltas stand for its cached tokens where its usage does not say (only if no other request started
meanwhile: kit.engines.vllm's rule). An upstream that fails before
answering gets the client a 502 with a one-line JSON error; one that dies mid-answer cuts the client's
connection too (a truncated body is never made to look whole), and the call is recorded with its error.
`GET /metrics` answers the proxy's own Prometheus metrics (kit.watch.metrics); everything else is the
upstream's. The alarm tracker remembers at most `Settings.alarm_requests` requests (kit.record.alarms).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from yarl import URL

from kit.core.limits import (
    ANSWER_BYTES_DEFAULT, WATCH_ALARM_REQUESTS, WATCH_PROBE_BYTES, WATCH_REQUEST_BYTES_MAX, WATCH_UPSTREAM_CONNECTIONS)
from kit.core.secret_urls import connection_parts, redact_url
from kit.record.cache_state import Calibration
from kit.record.manifest import now
from kit.watch import observe
from kit.record.alarms import Tracker
from kit.watch.connections import sendable
from kit.watch.metrics import CONTENT_TYPE, Metrics
from kit.watch.observer import Observer, Result

SKIP_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te",
                        b"trailer", b"trailers", b"transfer-encoding", b"upgrade", b"host", b"content-length"})
PASSED_BACK = HOP_BY_HOP - {b"content-length"}  # an answer's headers less these go back (its length is kept)
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
CLIENT_CHECK_S = 1.0  # seconds of waiting for the upstream's answer before the client's connection is listened to
LOG = logging.getLogger("uvicorn.error")  # the server's own log (uvicorn configures it: one line each, on stderr)


@dataclass(frozen=True)
class Settings:
    """What the proxy does: where it forwards to, and how it classifies and records."""

    upstream: str
    store_bodies: bool = False
    calibration: Calibration | None = None
    pinned: bool = False
    reuse_tolerance: int = 8  # prompt tokens a full reuse may leave to evaluate (vLLM: a block)
    engine_build: str | None = None
    counters: bool = False  # read vLLM's /metrics prefix-cache counters around a call alone in flight
    read_timeout: float = 600.0  # seconds the upstream may stay silent within one answer
    answer_bytes: int = ANSWER_BYTES_DEFAULT  # answer bytes kept to observe (more pass through unread)
    alarm_requests: int = WATCH_ALARM_REQUESTS  # requests the alarm tracker remembers (least recent forgotten)
    observer: bool = False  # read calls in a process of the proxy's own while it serves (kit.watch.observer)

    @property
    def reading(self) -> observe.Reading:
        return observe.Reading(self.calibration, self.reuse_tolerance, self.engine_build, self.store_bodies)


def _answered(data: bytes, status: int, headers: list[Any]) -> Response:
    """An answer with exactly these headers (Starlette's own, such as its Content-Length, replaced)."""
    response = Response(data, status_code=status)
    response.raw_headers = headers
    return response


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": {"message": f"kit watch: {message}"}}, status)


class UpstreamCut(Exception):
    """The upstream stopped mid-answer: the client's connection is cut as well."""


class ClientGone(Exception):
    """The client went away before its request was in."""


class Unobserved(Exception):
    """The observer process could not read a call (its words)."""


async def _cut(data: bytes, error: str) -> AsyncIterator[bytes]:
    yield data
    raise UpstreamCut(error)


class _Cuttable(StreamingResponse):
    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        except UpstreamCut:
            return  # no final empty chunk: the server closes the connection, the client sees the cut


class _ClientWatch:
    """While the proxy waits for the upstream's answer to begin: if it has not begun CLIENT_CHECK_S seconds
    on, the client's connection is listened to, and the wait is given up (the task cancelled) if the client
    goes away. A call answered sooner costs one timer and nothing else."""

    def __init__(self, receive: Receive):
        self.receive, self.task = receive, asyncio.current_task()
        self.listener: asyncio.Task[None] | None = None
        self.left = False
        self.timer = asyncio.get_running_loop().call_later(CLIENT_CHECK_S, self._listen)

    def _listen(self) -> None:
        self.listener = asyncio.get_running_loop().create_task(self._await_leaving())

    async def _await_leaving(self) -> None:
        if (await self.receive())["type"] == "http.disconnect" and self.task is not None:
            self.left = True
            self.task.cancel()

    def gone(self) -> bool:
        """Whether the cancellation is this watch's (the client left), not the server's; undone if so."""
        if self.left and self.task is not None:
            self.task.uncancel()
        return self.left

    def stop(self) -> None:
        self.timer.cancel()
        if self.listener is not None:
            self.listener.cancel()


@dataclass
class _Call:
    path: str
    body: bytes  # read (parsed, hashed) once the answer is sent (`Proxy._done`), not before forwarding
    started: str
    clock: float
    number: int = 0  # how many requests the proxy had forwarded when this one started
    counters: Any = None  # vLLM's prefix-cache counters before it, when it started alone
    status: int | None = None
    content_type: str = ""
    encoded: str | None = None


Sink = Callable[[dict[str, Any]], None]


class Proxy:
    """The ASGI app (`app`) and what it keeps: the alarm tracker, the metrics, calls in flight."""

    def __init__(self, settings: Settings, record: Sink | None = None, report: Sink | None = None):
        from aiohttp import BasicAuth  # noqa: PLC0415 - the proxy's upstream client, loaded when it is made

        self.settings = settings
        base, params, _ = connection_parts(settings.upstream)
        self.base = redact_url(base)  # its credentials taken out (sent as a header below); it has no query
        self.query = urlencode(params)  # the upstream URL's own query, sent with every request
        # vLLM's counters, read around a call alone in flight: the same URL every time
        self.metrics_url = URL(self.base + "/metrics" + (f"?{self.query}" if self.query else ""), encoded=True)
        credentials = BasicAuth.from_url(URL(base))  # the upstream URL's own, sent in place of the client's
        self.auth = [("Authorization", credentials.encode())] if credentials else []
        self.dropped = HOP_BY_HOP | {b"authorization"} if credentials else HOP_BY_HOP
        self.record, self.report = record, report
        self.tracker = Tracker(pinned=settings.pinned, cap=settings.alarm_requests)
        self.in_flight = 0
        self.metrics = Metrics(self.tracker, lambda: self.in_flight)
        self.forwarded = 0  # requests forwarded so far (a call is alone if none started while it ran)
        self.calls = 0
        self.unobserved: str | None = None  # why the first call that could not be observed was not (then: failed)
        self._tasks: set[asyncio.Task[None]] = set()  # observations waiting on vLLM's counters
        self.session: Any = None  # the aiohttp.ClientSession to the upstream, while serving
        self.reading = settings.reading  # what reading a call takes of the settings
        self.observer: Observer | None = None  # the process reading calls, while serving (Settings.observer)

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The ASGI application: `GET /metrics` is the proxy's own, every other request is forwarded."""
        if scope["type"] == "http":
            if scope["path"] == "/metrics":
                response: ASGIApp | None = Response(self.metrics.text(), media_type=CONTENT_TYPE) \
                    if scope["method"] == "GET" else _error(405, "/metrics is the proxy's own: GET only")
            elif scope["method"] not in METHODS:
                response = _error(405, f"method not forwarded (only {', '.join(sorted(METHODS))})")
            else:
                response = await self.forward(scope, receive)
            if response is not None:
                await response(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        await receive()  # lifespan.startup
        async with self.upstream():
            await send({"type": "lifespan.startup.complete"})
            await receive()  # lifespan.shutdown
        await send({"type": "lifespan.shutdown.complete"})

    @asynccontextmanager
    async def upstream(self) -> AsyncIterator[None]:
        """The session to the upstream, open while the proxy serves (its ASGI lifespan)."""
        import aiohttp  # noqa: PLC0415 - the proxy's upstream client, loaded when it serves

        from kit.watch import pool  # noqa: PLC0415 - aiohttp's connector, loaded with it

        # what the client sent goes as it is: aiohttp adds none of its default headers, decompresses nothing;
        # a pooled connection its upstream closed meanwhile is never sent on (kit.watch.pool)
        connector = pool.FreshConnector(limit=WATCH_UPSTREAM_CONNECTIONS, ttl_dns_cache=300)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=self.settings.read_timeout)
        # no cookie jar: an upstream's Set-Cookie is its client's alone, never sent with another's request
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False,
                                         skip_auto_headers=SKIP_AUTO_HEADERS, trust_env=False,
                                         cookie_jar=aiohttp.DummyCookieJar()) as session:
            self.session = session
            if self.settings.observer:
                self.observer = Observer(self.reading, self._observed)  # started by its first call
            try:
                yield
            finally:
                await self._drain()

    async def _drain(self) -> None:
        """Once no request is served any more: the observations waiting on vLLM's counters, then the calls the
        observer process has not sent back, are done."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.observer is not None:
            await self.observer.close()

    async def _body(self, receive: Receive) -> bytes | None:
        """The request's body (None: over WATCH_REQUEST_BYTES_MAX); ClientGone if the client left first."""
        data = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise ClientGone
            data += message.get("body", b"")
            if len(data) > WATCH_REQUEST_BYTES_MAX:
                return None
            if not message.get("more_body"):
                return bytes(data)

    def _target(self, scope: Scope) -> str:
        """The request target as the client sent it (the raw path and query bytes, never decoded and encoded
        again), with the upstream URL's own query after the client's. UnicodeDecodeError if not UTF-8."""
        raw = scope.get("raw_path") or scope["path"].encode()
        query = "&".join(part for part in (scope["query_string"].decode(), self.query) if part)
        return self.base + raw.decode() + (f"?{query}" if query else "")

    def _refused(self, scope: Scope, call: _Call | None, status: int, error: str) -> Response:
        """The proxy's own answer to a request it could not relay: one line in the log (no text the client or
        the upstream chose), the call recorded with its error, a one-line JSON error to the client."""
        LOG.warning("kit watch: a %s request answered %d: %s", scope["method"], status, error)
        if call is not None:
            self._done(call, b"", error)
        return _error(status, error)

    async def forward(self, scope: Scope, receive: Receive) -> ASGIApp | None:
        """The upstream's answer to this request (None: the client left before its request was in)."""
        import aiohttp  # noqa: PLC0415 - loaded already by the lifespan

        try:
            data = await self._body(receive)
        except ClientGone:
            return None
        if data is None:
            self.metrics.refused.labels("body_too_large").inc()
            return _error(413, f"the request body is over {WATCH_REQUEST_BYTES_MAX >> 20} MiB; nothing was forwarded")
        method, path = scope["method"], scope["path"]
        try:
            url = URL(self._target(scope), encoded=True)
            headers = [(k.decode(), v.decode()) for k, v in scope["headers"] if k not in self.dropped] + self.auth
        except UnicodeDecodeError:
            self.metrics.refused.labels("not_utf8").inc()
            return _error(400, "the request target or a header is not UTF-8 text, which the upstream client would "
                               "not send byte for byte; nothing was forwarded")
        call = _Call(path, data, now(), time.perf_counter()) if observe.watched(method, path) else None
        if call is None:
            self.metrics.passed.inc()
        assert self.session is not None
        self.forwarded += 1
        alone = self.in_flight == 0
        self.in_flight += 1  # before any await: a request arriving meanwhile sees this one in flight
        relayed = False  # from then on the relay gives the in-flight count back, however it ends
        try:
            if call is not None:
                call.number = self.forwarded
                if self.settings.counters and alone:
                    call.counters = await self._counters()
            watch = _ClientWatch(receive)
            try:
                upstream = await self._sent(method, url, headers, data)
            except ValueError as exc:  # the request cannot be sent as it is (aiohttp checks it before sending)
                self.metrics.refused.labels("unsendable").inc()
                return self._refused(scope, call, 400, f"the request cannot be forwarded as sent ({type(exc).__name__})")
            except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
                return self._refused(scope, call, 502, f"the upstream did not answer ({type(exc).__name__})")
            except asyncio.CancelledError:
                if not watch.gone():
                    raise
                if call is not None:
                    self._done(call, b"", "the client went away before the upstream answered")
                return None
            finally:
                watch.stop()
            if call is not None:
                call.status = upstream.status
                call.content_type = upstream.headers.get("content-type", "")
                encoding = upstream.headers.get("content-encoding", "identity").lower()
                call.encoded = None if encoding == "identity" else encoding
            back = [(k.lower(), v) for k, v in upstream.raw_headers if k.lower() not in PASSED_BACK]
            if not sendable(upstream.status, back):
                upstream.close()
                return self._refused(scope, call, 502, f"the upstream's answer cannot be relayed (HTTP "
                                                       f"{upstream.status}, or a header HTTP does not allow)")
            if method == "HEAD":  # headers only (its Content-Length is that of the GET)
                upstream.release()
                return _answered(b"", upstream.status, back)
            length = upstream.content_length
            streamed = upstream.content_type in observe.STREAMED  # aiohttp's: the media type, lower case
            if length is not None and length <= self.settings.answer_bytes and not streamed:
                return await self._whole(upstream, call, length, back)
            relayed = True
            return _Relay(self, upstream, call, back)
        finally:
            if not relayed:
                self.in_flight -= 1

    async def _sent(self, method: str, url: URL, headers: list[tuple[str, str]], data: bytes) -> Any:
        """The upstream's answer (its head) to the request. A request sent on a kept-alive connection that the
        upstream turns out to have closed (it answers nothing and the connection ends: llama-server closes its
        end some 20-100 ms after a streamed answer, with no `Connection: close`) never reached it, and is sent
        again on the next pooled connection or a new one (kit.watch.pool); a new connection's failure is the
        answer's (a 502)."""
        from aiohttp import ClientConnectorError, ClientOSError, ServerDisconnectedError  # noqa: PLC0415 - loaded

        from kit.watch import pool  # noqa: PLC0415 - with aiohttp, loaded by the lifespan

        tries = WATCH_UPSTREAM_CONNECTIONS + 1  # a reused connection that failed is closed: the pool empties
        while True:
            pool.REUSED.set(False)
            tries -= 1
            try:
                return await self.session.request(method, url, headers=headers, data=data or None,
                                                  allow_redirects=False)
            except (ClientOSError, ServerDisconnectedError) as exc:
                if not pool.REUSED.get() or isinstance(exc, ClientConnectorError) or not tries:
                    raise

    async def _whole(self, upstream: Any, call: _Call | None, length: int, headers: list[Any]) -> Response:
        """An answer of known length read whole and sent in one piece (then observed like a relayed one). One
        that comes cut short reaches the client cut as well: what came, then the connection closed."""
        import aiohttp  # noqa: PLC0415 - loaded already by the lifespan

        error = None
        try:
            data = await upstream.content.readexactly(length)
        except asyncio.IncompleteReadError as exc:
            data, error = exc.partial, "the upstream cut the answer short (IncompleteReadError)"
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            data, error = b"", f"the upstream cut the answer short ({type(exc).__name__})"
        if error is None:
            upstream.release()
        else:
            upstream.close()
        if call is not None:
            asyncio.get_running_loop().call_soon(self._done, call, data, error)
        if error is None:
            return _answered(data, upstream.status, headers)
        response = _Cuttable(_cut(data, error), status_code=upstream.status)
        response.raw_headers = headers
        return response

    def relayed(self, upstream: Any, call: _Call | None, data: bytes, error: str | None) -> None:
        """A relayed answer ended (once, however it ended): the upstream's connection is given back (or closed,
        if the answer did not end whole), the in-flight count too, and the call is observed."""
        if error is None:
            upstream.release()
        else:
            upstream.close()
        self.in_flight -= 1
        if call is not None:  # observed once the client has the answer's end (the loop's next turn)
            if call.counters is not None and self.forwarded == call.number and error is None:
                self._tasks.add(task := asyncio.get_running_loop().create_task(self._after_counters(call, data)))
                task.add_done_callback(self._tasks.discard)
            else:
                asyncio.get_running_loop().call_soon(self._done, call, data, error)

    async def _after_counters(self, call: _Call, data: bytes) -> None:
        self._done(call, data, None, await self._counters())

    async def _counters(self) -> Any:
        """vLLM's cumulative prefix-cache counters now (kit.engines.vllm.parse_cache_counters), or None."""
        import aiohttp  # noqa: PLC0415 - loaded already by the lifespan

        from kit.engines.vllm import parse_cache_counters  # noqa: PLC0415 - vLLM only

        assert self.session is not None
        data = bytearray()
        try:
            async with self.session.get(self.metrics_url, headers=self.auth) as response:
                if response.status != 200:
                    return None
                async for chunk in response.content.iter_any():
                    data += chunk
                    if len(data) > WATCH_PROBE_BYTES:
                        return None
        except (aiohttp.ClientError, asyncio.TimeoutError, RuntimeError):  # RuntimeError: the session closed
            return None
        return parse_cache_counters(data.decode("utf-8", "replace"))

    def _done(self, call: _Call, data: bytes, error: str | None, counters_after: Any = None) -> None:
        """Hand one finished generation call over to be observed: to the observer process where it runs, else
        on this loop (`_observed`)."""
        finished = observe.Finished(call.path, call.body, call.started, time.perf_counter() - call.clock,
                                    call.status, call.content_type, call.encoded, data, error, call.counters,
                                    counters_after)
        if self.observer is not None:
            self.observer.submit(finished)
        else:
            self._observed(finished, None)

    def _observed(self, finished: observe.Finished, result: Result) -> None:
        """Observe one finished call, in the order they were handed over: read it (`result`: kit.watch.observe.seen
        of it, from the observer process; None: read here; a text: why it could not be read), raise its alarms,
        count it in the metrics, record and report it. Observing runs off the forwarding path, where nothing
        would say it failed: a call that could not be observed is still counted, said in the server's log, and
        ends the run failed (`unobserved`): a record may be lost, never silently."""
        self.calls += 1
        try:
            if isinstance(result, str):
                raise Unobserved(result)
            seen = result if result is not None else observe.seen(finished, self.reading)
            alarms = self.tracker.see(seen.call)
            self.metrics.seen(seen.call.state, finished.seconds, alarms, failed=seen.failed)
            fields = {**seen.fields, "alarms": alarms}
            if self.record is not None:
                self.record(fields)
            if self.report is not None:
                self.report(fields)
        except Exception as exc:  # noqa: BLE001 - said and counted, below
            why = str(exc) if isinstance(exc, Unobserved) else \
                f"a call could not be observed ({type(exc).__name__}: {exc}); it may be unrecorded"
            self.unobserved = self.unobserved or why
            LOG.error("kit watch: %s", why)


class _Relay:
    """An answer relayed chunk by chunk as it arrives (the first `answer_bytes` kept to observe), each chunk
    handed to the server as the upstream's client reads it: no body iterator or response class between them
    (a streamed answer's every chunk went through three more coroutine layers). However the relay ends (the
    answer's end, the upstream cutting it: no final chunk, so the server closes the connection and the client
    sees the cut; the client going away; or the response never started because the client left first),
    `Proxy.relayed` runs once."""

    def __init__(self, proxy: Proxy, upstream: Any, call: _Call | None, headers: list[Any]):
        self.proxy, self.upstream, self.call, self.headers = proxy, upstream, call, headers
        self.kept: bytearray | None = bytearray() if call is not None else None
        self.error: str | None = None
        self.whole = False
        self.ended = False

    def end(self) -> None:
        if self.ended:
            return
        self.ended = True
        if not self.whole and self.error is None:
            self.error = "the client went away before the answer was in"
        data = bytes(self.kept) if self.kept is not None else b""
        self.proxy.relayed(self.upstream, self.call, data, self.error)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Relayed, given up when the client leaves; what listens for that is one task of the loop's own, not an
        anyio task group (its cancel scopes cost a streamed call about a tenth of a millisecond of CPU,
        bench/bench_watch.py)."""
        relay, left = asyncio.current_task(), False

        async def listen() -> None:
            nonlocal left
            while (await receive())["type"] != "http.disconnect":
                pass
            left = True
            if relay is not None:
                relay.cancel()

        listener = asyncio.get_running_loop().create_task(listen())
        try:
            await self._relay(send)
        except asyncio.CancelledError:
            if not left or relay is None:
                raise
            relay.uncancel()  # the client left: the relay ends here (end() says so in its record)
        finally:
            listener.cancel()
            self.end()

    async def _relay(self, send: Send) -> None:
        import aiohttp  # noqa: PLC0415 - loaded already by the lifespan

        limit = self.proxy.settings.answer_bytes
        content = self.upstream.content
        await send({"type": "http.response.start", "status": self.upstream.status, "headers": self.headers})
        try:
            while chunk := await content.readany():  # b"": the answer ended whole (a cut raises)
                if self.kept is not None:
                    if len(self.kept) + len(chunk) > limit:
                        self.kept, self.error = None, f"the answer is over {limit} bytes: passed on unread"
                    else:
                        self.kept += chunk
                # the answer's end already read with its last bytes (the upstream ended it whole, nothing is
                # left to read): they go out with the final chunk, in one write, not two a turn apart
                last = content.at_eof() and content.exception() is None
                self.whole = last
                await send({"type": "http.response.body", "body": chunk, "more_body": not last})
                if last:
                    return
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            self.error = f"the upstream cut the answer short ({type(exc).__name__})"
            return  # no final chunk: the server closes the connection, the client sees the cut
        self.whole = True
        await send({"type": "http.response.body", "body": b"", "more_body": False})

