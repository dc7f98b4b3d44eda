"""The proxy's pool of upstream connections: aiohttp's, less any connection its upstream closed while it waited.

An upstream may close a kept-alive connection without saying so: llama-server closes its end 20-100 ms after a
streamed answer's last chunk, with no `Connection: close` header. aiohttp pools such a connection as soon as the
answer is read and reuses it unless the event loop has already seen it close, so a client's next request went
out on a dead connection and got a 502 for a request the upstream never answered (2-3 of 100 back-to-back
streamed calls against the embedded llama-server here; 15 of 40 once the relay ended answers a turn sooner).
Before a pooled connection is reused, its socket is looked at, as httpx and urllib3 do: an idle connection has
nothing to read, and one that has (the upstream's close, or bytes no request asked for) is closed and the next
one, or a new one, taken. A close that comes only after the request went out is the other half: `REUSED` tells
the proxy the request was sent on a pooled connection, which it then sends again (kit.watch.proxy.Proxy._sent).
aiohttp's own retry covers neither: it resends idempotent methods only, and the proxy's calls are POSTs.
"""

from __future__ import annotations

import select
from contextvars import ContextVar
from typing import Any

from aiohttp import TCPConnector

# whether the forwarding task's last connection came from the pool (set by FreshConnector._get, in that task):
# a request that fails on a reused connection before any answer never reached the upstream (Proxy._sent)
REUSED: ContextVar[bool] = ContextVar("kit_watch_reused", default=False)


def _readable(transport: Any) -> bool:
    """Whether an idle connection's socket has something to read (its peer closed it, or sent bytes unasked)."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return False
    if hasattr(select, "poll"):  # not select(): a proxy with many clients holds descriptors past FD_SETSIZE
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    return bool(select.select([sock], [], [], 0)[0])


class FreshConnector(TCPConnector):
    """aiohttp's TCPConnector, whose pooled connections are reused only while their upstream keeps them open.
    `_get` is aiohttp's (3.14.5, pinned): the pooled connection for a key, or None to open a new one."""

    async def _get(self, key: Any, traces: list[Any]) -> Any:
        while (connection := await super()._get(key, traces)) is not None:
            if not _readable(connection.transport):
                REUSED.set(True)
                return connection
            connection.close()  # closed by its upstream while it waited: never sent on
        return None
