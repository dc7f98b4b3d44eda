"""The pass-through proxy: a Starlette (ASGI) app served by uvicorn, an aiohttp client session to the upstream
(aiohttp rather than httpx.AsyncClient: a quarter of the CPU time per call here, bench/bench_watch.py).

Every request goes upstream unchanged (method, path, query, headers less the hop-by-hop ones, body bytes)
and every answer comes back unchanged (status, headers less hop-by-hop, the exact bytes, streamed as they
arrive). Generation calls (kit.watch.observe.SHAPES) are also observed: the answer's bytes are kept (up to
ANSWER_BYTES_DEFAULT; past that, passed on unread) and, once the last byte is in, normalized, classified,
checked for alarms, counted in the metrics and handed to the recorder. Behind vLLM (`counters`), a call that
starts with nothing else in flight is framed by two reads of the upstream's `/metrics` prefix-cache counters,
whose deltas stand for its cached tokens where its usage does not say (only if no other request started
meanwhile: kit.engines.vllm's rule). An upstream that fails before
answering gets the client a 502 with a one-line JSON error; one that dies mid-answer cuts the client's
connection too (a truncated body is never made to look whole), and the call is recorded with its error.
`/metrics` answers the proxy's own Prometheus metrics (kit.watch.metrics); everything else is the upstream's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from urllib.parse import urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Send
from yarl import URL

from kit.core.limits import ANSWER_BYTES_DEFAULT, WATCH_PROBE_BYTES, WATCH_REQUEST_BYTES_MAX
from kit.core.secret_urls import connection_parts
from kit.record.cache_state import Calibration
from kit.record.manifest import now
from kit.record.model import RequestSent
from kit.watch import observe
from kit.record.alarms import Call, Tracker
from kit.watch.metrics import CONTENT_TYPE, Metrics

SKIP_AUTO_HEADERS = ("User-Agent", "Accept", "Accept-Encoding", "Content-Type")
HOP_BY_HOP = frozenset({b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te",
                        b"trailer", b"trailers", b"transfer-encoding", b"upgrade", b"host", b"content-length"})
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


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


def _streamed(content_type: str) -> bool:
    return content_type in ("text/event-stream", "application/x-ndjson")


class UpstreamCut(Exception):
    """The upstream stopped mid-answer: the client's connection is cut as well."""


async def _cut(data: bytes, error: str) -> AsyncIterator[bytes]:
    yield data
    raise UpstreamCut(error)


class _Relay(StreamingResponse):
    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        except UpstreamCut:
            return  # no final empty chunk: the server closes the connection, the client sees the cut


