"""An httpx transport that keeps a copy of every answer's bytes as the upstream sent them: the proxy reads
the upstream through it, and a test holds what the client got against what the upstream sent."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx


class _Tee(httpx.AsyncByteStream):
    def __init__(self, stream: httpx.AsyncByteStream, seen: bytearray):
        self.stream, self.seen = stream, seen

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.stream:
            self.seen.extend(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self.stream.aclose()


class Tap(httpx.AsyncBaseTransport):
    """httpx's own transport, with each answer's bytes kept in `bodies` (by request path, in order)."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.bodies: list[tuple[str, bytearray]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        seen = bytearray()
        self.bodies.append((request.url.path, seen))
        assert isinstance(response.stream, httpx.AsyncByteStream)
        return httpx.Response(response.status_code, headers=response.headers, stream=_Tee(response.stream, seen),
                              extensions=response.extensions)

    async def aclose(self) -> None:
        await self.inner.aclose()
