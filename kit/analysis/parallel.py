"""Reading many record files is the slow part of analysis: spread it over worker processes.

`parallel_map` keeps the input order; with one worker (or one item) it runs in this process.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def default_workers() -> int:
    """Worker processes to use: the CPUs this process may run on (at most 8)."""
    try:
        count = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        count = os.cpu_count() or 1
    return max(1, min(8, count))


def import_before_forking(*modules: str) -> None:
    """Import `modules` in this process once: workers forked afterwards start with them loaded instead of
    each importing them (the statistics stack takes about a second to import)."""
    for name in modules:
        importlib.import_module(name)


def parallel_map(fn: Callable[..., T], items: Sequence[tuple[Any, ...]], workers: int) -> list[T]:
    """[fn(*item) for item in items], computed in up to `workers` processes."""
    if workers <= 1 or len(items) <= 1:
        return [fn(*item) for item in items]
    with ProcessPoolExecutor(max_workers=min(workers, len(items))) as pool:
        return list(pool.map(fn, *zip(*items)))
