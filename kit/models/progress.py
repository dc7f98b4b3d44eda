"""Progress reports from long model-file operations (download, hashing, extraction, conversion)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class FetchProgress:
    """One report: a stage ("download", "hash", "copy", "convert"), what it is about, done and total.

    `done`/`total` count bytes for downloads, hashing and copies, tensors for conversions and percent
    for builds; `total` is None when unknown.
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


BYTE_STAGES = ("download", "hash", "copy")  # stages whose done/total count bytes (a conversion's: tensors; a build's: %)
STAGE_WORDS = {"download": "downloading", "hash": "checking the sha256 of", "copy": "copying",
               "convert": "converting", "build": "building"}


def said(say: Callable[[str], None], step: int = 10) -> Progress:
    """Progress as lines for a run's output (`say`): one when a stage starts, naming what and how much,
    then one every `step` percent of a known total. Nothing at all when the file is already cached."""
    shown: dict[str, object] = {"key": None, "percent": 0}

    def listen(event: FetchProgress) -> None:
        key = (event.stage, event.detail)
        if key != shown["key"]:
            shown.update(key=key, percent=0)
            size = f" ({event.total / 1e6:.0f} MB)" if event.total and event.stage in BYTE_STAGES else ""
            say(f"{STAGE_WORDS.get(event.stage, event.stage)} {event.detail}{size}…")
        if event.total:
            percent = min(100, 100 * event.done // event.total) // step * step
            if percent > shown["percent"]:  # type: ignore[operator]
                shown["percent"] = percent
                say(f"  {event.stage} {percent}%")

    return listen
