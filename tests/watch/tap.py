"""A TCP relay between the proxy and its upstream that keeps the bytes each side sent on every connection:
a witness of what the upstream sent, independent of the proxy, for a test to hold against what the client
got. `answer_body(path)` is the body of the upstream's answer to the first `POST path`, its chunked
transfer encoding undone (the body bytes, as the proxy's client and the proxy's own client read them)."""

from __future__ import annotations

import asyncio
import threading
from urllib.parse import urlsplit


def dechunked(message: bytes) -> bytes:
    """The body of one HTTP/1.1 answer: chunked transfer encoding undone, or content-length bytes."""
    head, _, rest = message.partition(b"\r\n\r\n")
    headers = {line.split(b":", 1)[0].strip().lower(): line.split(b":", 1)[1].strip()
               for line in head.split(b"\r\n")[1:] if b":" in line}
    if headers.get(b"transfer-encoding", b"").lower() != b"chunked":
        return rest[:int(headers[b"content-length"])]
    body = bytearray()
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0], 16)
        if size == 0:
            return bytes(body)
        body += rest[:size]
        rest = rest[size + 2:]


class Relay:
    """Relays 127.0.0.1:<port> (`url`) to `upstream`, in a thread of its own, keeping both directions."""

    def __init__(self, upstream: str):
        parts = urlsplit(upstream)
        self.host, self.port = parts.hostname, parts.port
        self.connections: list[tuple[bytearray, bytearray]] = []  # (what the proxy sent, what the upstream sent)
        self.loop = asyncio.new_event_loop()
        self.started = threading.Event()
        self.url = ""

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, kept: bytearray) -> None:
        try:
            while data := await reader.read(65536):
                kept += data
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        asked, sent = bytearray(), bytearray()
        self.connections.append((asked, sent))
        await asyncio.gather(self._pipe(reader, up_writer, asked), self._pipe(up_reader, writer, sent))

    def _serve(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        self.started.set()
        self.loop.run_forever()
        server.close()

    def __enter__(self) -> Relay:
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()
        self.started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def answer_body(self, path: str) -> bytes:
        sent = next(sent for asked, sent in self.connections if asked.startswith(f"POST {path} ".encode()))
        return dechunked(bytes(sent))
