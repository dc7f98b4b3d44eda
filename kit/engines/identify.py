"""Which engine serves a URL, from what only that engine answers (`kit check URL --kind auto`, `kit watch`).

Each engine is known by an endpoint no other one serves, with the field that proves it:
- llama.cpp: `GET /props` with `build_info` (a string) or `total_slots` (a count);
- vLLM: `vllm:`-named metric families on `GET /metrics` (its build from `GET /version`);
- SGLang: `GET /get_server_info` (older builds: `/server_info`) with its `version` and server arguments;
- Ollama: `GET /api/version` with `version`.
Anything else that answers is taken for an OpenAI-compatible endpoint. `Identified.line()` says what was
found and from which answer, so the user sees why (e.g. "engine: llama.cpp (GET /props: build_info b1-7e4c0a9)").

Every answer is untrusted: read up to WATCH_PROBE_BYTES within a short timeout, taken only when it is a JSON
object (or, for `/metrics`, text) with the proving field of the right type, and shown only as a short excerpt.
Nothing here raises for a server that does not answer: it is then "not reached".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

import httpx
import orjson

from kit.core.limits import WATCH_PROBE_BYTES
from kit.core.secret_urls import connection_parts
from kit.engines import registry
from kit.engines.http import probe_get

SHOWN = 60  # characters of an engine's own string (a build, a version) shown in a line
VLLM_METRIC = re.compile(rb"^(?:# (?:HELP|TYPE) )?vllm:[a-z_]+", re.MULTILINE)
SGLANG_ARGS = ("model_path", "tp_size", "disable_radix_cache")  # server arguments its server info holds


@dataclass(frozen=True)
class Identified:
    """The engine found at a URL: its registry name, its build or version (None: not said), the answer that
    proved it (e.g. "GET /props: build_info b1-7e4c0a9"), and whether anything answered at all."""

    kind: str
    build: str | None
    evidence: str
    reached: bool

    def line(self) -> str:
        return f"engine: {registry.named(self.kind).label} ({self.evidence})"


def _short(value: Any) -> str:
    text = "".join(ch if ch.isprintable() else "?" for ch in str(value))
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


class _Prober:
    """Bounded GETs against one server; remembers whether any answered (even with an error status)."""

    def __init__(self, client: httpx.Client, base: str):
        self.client, self.base, self.reached = client, base, False

    def raw(self, path: str) -> bytes | None:
        answered, body = probe_get(self.client, self.base + path, WATCH_PROBE_BYTES)
        self.reached = self.reached or answered
        return body

    def json(self, path: str) -> dict[str, Any] | None:
        data = self.raw(path)
        try:
            value = orjson.loads(data) if data is not None else None
        except orjson.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None


def _llamacpp(probe: _Prober) -> Identified | None:
    props = probe.json("/props")
    if props is None:
        return None
    build, slots = props.get("build_info"), props.get("total_slots")
    if isinstance(build, str):
        return Identified(registry.LLAMACPP.name, build, f"GET /props: build_info {_short(build)}", True)
    if isinstance(slots, int) and not isinstance(slots, bool) and slots >= 0:
        return Identified(registry.LLAMACPP.name, None, f"GET /props: total_slots {slots}", True)
    return None


def _vllm(probe: _Prober) -> Identified | None:
    metrics = probe.raw("/metrics")
    if metrics is None or not VLLM_METRIC.search(metrics):
        return None
    version = (probe.json("/version") or {}).get("version")
    build = version if isinstance(version, str) else None
    shown = f"; GET /version: {_short(build)}" if build else ""
    return Identified(registry.VLLM.name, build, f"GET /metrics: vllm: metric names{shown}", True)


def _sglang(probe: _Prober) -> Identified | None:
    for path in ("/get_server_info", "/server_info"):
        info = probe.json(path)
        version = info.get("version") if info else None
        if info and isinstance(version, str) and any(key in info for key in SGLANG_ARGS):
            return Identified(registry.SGLANG.name, version, f"GET {path}: version {_short(version)}", True)
    return None


def _ollama(probe: _Prober) -> Identified | None:
    version = (probe.json("/api/version") or {}).get("version")
    if isinstance(version, str):
        return Identified(registry.OLLAMA.name, version, f"GET /api/version: version {_short(version)}", True)
    return None


# engine -> its proof, in the order tried (llama.cpp first: it is the kit's own engine and answers fastest)
PROOFS: dict[str, Callable[[_Prober], Identified | None]] = {
    registry.LLAMACPP.name: _llamacpp, registry.VLLM.name: _vllm, registry.SGLANG.name: _sglang,
    registry.OLLAMA.name: _ollama}


def identify(url: str, kind: str = "auto", timeout: float = 5.0,
             transport: httpx.BaseTransport | None = None) -> Identified:
    """The engine at `url` (`kind` "auto": whichever proof holds first; a named kind: only its own proof is
    tried, and the kind is kept even where the proof fails). `transport` replaces the network (tests)."""
    base, params, _ = connection_parts(url, strip_suffix="/v1")
    order = list(PROOFS) if kind == "auto" else [kind] if kind in PROOFS else []
    with httpx.Client(timeout=timeout, params=httpx.QueryParams(tuple(params)), trust_env=False,
                      transport=transport) as client:
        probe = _Prober(client, base)
        for name in order:
            found = PROOFS[name](probe)
            if found is not None:
                return found
            if not probe.reached:  # nothing listens (or nothing answers in time): no other probe will fare better
                break
        # asked where an engine's probe reached the server, and also where the kind has no proof of its own
        # (`--kind openai`): then this is the only request, the one that says whether anything answers
        models = probe.json("/v1/models") if probe.reached or not order else None
    fallback = registry.OPENAI.name if kind == "auto" else kind
    if not probe.reached:
        return Identified(fallback, None, "nothing answered", False)
    if kind != "auto":
        said = ("its own endpoints did not answer" if order
                else "GET /v1/models answered" if models is not None else "the server answered")
        return Identified(kind, None, f"--kind {kind}; {said}", True)
    said = "GET /v1/models answered" if models is not None else "no engine-specific endpoint answered"
    return Identified(fallback, None, f"{said}: taken for OpenAI-compatible", True)
