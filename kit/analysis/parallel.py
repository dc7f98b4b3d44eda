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


def call(fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    """fn(*args): lets one `parallel_map` run items of different functions (each a module-level function) that
    take different numbers of arguments."""
    return fn(*args)


def parallel_map(fn: Callable[..., T], items: Sequence[tuple[Any, ...]], workers: int,
                 cost: Callable[..., float] | None = None) -> list[T]:
    """[fn(*item) for item in items], computed in up to `workers` processes. With `cost` (of an item's
    arguments, e.g. the bytes it reads), the costliest items start first, so that no long one is left
    running alone at the end; the results keep the input order either way."""
    if workers <= 1 or len(items) <= 1:
        return [fn(*item) for item in items]
    order = sorted(range(len(items)), key=lambda i: -cost(*items[i])) if cost else list(range(len(items)))
    results: list[Any] = [None] * len(items)
    with ProcessPoolExecutor(max_workers=min(workers, len(items))) as pool:
        for index, result in zip(order, pool.map(fn, *zip(*(items[i] for i in order)))):
            results[index] = result
    return results
