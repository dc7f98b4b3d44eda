"""The shared base of the fake engines: one request handler, reachable two ways.

A `FakeEngine` is a callable `httpx.Request -> httpx.Response`. `transport()` wraps it in
`httpx.MockTransport` for a client the test builds itself (the kit's engine clients take `transport=`);
`serve()` puts the same handler behind a loopback HTTP server (the standard library's
`ThreadingHTTPServer` on 127.0.0.1, a free port, in a thread) for code that opens its own connections:
a `kit` command given a URL, a provider, a subprocess. Both paths answer with the same code, so a shape
proved through one holds through the other.

A handler that raises `httpx.TransportError` (a crashed server: the request gets no response) makes the
loopback server close the connection without answering, which the client sees the same way.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def recorded(engine: str, name: str) -> Any:
    """A recorded response of `engine` (tests/fixtures/<engine>/<name>; each folder's README says where the
    shapes come from): parsed JSON for .json, text otherwise."""
    path = FIXTURES / engine / name
    return json.loads(path.read_text()) if path.suffix == ".json" else path.read_text()


def body_of(request: httpx.Request) -> Any:
    """The request's JSON body; None when it has none, its bytes when they are not JSON."""
    try:
        return json.loads(request.content) if request.content else None
    except ValueError:
        return request.content


class FakeEngine:
    """Records every request (`requests`) and answers it through `answer`, which each dialect overrides."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.lock = threading.Lock()  # the loopback server answers from several threads

    def __call__(self, request: httpx.Request) -> httpx.Response:
        request.read()
        with self.lock:
            self.requests.append(request)
            return self.answer(request, request.url.path, body_of(request))

    def answer(self, request: httpx.Request, path: str, body: Any) -> httpx.Response:
        raise NotImplementedError

    def paths(self) -> list[str]:
        return [r.url.path for r in self.requests]

    def calls(self) -> list[tuple[str, str, Any]]:
        """(method, path, JSON body) of each request, in order."""
        return [(r.method, r.url.path, body_of(r)) for r in self.requests]

    def posted(self, path: str) -> list[Any]:
        """The JSON bodies POSTed to `path`, in order."""
        return [body_of(r) for r in self.requests if r.url.path == path and r.method == "POST"]

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)

    @contextlib.contextmanager
    def serve(self, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
        """Answer on a loopback HTTP server until the block ends; yields its base URL."""
        server = loopback_server(self, host, port)
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        try:
            yield base_url(server)
        finally:
            server.shutdown()
            server.server_close()
            thread.join(5)


def base_url(server: ThreadingHTTPServer) -> str:
    host, port = server.server_address[:2]
    return f"http://{'127.0.0.1' if host == '0.0.0.0' else host}:{port}"


def loopback_server(handler: Callable[[httpx.Request], httpx.Response], host: str = "127.0.0.1", port: int = 0,
                    log: Callable[[str, httpx.Response | None], None] | None = None) -> ThreadingHTTPServer:
    """A ThreadingHTTPServer (not yet serving) that turns each request into an `httpx.Request`, answers it
    with `handler` and writes the `httpx.Response` back. `log(line, response)`: called once per request
    (default: silent)."""

    class Bridge(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        disable_nagle_algorithm = True  # headers and body are two writes: with Nagle, each answer waited ~40 ms

        def handle_one_request(self) -> None:
            self.raw_requestline = self.rfile.readline(65537)
            if not self.raw_requestline or not self.parse_request():
                self.close_connection = True
                return
            content = self.rfile.read(int(self.headers.get("content-length") or 0))
            request = httpx.Request(self.command, base_url(self.server) + self.path,  # type: ignore[arg-type]
                                    headers=[(k, v) for k, v in self.headers.items() if k.lower() != "host"],
                                    content=content)
            try:
                response = handler(request)
            except httpx.TransportError:  # the fake server "crashed": no response at all
                self.close_connection = True
                if log:
                    log(f'"{self.requestline}" no response', None)
                return
            response.read()
            self.send_response(response.status_code)
            for key, value in response.headers.items():
                if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                    self.send_header(key, value)
            self.send_header("content-length", str(len(response.content)))
            self.end_headers()
            self.wfile.write(response.content)
            self.wfile.flush()
            if log:
                log(f'"{self.requestline}" {response.status_code}', response)

        def log_message(self, format: str, *args: Any) -> None:  # the base class's names
            pass

    server = ThreadingHTTPServer((host, port), Bridge)
    server.daemon_threads = True
    return server
