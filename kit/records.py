"""Records: one JSON line per request, appended and flushed as it happens; a tolerant reader.

The schema is documented in docs/records.md. A reader never trusts a torn last line (a run killed
mid-write): it reports it and returns every complete record before it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from kit.errors import ConfigError

try:  # a faster parser where installed (records of a paper-scale run are gigabytes)
    from orjson import loads as _fast_loads
except ImportError:  # pragma: no cover - depends on the environment
    _fast_loads = json.loads


def _loads(line: bytes) -> Any:
    """Parse one line; lines orjson refuses (e.g. NaN/Infinity, which json.dumps writes) go to json."""
    try:
        return _fast_loads(line)
    except ValueError:
        return json.loads(line)

# Skimming: completion.logprobs is most of a record's parse time, and most analysis steps need only the
# emitted tokens. The kit writes a completion's `logprobs` directly followed by its `finish_reason` (the
# Completion field order), so the array can be cut out before parsing. Both keys must occur exactly once in
# the line (a quote inside a JSON string is escaped, so these bytes cannot occur inside a string) and the
# parse must find `finish_reason` in the completion; any other line is parsed in full.
_LOGPROBS_KEY = b'"logprobs":['
_FINISH_KEY = b'"finish_reason":'


def _loads_skimmed(line: bytes) -> Any:
    """Parse a record with completion.logprobs left out (None), cutting the array out when it is safe."""
    if line.count(_LOGPROBS_KEY) == 1 and line.count(_FINISH_KEY) == 1:
        begin = line.find(_LOGPROBS_KEY)
        end = line.find(b"]," + _FINISH_KEY, begin)
        if end >= 0:
            try:
                record = _fast_loads(line[:begin] + b'"logprobs":null' + line[end + 1:])
            except ValueError:
                record = None
            completion = record.get("completion") if isinstance(record, dict) else None
            if isinstance(completion, dict) and "finish_reason" in completion and completion.get("logprobs", 0) is None:
                return record
    record = _loads(line)
    if isinstance(record, dict) and isinstance(record.get("completion"), dict):
        record["completion"]["logprobs"] = None
    return record


SCHEMA = "kit.record/1"
SUPPORTED = {SCHEMA}


def prompt_sha256(prompt: str) -> str:
    return hashlib.sha256(prompt.encode("utf-8")).hexdigest()


class RecordWriter:
    """Appends records to a JSON-lines file, flushing and fsyncing each one."""

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = path.open("a", encoding="utf-8")
        self.count = 0

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps({"schema": SCHEMA, **record}, ensure_ascii=False, separators=(",", ":"))
        self._fh.write(line + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.count += 1

    def close(self) -> None:
        self._fh.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class RecordFile:
    """The complete records of one file, and whether its last line was torn."""

    path: Path
    records: list[dict[str, Any]]
    torn_tail: bool

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records)


def read_records(path: Path, logprobs: bool = True) -> RecordFile:
    """Read a records file. A last line without a newline that does not parse is a torn tail and is
    skipped; a bad line anywhere else is corruption and raises ConfigError naming file and line.
    With ``logprobs=False`` every record's ``completion.logprobs`` is None (much faster to read)."""
    parse = _loads if logprobs else _loads_skimmed
    data = path.read_bytes()
    lines = data.split(b"\n")
    torn = False
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        try:
            _loads(lines[-1])
        except ValueError:
            lines.pop()
            torn = True
    records = []
    for number, raw in enumerate(lines, start=1):
        try:
            record = parse(raw)
        except ValueError as exc:
            raise ConfigError(f"{path}:{number} is not a valid record ({getattr(exc, 'msg', exc)})",
                              "the file is damaged; restore it from the bundle or rerun that pass") from exc
        if record.get("schema") not in SUPPORTED:
            raise ConfigError(f"{path}:{number} has record schema {record.get('schema')!r}",
                              f"this kit reads {sorted(SUPPORTED)}; upgrade the kit")
        records.append(record)
    return RecordFile(path=path, records=records, torn_tail=torn)
