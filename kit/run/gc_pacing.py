"""How often Python's cyclic garbage collector runs while a protocol serves requests.

Every request builds thousands of short-lived containers (the parsed answer, its normalized
log-probabilities, the record), almost all freed by reference counting within the request. With
Python's default threshold (a young collection every 700 new containers) the collector scans each of
them once or twice before that; during a run the threshold is raised so that a young collection comes
every few requests instead of a dozen times per request. The earlier setting is restored afterwards.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

RUN_THRESHOLD = 50_000  # new containers between young collections while a run serves requests


@contextmanager
def fewer_collections(threshold: int = RUN_THRESHOLD) -> Iterator[None]:
    """Raise the collector's young-generation threshold to at least `threshold` for the block."""
    before = gc.get_threshold()
    gc.set_threshold(max(threshold, before[0]), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
