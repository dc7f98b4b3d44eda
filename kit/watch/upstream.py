"""What the proxy asks its upstream once, at start: which engine it is (for `--kind auto`) and its build.

The probing is kit.engines.identify's (one place for what each engine alone answers); nothing here raises
for an upstream that does not answer.
"""

from __future__ import annotations

from kit.engines import registry
from kit.engines.identify import identify

KINDS = ("auto", *registry.ENGINES)


def probe(url: str, kind: str, timeout: float = 5.0) -> tuple[str, str | None, bool]:
    """(the engine kind, its build or version or None, whether the upstream answered at all)."""
    found = identify(url, kind, timeout)
    return found.kind, found.build, found.reached
