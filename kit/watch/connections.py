"""The proxy's client connections: uvicorn's httptools protocol, with the bounds on a client that uvicorn
leaves open (it starts its keep-alive timer only once a response is sent, and reads a request's line,
headers and body for as long, and its line and headers as far, as the client likes).

`Bounds` are what a watch sets (`kit watch --idle-timeout --header-timeout --max-connections`); `protocol`
gives the protocol class uvicorn serves with (its `http` setting). With it a connection is closed when

- no request begins within `idle_timeout` seconds of the connection opening or of the previous answer's end
  (uvicorn's own keep-alive timeout, the same value; bytes that begin no request, such as empty lines, do
  not put it off);
- a request's line and headers are not whole `header_timeout` seconds after its first byte (answered 408),
  or run past WATCH_HEADER_BYTES (answered 431);
- a request's body is not whole `idle_timeout` seconds after its headers plus a second per WATCH_BODY_RATE
  bytes of its Content-Length (answered 408; nothing is forwarded);
- the client reads nothing for `idle_timeout` seconds while an answer waits to be written to it (cut);

and past `max_connections` connections at once uvicorn answers every new request 503 (`limit_concurrency`).
A request read in one piece arms no timer of its own: they are armed only when a request arrives in parts
or a client does not read. `sendable` says whether uvicorn can send an upstream's answer at all.

What uvicorn writes to a client in the turn of the event loop that begins an answer (its status line and
headers, the body read whole or the first chunk, a short answer's last chunk) goes out in one write
(`_Coalesced`): on a loaded machine each socket write costs the client a system call's time, and an answer
read whole took two. The bytes and their order are unchanged; they are handed to the socket at the answer's
end, at the loop's next turn, or past COALESCE_BYTES, whichever comes first, so the transport's flow control
(and the unread-client bound) see them as before; a streamed answer's later chunks go out as they come.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.httptools_impl import HEADER_RE, HEADER_VALUE_RE, STATUS_LINE, HttpToolsProtocol

from kit.core.limits import (
    WATCH_BODY_RATE, WATCH_CONNECTIONS, WATCH_HEADER_BYTES, WATCH_HEADER_TIMEOUT, WATCH_IDLE_TIMEOUT,
    WATCH_REQUEST_BYTES_MAX)

COALESCE_BYTES = 1 << 16  # bytes held for one write at most (past them: written at once)
REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large"}


@dataclass(frozen=True)
class Bounds:
    """How long and how much the proxy waits on, reads from and serves to its clients."""

    idle_timeout: float = WATCH_IDLE_TIMEOUT  # seconds a client may stay silent (or not read) while awaited
    header_timeout: float = WATCH_HEADER_TIMEOUT  # seconds from a request's first byte to the end of its headers
    max_connections: int = WATCH_CONNECTIONS  # client connections at once (past it: 503)
    header_bytes: int = WATCH_HEADER_BYTES  # a request's line and headers, at most (about: one read more)

    def to_json(self) -> dict[str, Any]:
        return {"idle_timeout_s": self.idle_timeout, "header_timeout_s": self.header_timeout,
                "max_connections": self.max_connections, "header_bytes": self.header_bytes}


class _Coalesced:
    """A client's transport whose writes within the turn of the loop that begins an answer go out as one (the
    module's docstring); after that, until the answer's end (`answered`), each write goes out as it comes (a
    streamed answer's chunks arrive a turn apart: holding them would only cost a callback each). Everything
    else is the transport's own."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop):
        self._transport, self._loop = transport, loop
        self._held: list[bytes] = []
        self._size = 0
        self._due: asyncio.Handle | None = None
        self._through = False  # the answer's first turn is over: writes go straight out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def write(self, data: bytes) -> None:
        if self._through:
            self._transport.write(data)
            return
        self._held.append(data)
        self._size += len(data)
        if self._size > COALESCE_BYTES:
            self.flush()
        elif self._due is None:
            self._due = self._loop.call_soon(self.flush)

    def flush(self) -> None:
        self._through = True
        if self._due is not None:
            self._due.cancel()
            self._due = None
        if self._held:
            data = self._held[0] if len(self._held) == 1 else b"".join(self._held)
            self._held, self._size = [], 0
            if not self._transport.is_closing():
                self._transport.write(data)

    def answered(self) -> None:
        """An answer ended: what is held goes out, and the next answer's first turn is held again."""
        self.flush()
        self._through = False

    def get_write_buffer_size(self) -> int:
        return self._size + self._transport.get_write_buffer_size()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._held, self._size = [], 0
        self._transport.abort()


class _Bounded(HttpToolsProtocol):
    """HttpToolsProtocol with the bounds above (set on the subclass `protocol` makes)."""

    header_timeout: float
    header_bytes: int
    refused: Callable[[str], None]

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._in_head = False  # a request's first byte is in, its headers are not whole yet
        self._head_bytes = 0
        self._idle_at = 0.0  # when a connection awaiting a request is closed
        self._timer: asyncio.TimerHandle | None = None  # the head's or the body's deadline
        self._write_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = _Coalesced(transport, self.loop)  # type: ignore[assignment]
        self._awaiting()  # uvicorn arms its keep-alive timer only after a response: a client that never sends too

    def _awaiting(self) -> None:
        """Awaiting a request from now: closed if none begins within the idle timeout."""
        self._idle_at = self.loop.time() + self.timeout_keep_alive
        self._unset_keepalive_if_required()
        self.timeout_keep_alive_task = self.loop.call_at(self._idle_at, self.timeout_keep_alive_handler)

    def on_response_complete(self) -> None:
        self.transport.answered()  # type: ignore[attr-defined] # its end goes out now, before it is observed
        super().on_response_complete()  # arms uvicorn's keep-alive timer (unless a pipelined request is next)
        self._idle_at = self.loop.time() + self.timeout_keep_alive

    def _set(self, when: float, callback: Callable[[], None]) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self.loop.call_at(when, callback)

    def _clear(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def data_received(self, data: bytes) -> None:
        counted = self._in_head  # the bytes of a request whose head began in an earlier read
        super().data_received(data)  # cancels the keep-alive timer, parses (the callbacks below)
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if self._in_head:
            self._head_bytes += len(data) if counted else 0
            if self._head_bytes > self.header_bytes:
                self._refuse(431, "header_too_large", f"the request's line and headers are over {self.header_bytes} "
                                                      "bytes; nothing was forwarded")
            elif self._timer is None:
                self._set(self.loop.time() + self.header_timeout, self._head_late)
        elif cycle is None or cycle.response_complete:  # bytes that begin no request (empty lines) do not
            self.timeout_keep_alive_task = self.loop.call_at(self._idle_at, self.timeout_keep_alive_handler)  # count
        elif cycle.more_body and self._timer is None:  # a body in parts: whole by its deadline
            self._set(self.loop.time() + self.timeout_keep_alive + _length(self.headers) / WATCH_BODY_RATE,
                      self._body_late)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes = True, 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._clear()
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._clear()

    def _head_late(self) -> None:
        self._timer = None
        if not self._in_head or self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:  # a pipelined request's head: the answer
            self._set(self.loop.time() + self.header_timeout, self._head_late)  # before it comes first
        else:
            self._refuse(408, "header_timeout", f"the request's line and headers were not whole within "
                                                f"{self.header_timeout:g} s; nothing was forwarded")

    def _body_late(self) -> None:
        self._timer = None
        if self.cycle is None or not self.cycle.more_body or self.transport.is_closing():
            return
        if self.cycle.response_started:
            self.transport.close()
        else:  # the app, awaiting the body, sees the client gone and forwards nothing
            self._refuse(408, "body_timeout", "the request's body was not whole in time (the idle timeout, and a "
                                              f"second more per {WATCH_BODY_RATE >> 10} KiB); nothing was forwarded")

    def _refuse(self, status: int, reason: str, message: str) -> None:
        """Answer `status` with a one-line JSON error and close the connection (no request reached the app)."""
        self.refused(reason)
        body = json.dumps({"error": {"message": f"kit watch: {message}"}}).encode()
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                             b"connection: close\r\n\r\n%s" % (status, REASONS[status].encode(), len(body), body))
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._clear()
        if self._write_timer is not None:
            self._write_timer.cancel()
        self._unset_keepalive_if_required()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_timer is None:  # the client reads nothing of what is waiting for it
            self._write_timer = self.loop.call_later(self.timeout_keep_alive, self._unread)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _unread(self) -> None:
        self._write_timer = None
        self.transport.abort()  # what is waiting for it is dropped: the answer reaches the client cut


def _length(headers: list[tuple[bytes, bytes]]) -> int:
    """A request's Content-Length (the largest body the proxy reads when it has none)."""
    value = next((value for name, value in headers if name == b"content-length"), b"")
    return min(int(value), WATCH_REQUEST_BYTES_MAX) if value.isdigit() else WATCH_REQUEST_BYTES_MAX


def sendable(status: int, headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether uvicorn can send an answer with this status and these headers (it raises on any other, after
    the request was forwarded): the status a three-digit one it has a line for, no header name or value with
    a character it refuses (its own patterns)."""
    return status in STATUS_LINE and not HEADER_RE.search(b"".join(name for name, _ in headers)) \
        and not HEADER_VALUE_RE.search(b"".join(value for _, value in headers))


def protocol(bounds: Bounds, refused: Callable[[str], None]) -> type[HttpToolsProtocol]:
    """The protocol class uvicorn serves the proxy with (uvicorn.Config's `http`); `refused(reason)` counts
    each request answered 408 or 431 (kit.watch.metrics.REFUSALS)."""
    return type("BoundedHttpToolsProtocol", (_Bounded,), {
        "header_timeout": bounds.header_timeout, "header_bytes": bounds.header_bytes,
        "refused": staticmethod(refused)})


def server_settings(bounds: Bounds) -> dict[str, Any]:
    """uvicorn.Config's settings for these bounds (with `http=protocol(...)`), and the proxy's own."""
    return {"timeout_keep_alive": bounds.idle_timeout, "limit_concurrency": bounds.max_connections,
            # an answer's headers are the upstream's, with no Server or Date of uvicorn's own added; no client
            # address or scheme is read from the X-Forwarded headers a client sends
            "server_header": False, "date_header": False, "proxy_headers": False}