@dataclass
class _Call:
    asked: observe.Asked
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
        self.settings = settings
        self.base, params, _ = connection_parts(settings.upstream)
        self.query = urlencode(params)  # the upstream URL's own query, sent with every request
        self.record, self.report = record, report
        self.tracker = Tracker(pinned=settings.pinned)
        self.metrics = Metrics()
        self.in_flight = 0
        self.forwarded = 0  # requests forwarded so far (a call is alone if none started while it ran)
        self.calls = 0
        self._tasks: set[asyncio.Task[None]] = set()  # observations waiting on vLLM's counters
        self.session: Any = None  # the aiohttp.ClientSession to the upstream, while serving
        routes = [Route("/metrics", self.metrics_text, methods=["GET"]),
                  Route("/{path:path}", self.forward, methods=METHODS)]
        self.app = Starlette(routes=routes, lifespan=self._lifespan)

    @asynccontextmanager
    async def _lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        async with self.upstream():
            yield

    @asynccontextmanager
    async def upstream(self) -> AsyncIterator[None]:
        """The session to the upstream, open while the proxy serves (its ASGI lifespan)."""
        import aiohttp  # noqa: PLC0415 - the proxy's upstream client, loaded when it serves

        # what the client sent goes as it is: aiohttp adds none of its default headers, decompresses nothing
        connector = aiohttp.TCPConnector(limit=256, ttl_dns_cache=300)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10.0, sock_read=self.settings.read_timeout)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=False,
                                         skip_auto_headers=SKIP_AUTO_HEADERS, trust_env=False) as session:
            self.session = session
            yield

    async def metrics_text(self, _request: Request) -> Response:
        return Response(self.metrics.text(), media_type=CONTENT_TYPE)

    async def _body(self, request: Request) -> bytes | None:
        data = bytearray()
        async for chunk in request.stream():
            data += chunk
            if len(data) > WATCH_REQUEST_BYTES_MAX:
                return None
        return bytes(data)

    async def forward(self, request: Request) -> Response:
        import aiohttp  # noqa: PLC0415 - loaded already by the lifespan

        data = await self._body(request)
        if data is None:
            return JSONResponse({"error": {"message": f"kit watch: the request body is over "
                                           f"{WATCH_REQUEST_BYTES_MAX >> 20} MiB; nothing was forwarded"}}, 413)
        path = request.url.path
        call = _Call(observe.asked(path, data), now(), time.perf_counter()) if observe.watched(request.method, path) \
            else None
        if call is None:
            self.metrics.passed.inc()
        query = "&".join(part for part in (request.url.query, self.query) if part)
        url = self.base + path + (f"?{query}" if query else "")
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw
                   if k.lower() not in HOP_BY_HOP]
        assert self.session is not None
        self.forwarded += 1
        alone = self.in_flight == 0
        self.in_flight += 1  # before any await: a request arriving meanwhile sees this one in flight
        if call is not None:
            call.number = self.forwarded
            if self.settings.counters and alone:
                call.counters = await self._counters()
        try:
            upstream = await self.session.request(request.method, URL(url, encoded=True), headers=headers,
                                                  data=data or None, allow_redirects=False)
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            self.in_flight -= 1
            error = f"the upstream did not answer ({type(exc).__name__})"
            if call is not None:
                self._done(call, b"", error)
            return JSONResponse({"error": {"message": f"kit watch: {error}"}}, 502)
        if call is not None:
            call.status = upstream.status
            call.content_type = upstream.headers.get("content-type", "")
            encoding = upstream.headers.get("content-encoding", "identity").lower()
            call.encoded = None if encoding == "identity" else encoding
        back = [(k.lower(), v) for k, v in upstream.raw_headers if k.lower() not in HOP_BY_HOP - {b"content-length"}]
        length = upstream.content_length
        if length is not None and length <= self.settings.answer_bytes and not _streamed(upstream.content_type):
            return await self._whole(upstream, call, length, back)
        response = _Relay(self._relay(upstream, call), status_code=upstream.status)
        response.raw_headers = back
        return response

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
        self.in_flight -= 1
        if call is not None:
            asyncio.get_running_loop().call_soon(self._done, call, data, error)
        response: Response = Response(data, status_code=upstream.status) if error is None \
            else _Relay(_cut(data, error), status_code=upstream.status)
        response.raw_headers = headers
        return response

    async def _relay(self, upstream: Any, call: _Call | None) -> AsyncIterator[bytes]:
        import aiohttp  # noqa: PLC0415 - loaded already by the lifespan

        kept: bytearray | None = bytearray() if call is not None else None
        error: str | None = None
        try:
            async for chunk in upstream.content.iter_any():
                if kept is not None:
                    if len(kept) + len(chunk) > self.settings.answer_bytes:
                        kept, error = None, f"the answer is over {self.settings.answer_bytes} bytes: passed on unread"
                    else:
                        kept += chunk
                yield chunk
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            error = f"the upstream cut the answer short ({type(exc).__name__})"
            raise UpstreamCut(error) from exc
        except BaseException:
            error = "the client went away before the answer was in"
            raise
        finally:
            if error is None:
                upstream.release()
            else:
                upstream.close()
            self.in_flight -= 1
            if call is not None:  # observed once the client has the answer's end (the loop's next turn)
                data = bytes(kept) if kept is not None else b""
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
            async with self.session.get(URL(self.base + "/metrics" + (f"?{self.query}" if self.query else ""),
                                            encoded=True)) as response:
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
        """Observe one finished generation call: normalize, classify, raise alarms, count, record, report."""
        seconds = time.perf_counter() - call.clock
        asked = call.asked
        if error is None and call.status != 200:
            error = f"the upstream answered HTTP {call.status}"
        if error is None and call.encoded:
            error = f"the answer is {call.encoded}-encoded: passed on unread"
        answer = observe.answered(asked.path, call.content_type, data) if error is None \
            else observe.Answered(None, error)
        answer = answer.with_counters(call.counters, counters_after)
        label = observe.state_of(answer.completion, self.settings.calibration, self.settings.reuse_tolerance)
        output = answer.output_sha256
        alarms = self.tracker.see(Call(asked.request_sha256, asked.decoding, label.state, output))
        self.metrics.seen(label.state, seconds, alarms, failed=error is not None)
        self.calls += 1
        completion = answer.completion
        fields: dict[str, Any] = {
            "prompt_sha256": asked.prompt_sha256, "endpoint": asked.path, "request_sha256": asked.request_sha256,
            "stream": call.content_type.split(";")[0].strip() in ("text/event-stream", "application/x-ndjson"),
            "status": call.status, "decoding": asked.decoding, "output_sha256": answer.output_sha256,
            "tokens_sha256": answer.tokens_sha256, "state": dict(vars(label)),  # as StateLabel.to_json, not deep-copied
            "cached_tokens": completion.cached_tokens if completion else None,
            "prompt_tokens": completion.prompt_tokens if completion else None,
            "prefill_ms": completion.prefill_ms if completion else None,
            "model": answer.model or asked.model, "engine_build": self.settings.engine_build, "alarms": alarms,
            "gen_ai": gen_ai(asked, answer), "started": call.started, "wall_seconds": round(seconds, 6),
            "error": error or answer.problem}
        if self.settings.store_bodies:
            fields["request"] = RequestSent(asked.path, asked.body) if asked.body is not None else None
            fields["completion"] = completion
        if self.record is not None:
            self.record(fields)
        if self.report is not None:
            self.report(fields)


def gen_ai(asked: observe.Asked, answer: observe.Answered) -> dict[str, Any]:
    """The call's OpenTelemetry GenAI semantic-convention attributes (those with a value)."""
    completion = answer.completion
    values = {
        "gen_ai.operation.name": observe.SHAPES[asked.path][1],
        "gen_ai.request.model": asked.model, "gen_ai.request.seed": asked.seed,
        "gen_ai.request.temperature": asked.temperature, "gen_ai.request.max_tokens": asked.max_tokens,
        "gen_ai.response.model": answer.model,
        "gen_ai.response.finish_reasons": [completion.finish_reason] if completion and completion.finish_reason
        else None,
        "gen_ai.usage.input_tokens": completion.prompt_tokens if completion else None,
        "gen_ai.usage.output_tokens": completion.decode_tokens if completion else None,
        "gen_ai.usage.cache_read.input_tokens": completion.cached_tokens if completion else None,
    }
    return {key: value for key, value in values.items() if value is not None}
