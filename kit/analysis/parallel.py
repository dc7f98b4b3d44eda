"""Reading many record files is the slow part of analysis: spread it over worker processes.

`parallel_map` keeps the input order; with one worker (or one item) it runs in this process. `Pool` keeps
its workers for a whole analysis, so that jobs known only later (the sweep's GLMM refits, once its folders
are read) queue behind the reads instead of waiting for them all.
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
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


# glibc's mallopt options, and the values a worker sets: the GLMM refits and the record parses make and drop
# many arrays and objects of a few hundred kB to a few MB; with glibc's defaults each goes back to the kernel
# when dropped and faults its pages in again when made (the refits alone: 0.7 million page faults, 1.7 s of
# system time), so a worker keeps its freed memory for the next one instead (it exits when the analysis ends).
_MALLOPT = ((-3, 32 << 20), (-1, 1 << 30), (-2, 64 << 20))  # M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, M_TOP_PAD


def keep_freed_memory() -> bool:
    """Have this process's allocator keep freed memory (glibc's mallopt; with another C library nothing
    happens), and say whether it was told. Worker processes start with it: it changes how fast they run,
    never what they compute."""
    try:
        glibc = "glibc" in (os.confstr("CS_GNU_LIBC_VERSION") or "")
    except (ValueError, OSError):  # pragma: no cover - not a glibc system
        glibc = False
    if not glibc:
        return False  # pragma: no cover
    libc = ctypes.CDLL(None)  # the C library this process already uses
    return all([libc.mallopt(option, value) == 1 for option, value in _MALLOPT])  # each option set, even after a refusal


def without_gc(fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) with Python's cyclic garbage collector paused, as every job of a `Pool` runs. Reading records
    makes millions of dicts and lists, and the collector's passes over them (none of them a cycle) took a third
    of a read's CPU time (four grid runs and twelve sweep folders read in one process: 4.3 s with the
    collector, 2.7 s without). A cycle made meanwhile is collected once the collector is back on."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return fn(*args)
    finally:
        if was_enabled:
            gc.enable()


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
        return [without_gc(fn, *item) for item in items]
    with Pool(min(workers, len(items))) as pool:
        return pool.map(fn, items, cost)


class Pool:
    """Worker processes for one analysis (`keep_freed_memory` in each; every job `without_gc`): `submit` queues a job and gives its
    Future, `map` is parallel_map's on these workers. With one worker there is no process: a job runs in this
    process when its result is first asked for, so jobs fail in the order their results are taken."""

    def __init__(self, workers: int):
        self.workers = workers
        self.executor = ProcessPoolExecutor(workers, initializer=keep_freed_memory) if workers > 1 else None

    def submit(self, fn: Callable[..., T], *args: Any) -> Future:
        if self.executor is not None:
            return self.executor.submit(without_gc, fn, *args)
        return _Deferred(without_gc, (fn, *args))

    def map(self, fn: Callable[..., T], items: Sequence[tuple[Any, ...]],
            cost: Callable[..., float] | None = None) -> list[T]:
        """[fn(*item) for item in items] on the workers, the costliest started first (`parallel_map`)."""
        order = sorted(range(len(items)), key=lambda i: -cost(*items[i])) if cost else list(range(len(items)))
        futures: list[Any] = [None] * len(items)
        for index in order:
            futures[index] = self.submit(fn, *items[index])
        return [future.result() for future in futures]

    def beside(self, fn: Callable[..., T], *args: Any) -> Future:
        """fn(*args) on a thread of this process while the caller goes on, when the pool has workers (the jobs
        fn submits are what the thread waits for); without workers, when its result is first asked for."""
        if self.executor is None:
            return _Deferred(fn, args)
        thread = ThreadPoolExecutor(1)
        try:
            return thread.submit(fn, *args)
        finally:
            thread.shutdown(wait=False)  # its thread ends once fn returns

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        if self.executor is not None:  # a failed analysis does not wait for the jobs it no longer needs
            self.executor.shutdown(wait=True, cancel_futures=kind is not None)


class _Deferred(Future):
    """A job of a Pool without workers: run here when its result is first asked for."""

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]):
        super().__init__()
        self._job: tuple[Callable[..., Any], tuple[Any, ...]] | None = (fn, args)

    def result(self, timeout: float | None = None) -> Any:
        if self._job is not None:
            fn, args = self._job
            self._job = None
            try:
                self.set_result(fn(*args))
            except Exception as exc:  # noqa: BLE001 - raised again just below, by Future.result
                self.set_exception(exc)
        return super().result(timeout)
