"""The files of one harness run and how a side file is read: one place, for `kit import determinism-harness`
(kit.importers.determinism_harness), which reads them from the harness, and `kit verify` (kit.bundle.imported),
which reads the copies a run folder keeps in records/imported/.

A run is its calls file `<run>.jsonl` with `<run>.manifest.json` and `<run>.done.json` beside it. A side file
is opened as a regular file (never through a link, a device or a FIFO: kit.core.regular_file) within
SIDE_FILE_BYTES, and must hold a JSON object; anything else (too large, not JSON, nested past what the parser
can follow) is a one-line ConfigError, never a traceback.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kit.core.errors import ConfigError
from kit.core.regular_file import read_regular
from kit.protocols.harness.calls import FIX
from kit.protocols.results_model import JsonObject

SIDE_FILE_BYTES = 16 << 20  # the manifest, done marker and report: small JSON objects


@dataclass(frozen=True)
class HarnessFiles:
    """The files of one harness run: its calls (.jsonl), manifest and done marker, and optionally its report."""

    calls: Path
    manifest: Path
    done: Path
    report: Path | None = None

    @classmethod
    def beside(cls, calls: Path, report: Path | None = None) -> "HarnessFiles":
        stem = calls.name.removesuffix(".jsonl")
        return cls(calls, calls.with_name(f"{stem}.manifest.json"), calls.with_name(f"{stem}.done.json"), report)


def json_file(path: Path, what: str) -> tuple[JsonObject, bytes]:
    """The JSON object in a side file (a regular file within SIDE_FILE_BYTES), as the harness wrote it, and its
    bytes."""
    data = read_regular(path, f"the harness's {what}", SIDE_FILE_BYTES, FIX)
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ConfigError(f"{path} is not a JSON file ({reason})", FIX) from exc
    if not isinstance(value, dict):
        raise ConfigError(f"{path} holds a {type(value).__name__}, not the harness's {what} object", FIX)
    return value, data
