"""Progress reports from long model-file operations (download, hashing, extraction, conversion)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class FetchProgress:
    """One report: a stage ("download", "hash", "copy", "convert"), what it is about, done and total.

    `done`/`total` count bytes for downloads, hashing and copies, and tensors for conversions;
    `total` is None when unknown.
    """

    stage: str
    detail: str
    done: int = 0
    total: int | None = None


Progress = Callable[[FetchProgress], None]


def report(progress: Progress | None, stage: str, detail: str, done: int = 0, total: int | None = None) -> None:
    """Send one report to `progress` if there is a listener."""
    if progress is not None:
        progress(FetchProgress(stage, detail, done, total))
