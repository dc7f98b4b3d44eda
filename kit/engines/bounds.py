"""How much of an engine's answer the kit reads, and for how long: a size cap and a total deadline per request.

A hostile or broken engine must neither exhaust memory (a 2 GiB body) nor hang a run (one byte every few
seconds). `kit.engines.http.send` reads every body in chunks and stops past `max_answer_bytes`; and every
socket operation of a request (connect, send, each read of the headers and the body) waits at most until the
request's deadline, so the whole request ends by then, however the engine drips its bytes.

The bounds in force are a context variable: the runner sets a run's bounds (`bounded`, from `--max-answer-bytes`
and `--request-deadline`, recorded in the manifest's options); outside a run the defaults hold.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

from kit.core.limits import ANSWER_BYTES_DEFAULT as MAX_ANSWER_BYTES

DEADLINE_FLOOR_S = 600.0
SECONDS_PER_TOKEN = 1.0  # the default deadline grows with the tokens asked for: ~1 token/s is a very slow engine
CONNECT_S = 10.0


@dataclass(frozen=True)
class AnswerBounds:
    """The most bytes read of one answer, and the seconds one request may take (None: the default rule,
    the longer of DEADLINE_FLOOR_S and SECONDS_PER_TOKEN per token the request asks for)."""

    max_answer_bytes: int = MAX_ANSWER_BYTES
    request_deadline: float | None = None

    def deadline(self, tokens: int | None) -> float:
        if self.request_deadline is not None:
            return self.request_deadline
        return max(DEADLINE_FLOOR_S, SECONDS_PER_TOKEN * (tokens or 0))


_BOUNDS: ContextVar[AnswerBounds] = ContextVar("answer_bounds", default=AnswerBounds())
_DEADLINE: ContextVar[float | None] = ContextVar("request_deadline", default=None)  # time.monotonic() instant


@contextmanager
def bounded(bounds: AnswerBounds) -> Iterator[None]:
    """Engine requests made inside (in this thread) are held to `bounds`."""
    token = _BOUNDS.set(bounds)
    try:
        yield
    finally:
        _BOUNDS.reset(token)


def current() -> AnswerBounds:
    return _BOUNDS.get()


@contextmanager
def deadline_in(seconds: float) -> Iterator[None]:
    """Socket operations inside (in this thread) end by `seconds` from now."""
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    """`timeout` shortened to the time left before the deadline; `error` once it has passed."""
    end = _DEADLINE.get()
    if end is None:
        return timeout
    left = end - time.monotonic()
    if left <= 0:
        raise error("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """httpcore's own socket stream, each operation waiting no longer than the deadline allows."""

    def __init__(self, stream: httpcore.NetworkStream):
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname,
                                                      _left(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, local_address: str | None = None,
                    socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._backend.connect_tcp(host, port, _left(timeout, httpcore.ConnectTimeout),
                                                         local_address, socket_options))

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        return _DeadlineStream(self._backend.connect_unix_socket(path, _left(timeout, httpcore.ConnectTimeout),
                                                                 socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's HTTP transport over sockets that honour the request deadline (see the module doc).
    Engines are reached directly: environment proxies do not apply to them."""

    def __init__(self) -> None:
        # one TLS context (httpx's default: it verifies, against certifi's roots), loaded once: loading one costs
        # some 20 ms of CPU, and the transport's own pool below would otherwise load a second one for nothing
        verified = httpx.create_ssl_context()
        super().__init__(verify=verified)
        # httpx==0.28.1 (pinned) keeps its connection pool here; the pool is httpcore's, with our backend
        self._pool = httpcore.ConnectionPool(ssl_context=verified, network_backend=_DeadlineBackend())


def timeouts() -> httpx.Timeout:
    """An engine client's own timeouts: 10 s to connect; no other, since the deadline bounds every wait."""
    return httpx.Timeout(None, connect=CONNECT_S)
