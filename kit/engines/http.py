"""HTTP for the engine clients: the client, one bounded call and its failure as one EngineError, and the
answer's JSON read once and validated against the shape its adapter declares.

`send` is the one place an engine client catches httpx's errors and the one place an answer's body is
read: in chunks, stopped past the size cap, within the request's deadline (kit.engines.bounds).
`post_timed` also notes when a request went out and how long its answer took, for `Completion.sent`.
`answer` / `validated` turn a body into the adapter's pydantic model of the engine's recorded shape; a body
that is not JSON, or lacks a field the kit needs, or has one of the wrong type, is an `InvalidAnswer`
naming the field (the pass it served is VOID), never an empty `ok`.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, TypeVar

import httpx
import orjson
from pydantic import AllowInfNan, BaseModel, ConfigDict, Field, ValidationError

from kit.engines.base import Sent
from kit.engines.bounds import DeadlineTransport, current, deadline_in, timeouts
from kit.core.errors import EngineError, InvalidAnswer
from kit.record.manifest import now


class Answer(BaseModel):
    """An engine answer as the kit reads it: strict JSON types (no "3" for 3, no true for 1), fields the
    kit does not read ignored."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


Finite = Annotated[float, AllowInfNan(False)]
Count = Annotated[int, Field(ge=0)]
M = TypeVar("M", bound=BaseModel)


def client(base_url: str, transport: httpx.BaseTransport | None = None,
           params: list[tuple[str, str]] | None = None) -> httpx.Client:
    """An engine client's HTTP client; `params`: the query parameters sent with every request (a URL's
    credentials, kit.core.secret_urls.connection_parts); `transport` replaces the network (tests of paths a
    real server cannot be made to take here)."""
    return httpx.Client(base_url=base_url, params=tuple(params) if params else None, timeout=timeouts(),
                        transport=transport or DeadlineTransport())


def _mib(size: int) -> str:
    return f"{size / (1 << 20):g} MiB" if size >= 1 << 20 else f"{size} bytes"


def _read(response: httpx.Response, cap: int, what: str) -> bytes:
    """The (decoded) body, read in chunks; EngineError past `cap` bytes."""
    chunks, size = [], 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > cap:
            raise EngineError(f"{what} answered with more than {_mib(cap)}",
                              "a real answer is far smaller: check the engine, or raise --max-answer-bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def send(http: httpx.Client, method: str, path: str, body: dict[str, Any] | None = None, *, who: str,
         fix: str, tokens: int | None = None) -> httpx.Response:
    """One HTTP call within the bounds in force (`tokens`: how many the request asks for, which sets the
    default deadline); a connection failure, a deadline passed or an answer past the size cap raise
    EngineError naming `who` and the path (with `fix` for a failure to connect)."""
    bounds = current()
    seconds = bounds.deadline(tokens)
    what = f"{who} {method} {path}"
    try:
        with deadline_in(seconds), http.stream(method, path, json=body) as response:
            content = _read(response, bounds.max_answer_bytes, what)
    except httpx.HTTPError as exc:
        if isinstance(exc, httpx.TimeoutException) and not isinstance(exc, httpx.ConnectTimeout):  # the deadline
            raise EngineError(f"{what} did not answer in full within {seconds:g} s ({type(exc).__name__})",
                              "check the engine; if it is only slow, raise --request-deadline") from exc
        raise EngineError(f"{who} did not answer {method} {path} ({type(exc).__name__}: {exc})", fix) from exc
    # the body as read (decoded); no headers are kept (records never hold them, see kit.core.secret_urls)
    return httpx.Response(response.status_code, content=content, request=response.request)


def probe_get(http: httpx.Client, url: str, cap: int) -> tuple[bool, bytes | None]:
    """A GET that never raises (identifying a server, kit.engines.identify): whether anything answered, and
    the body of a 200 answer when it is within `cap` bytes (else None)."""
    answered = False
    try:
        with http.stream("GET", url) as response:
            answered = True
            if response.status_code != 200:
                return True, None
            data = bytearray()
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > cap:
                    return True, None
            return True, bytes(data)
    except httpx.HTTPError:
        return answered, None


def post_timed(http: httpx.Client, path: str, body: dict[str, Any], *, who: str, fix: str,
               tokens: int | None = None) -> tuple[httpx.Response, Sent]:
    """POST `body` to `path`; the response and what was sent (endpoint, body, send time, seconds taken)."""
    started, clock = now(), time.perf_counter()
    response = send(http, "POST", path, body, who=who, fix=fix, tokens=tokens)
    return response, Sent(endpoint=path, body=body, started=started, wall_seconds=round(time.perf_counter() - clock, 4))


def json_or(response: httpx.Response, fallback: Any) -> Any:
    """The response's JSON body, or `fallback` when it is not JSON (error bodies, read leniently)."""
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError:
        return fallback


def error_text(response: httpx.Response, *keys: str) -> str:
    """An error answer's message (its first 300 characters): the string found along `keys` in its JSON
    (e.g. "error", "message"), else its text."""
    found: Any = json_or(response, None)
    for key in keys:
        found = found.get(key) if isinstance(found, dict) else None
    return (found if isinstance(found, str) else response.text)[:300]


def _field(loc: tuple[Any, ...]) -> str:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return path


def validated(shape: type[M], payload: Any, *, who: str, what: str, fix: str) -> M:
    """`payload` as `shape`; else InvalidAnswer naming the first field that is missing or wrong."""
    try:
        return shape.model_validate(payload)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        first = errors[0]
        more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
        if not first["loc"]:
            reason = f"an answer that is not a JSON object ({type(payload).__name__})"
        elif first["type"] == "missing":
            reason = f"an answer without `{_field(first['loc'])}`{more}"
        else:
            reason = f"an answer whose `{_field(first['loc'])}` is wrong: {first['msg'].lower()}{more}"
        raise InvalidAnswer(f"{who} answered {what} with {reason}", fix) from None


def validated_or_none(shape: type[M], payload: Any) -> M | None:
    """`payload` as `shape`, or None (error answers, read leniently)."""
    try:
        return shape.model_validate(payload)
    except ValidationError:
        return None


def parsed(response: httpx.Response, *, who: str, what: str, fix: str) -> Any:
    """The response's JSON body; InvalidAnswer when it is empty or not JSON (cut short, NaN, ...)."""
    try:
        return orjson.loads(response.content)
    except orjson.JSONDecodeError as exc:
        cut = "an empty body" if not response.content else f"a body that is not JSON ({exc.msg} at byte {exc.pos})"
        raise InvalidAnswer(f"{who} answered {what} with {cut}", fix) from None


def answer(response: httpx.Response, shape: type[M], *, who: str, what: str, fix: str) -> M:
    """The response's JSON body validated as `shape` (see `parsed` and `validated`)."""
    return validated(shape, parsed(response, who=who, what=what, fix=fix), who=who, what=what, fix=fix)
