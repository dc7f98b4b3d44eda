"""Which engine serves a URL, from what only that engine answers (`kit check URL --kind auto`, `kit watch`).

Each engine is known by an endpoint no other one serves, with the field that proves it: its proof, a function of
a `Prober` in its adapter module that the engine's registration names (`EngineKind.proof`):
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

from dataclasses import dataclass
from typing import Any, NamedTuple

import httpx
import orjson

from kit.core.limits import WATCH_PROBE_BYTES
from kit.core.secret_urls import connection_parts
from kit.engines import registry
from kit.engines.http import probe_get

SHOWN = 60  # characters of an engine's own string (a build, a version) shown in a line


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


class Proof(NamedTuple):
    """What an engine's proof found: its build or version (None: not said) and the answer that proved it."""

    build: str | None
    evidence: str


def short(value: Any) -> str:
    """An engine's own string (a build, a version) as a line shows it: printable, at most SHOWN characters."""
    text = "".join(ch if ch.isprintable() else "?" for ch in str(value))
    return text if len(text) <= SHOWN else text[:SHOWN] + "..."


class Prober:
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


def proofs() -> list[registry.EngineKind]:
    """The engines with a proof of their own (`EngineKind.proof`), in the order tried: those the kit starts itself
    first (llama.cpp, its own engine, answers fastest), then the others, each in registry order."""
    return sorted((engine for engine in registry.ENGINES.values() if engine.proof), key=lambda engine: not engine.launch)


def identify(url: str, kind: str = "auto", timeout: float = 5.0,
             transport: httpx.BaseTransport | None = None) -> Identified:
    """The engine at `url` (`kind` "auto": whichever proof holds first; a named kind: only its own proof is
    tried, and the kind is kept even where the proof fails). `transport` replaces the network (tests)."""
    base, params, _ = connection_parts(url, strip_suffix="/v1")
    order = [engine for engine in proofs() if kind in ("auto", engine.name)]
    with httpx.Client(timeout=timeout, params=httpx.QueryParams(tuple(params)), trust_env=False,
                      transport=transport) as client:
        probe = Prober(client, base)
        for engine in order:
            found = engine.prove(probe)
            if found is not None:
                return Identified(engine.name, found.build, found.evidence, True)
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
