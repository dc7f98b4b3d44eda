"""What the proxy asks its upstream once, at start: which engine it is (for `--kind auto`) and its build.

llama-server answers `GET /props` (`build_info`), Ollama `GET /api/version`, vLLM `GET /version`; an
OpenAI-compatible server need answer none of them (its build is then unknown). Each answer is read up to
WATCH_PROBE_BYTES, with a short timeout; nothing here raises for an upstream that does not answer.
"""

from __future__ import annotations

from typing import Any

import httpx

from kit.core.limits import WATCH_PROBE_BYTES
from kit.core.secret_urls import connection_parts
from kit.engines import registry

# engine kind -> (path, the key holding its build)
PROBES = {registry.LLAMACPP.name: ("/props", "build_info"), registry.OLLAMA.name: ("/api/version", "version"),
          registry.VLLM.name: ("/version", "version")}
KINDS = ("auto", *registry.ENGINES)


def _get(client: httpx.Client, base: str, path: str) -> dict[str, Any] | None:
    try:
        with client.stream("GET", base + path) as response:
            if response.status_code != 200:
                return None
            data = bytearray()
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > WATCH_PROBE_BYTES:
                    return None
    except httpx.HTTPError:
        return None
    try:
        import orjson  # noqa: PLC0415

        value = orjson.loads(bytes(data))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def probe(url: str, kind: str, timeout: float = 5.0) -> tuple[str, str | None, bool]:
    """(the engine kind, its build or version or None, whether the upstream answered at all)."""
    base, params, _ = connection_parts(url)
    order = list(PROBES) if kind == "auto" else [kind] if kind in PROBES else []
    with httpx.Client(timeout=timeout, params=httpx.QueryParams(tuple(params)), trust_env=False) as client:
        for name in order:
            path, key = PROBES[name]
            answer = _get(client, base, path)
            if answer is not None and (kind != "auto" or key in answer):
                build = answer.get(key)
                return name, str(build) if build is not None else None, True
        try:
            with client.stream("GET", base + "/"):
                reached = True
        except httpx.HTTPError:
            reached = False
    return (registry.OPENAI.name if kind == "auto" else kind), None, reached
