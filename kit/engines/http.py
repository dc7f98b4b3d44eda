"""HTTP for the engine clients: the client, one call and its transport failure as one EngineError, JSON
parsed once.

`send` is the one place an engine client catches httpx's errors; `post_timed` also notes when a request
went out and how long its answer took, for `Completion.sent`.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson

from kit.engines.base import Sent
from kit.errors import EngineError
from kit.manifest import now


def client(base_url: str, timeout: float, transport: httpx.BaseTransport | None = None,
           params: list[tuple[str, str]] | None = None) -> httpx.Client:
    """An engine client's HTTP client: `timeout` seconds per answer (10 to connect); `params`: the query
    parameters sent with every request (a URL's credentials, kit.secret_urls.connection_parts);
    `transport` replaces the network (tests of paths a real server cannot be made to take here)."""
    return httpx.Client(base_url=base_url, params=params, timeout=httpx.Timeout(timeout, connect=10.0),
                        transport=transport)


def send(http: httpx.Client, method: str, path: str, body: dict[str, Any] | None = None, *, who: str,
         fix: str) -> httpx.Response:
    """One HTTP call; a connection or timeout failure raises EngineError naming `who`, the path and `fix`."""
    try:
        return http.request(method, path, json=body)
    except httpx.HTTPError as exc:
        raise EngineError(f"{who} did not answer {method} {path} ({type(exc).__name__}: {exc})", fix) from exc


def post_timed(http: httpx.Client, path: str, body: dict[str, Any], *, who: str,
               fix: str) -> tuple[httpx.Response, Sent]:
    """POST `body` to `path`; the response and what was sent (endpoint, body, send time, seconds taken)."""
    started, clock = now(), time.perf_counter()
    response = send(http, "POST", path, body, who=who, fix=fix)
    return response, Sent(endpoint=path, body=body, started=started, wall_seconds=round(time.perf_counter() - clock, 4))


def json_or(response: httpx.Response, fallback: Any) -> Any:
    """The response's JSON body, or `fallback` when it is not JSON."""
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return fallback
