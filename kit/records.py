"""Records files: one JSON line per record, appended and fsynced as it happens; a tolerant reader.

The record itself (its fields, schema `kit.record/2`) is kit.record; docs/records.md describes both.
`RecordWriter` is the one writer every procedure uses: `answered()` makes a request record from an
engine's answer and returns only once it is durable. A reader never trusts a torn last line (a run
killed mid-write): it reports it and returns every complete record before it. Records of schema
`kit.record/1` are upgraded as they are read (kit.record_v1), so every reader sees schema 2.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, TypeVar

import orjson

from kit.engines.base import Completion
from kit.errors import ConfigError
from kit.record import EPISODE_SCHEMA, SCHEMA, EpisodeSummary, RequestRecord, answered
from kit.record_v1 import V1, upgrade


def _loads(line: bytes) -> Any:
    """Parse one line (orjson: records of a paper-scale run are gigabytes); lines orjson refuses (e.g.
    NaN/Infinity, which schema-1 records written with json.dumps may hold) go to json."""
    try:
        return orjson.loads(line)
    except ValueError:
        return json.loads(line)


# Skimming: completion.logprobs is most of a record's parse time, and most analysis steps need only the
# emitted tokens. The kit writes a completion's `logprobs` directly followed by its `finish_reason` (the
# NormalizedCompletion field order), so the array can be cut out before parsing. Both keys must occur exactly once in
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
                record = orjson.loads(line[:begin] + b'"logprobs":null' + line[end + 1:])
            except ValueError:
                record = None
            completion = record.get("completion") if isinstance(record, dict) else None
            if isinstance(completion, dict) and "finish_reason" in completion and completion.get("logprobs", 0) is None:
                return record
    record = _loads(line)
    if isinstance(record, dict) and isinstance(record.get("completion"), dict):
        record["completion"]["logprobs"] = None
    return record


SUPPORTED = {SCHEMA, EPISODE_SCHEMA, V1}
# fdatasync makes appended data and the new file size durable, as fsync does, without the timestamps
_sync = getattr(os, "fdatasync", os.fsync)

R = TypeVar("R", bound=RequestRecord)


class RecordWriter:
    """Appends records (kit.record dataclasses) to a JSON-lines file; each is flushed and fsynced before
    `write` returns. `context` (run_id, pass_id, protocol) is stamped on every record `answered()` makes."""

    def __init__(self, path: Path, **context: Any):
        self.path = path
        self.context = context
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = path.open("ab")
        self.count = 0

    def write(self, record: RequestRecord | EpisodeSummary) -> None:
        """Append one record and make it durable (written, flushed, its data and the file's size synced)."""
        self._fh.write(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))
        self._fh.flush()
        _sync(self._fh.fileno())
        self.count += 1

    def answered(self, kind: type[R], completion: Completion, **fields: Any) -> R:
        """Make the record of one answer (`seq` = the records written so far), write it durably, return it."""
        record = answered(kind, completion, **self.context, seq=self.count, **fields)
        self.write(record)
        return record

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
        schema = record.get("schema") if isinstance(record, dict) else None
        if schema not in SUPPORTED:
            raise ConfigError(f"{path}:{number} has record schema {schema!r}",
                              f"this kit reads {sorted(SUPPORTED)}; upgrade the kit")
        records.append(upgrade(record) if schema == V1 else record)
    return RecordFile(path=path, records=records, torn_tail=torn)
