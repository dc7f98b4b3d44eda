"""Records files: one JSON line per record, appended and fsynced as it happens; a reader that counts
every record once or refuses.

The record itself (its fields, schema `kit.record/2`) is kit.record.model; docs/records.md describes both.
`RecordWriter` is the one writer every procedure uses: `answered()` makes a request record from an
engine's answer and returns only once it is durable. Records of schema `kit.record/1` are upgraded as
they are read (kit.record.v1), so every reader sees schema 2.

What a reader refuses (DamagedRecords, a ConfigError, naming file and line), so that no count is ever
silently different:
- a damaged line, or a record of another schema;
- a record whose text no longer matches its digests (`output_sha256` of `completion.text`,
  `prompt_sha256` of the prompt sent: kit.record.model.digest_problem), so that a forged record cannot pass;
- in a request file, a record whose `seq` repeats one already read or skips one (seq runs 0, 1, 2, ...
  in the order written), or whose `pass_id` is not the file's;
- in an episodes file (`records/<pass>.episodes.jsonl`), an episode (`unit`) listed twice;
- a torn last line (the file ends inside a record: the run was killed mid-write, or the file was cut),
  unless the caller asks to see it (`torn="report"`, for `kit resume`): it raises `CutShort`.
A pass whose file is torn or holds fewer records than the manifest counts is *cut short*
(`cut_short`): `kit resume` runs it again, and `kit analyze` and `kit bundle` refuse the run until then
(`require_whole`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Literal, Mapping, TypeVar

import orjson

from kit.record.completion import Completion
from kit.core.errors import ConfigError
from kit.core.owned_file import open_append
from kit.core.paths import RunPaths
from kit.record.model import EPISODE_SCHEMA, SCHEMA, EpisodeSummary, RequestRecord, answered, digest_problem
from kit.record.v1 import V1, upgrade
from kit.record.view import CheckedPrompts, PositionView, parse as parse_view, positions as view_positions, utf8

if TYPE_CHECKING:
    from kit.record.manifest import PassInfo


def _loads(line: bytes | memoryview) -> Any:
    """Parse one line (orjson: records of a paper-scale run are gigabytes); lines orjson refuses (e.g.
    NaN/Infinity, which schema-1 records written with json.dumps may hold) go to json."""
    try:
        return orjson.loads(line)
    except ValueError:
        return json.loads(bytes(line))


# Skimming: completion.logprobs is most of a record's parse time, and most analysis steps need only the
# emitted tokens. The kit writes a completion's `logprobs` directly followed by its `finish_reason` (the
# NormalizedCompletion field order), so the array can be cut out before parsing. `logprobs` must occur once in the
# line and `finish_reason` once after it (a quote inside a JSON string is escaped, so these bytes cannot occur inside
# a string), and the parse must find `finish_reason` in the completion; any other line is parsed in full.
_LOGPROBS_KEY = b'"logprobs":['
_FINISH_KEY = b'"finish_reason":'


class DeferredLogprobs:
    """A completion's `logprobs` array as its bytes, left unparsed by a read with ``logprobs="deferred"``
    (parsing it is most of a record's read time, and analysis needs only some records' arrays): `load()`
    parses it on first use, as the full read would have; a damaged array is refused then, naming its line."""

    __slots__ = ("_raw", "_value", "_where", "_positions")

    def __init__(self, raw: bytes, where: str):
        self._raw = raw
        self._value: list[Any] | None = None
        self._where = where
        self._positions: list[PositionView] | None | bool = False  # False: not decoded yet

    def positions(self) -> list[PositionView] | None:
        """The array decoded into only its tokens, ids and alternatives' log-probabilities
        (kit.record.view.positions, kept for the next caller), or None where that view does not fit it."""
        if self._positions is False:
            self._positions = view_positions(self._raw)
        return self._positions  # type: ignore[return-value]  # decoded just above

    def load(self) -> list[Any] | None:
        if self._value is None:
            try:
                self._value = _loads(self._raw)
            except ValueError as exc:
                raise DamagedRecords(f"{self._where}: completion.logprobs is not a valid JSON array "
                                     f"({getattr(exc, 'msg', exc)})", DAMAGED_FIX) from exc
        return self._value

    @property
    def raw(self) -> bytes:
        """The array's bytes, as the record holds them."""
        return self._raw

    @property
    def parsed(self) -> bool:
        """Whether `load()` has parsed it already (a reader that needs less of it then takes that parse)."""
        return self._value is not None

    @staticmethod
    def same_bytes(a: Any, b: Any) -> bool:
        """Whether two `logprobs` values as read are deferred arrays of the same bytes (which parse to equal
        values: `load_like`)."""
        return isinstance(a, DeferredLogprobs) and isinstance(b, DeferredLogprobs) and a.raw == b.raw

    def load_like(self, other: DeferredLogprobs) -> list[Any] | None:
        """`load()`, taking `other`'s parse when both arrays have the same bytes: they parse to equal values (a
        NaN too: json parses every NaN to one float object, which list and dict comparisons take as equal to
        itself), so the one value compares as the two parses would."""
        if self._value is None and self._raw == other._raw:
            self._value = other.load()
        return self.load()


def logprobs_of(completion: dict[str, Any]) -> list[Any] | None:
    """A completion's `logprobs` as read: the array, parsed now if its read deferred it, or None."""
    value = completion.get("logprobs")
    return value.load() if isinstance(value, DeferredLogprobs) else value


def logprobs_pair(a: Any, b: Any) -> tuple[Any, Any]:
    """Two completions' `logprobs` values as read (arrays, DeferredLogprobs or None), parsed. Two deferred
    arrays with the same bytes (`DeferredLogprobs.load_like`) are parsed once: both sides get that one value, which
    compares equal to itself as the two parses would have (comparing identical passes parses half)."""
    if isinstance(a, DeferredLogprobs) and isinstance(b, DeferredLogprobs):
        return a.load_like(b), b.load()
    return (a.load() if isinstance(a, DeferredLogprobs) else a, b.load() if isinstance(b, DeferredLogprobs) else b)


def _loads_skimmed(data: bytes, start: int, stop: int, where: str | None = None) -> Any:
    """Parse the record in data[start:stop] with completion.logprobs left out (None), cutting the array out when
    it is safe; with `where` (file:line), the array is kept as DeferredLogprobs instead of None. The searches
    take the line's bounds, so the line itself is never copied whole."""
    begin = data.find(_LOGPROBS_KEY, start, stop)
    # `logprobs` occurs once, and `finish_reason` once from there on, right after the array's `],` (a key before
    # the completion's array cannot move the cut): searches that stop at the occurrence, not counts over the line
    if begin >= 0 and data.rfind(_LOGPROBS_KEY, start, stop) == begin:
        end = data.find(_FINISH_KEY, begin, stop) - 2  # where the array's closing `]` must be
        if end > begin and data[end:end + 2] == b"]," and data.rfind(_FINISH_KEY, start, stop) == end + 2:
            view = memoryview(data)
            try:
                record = orjson.loads(b"".join((view[start:begin], b'"logprobs":null', view[end + 1:stop])))
            except ValueError:
                record = None
            completion = record.get("completion") if isinstance(record, dict) else None
            if isinstance(completion, dict) and "finish_reason" in completion and completion.get("logprobs", 0) is None:
                if where is not None:
                    completion["logprobs"] = DeferredLogprobs(data[begin + len(_LOGPROBS_KEY) - 1:end + 1], where)
                return record
    record = _loads(data[start:stop])
    if where is None and isinstance(record, dict) and isinstance(record.get("completion"), dict):
        record["completion"]["logprobs"] = None
    return record


SUPPORTED = {SCHEMA, EPISODE_SCHEMA, V1}
# fdatasync makes appended data and the new file size durable, as fsync does, without the timestamps
_sync = getattr(os, "fdatasync", os.fsync)

R = TypeVar("R", bound=RequestRecord)


class DamagedRecords(ConfigError):
    """A records file a reader refuses: a record would be lost, counted twice or misread."""


class CutShort(DamagedRecords):
    """A pass is cut short: its records file ends inside a record, or holds fewer than its pass counted."""


DAMAGED_FIX = "the file was edited or damaged; restore it from the run's bundle, or redo the run"


@dataclass(frozen=True)
class RecordFile:
    """The complete records of one file, and whether its last line was torn (only with torn="report")."""

    path: Path
    records: list[dict[str, Any]]
    torn_tail: bool
    logprobs: bool | Literal["deferred"] = True  # False: each completion's `logprobs` was left out (None);
    # "deferred": kept unparsed where the read could cut it out (DeferredLogprobs; read it with `logprobs_of`)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records)


def _spans(data: bytes) -> tuple[list[tuple[int, int]], bool]:
    """(start, stop) of each complete line of the file's bytes, and whether a torn last line (no newline, does not
    parse) was left out. Spans, not split lines: a paper-scale file is gigabytes, and each line is parsed from
    the file's bytes where it lies instead of from a copy."""
    spans, start = [], 0
    while (stop := data.find(b"\n", start)) >= 0:
        spans.append((start, stop))
        start = stop + 1
    if start == len(data):
        return spans, False
    try:
        _loads(data[start:])
    except ValueError:
        return spans, True
    spans.append((start, len(data)))
    return spans, False


def _count(path: Path, chunk: int = 1 << 20) -> tuple[int, bool]:
    """(complete lines, torn last line?) by the rule of `_lines`, read in chunks: a records file of a
    paper-scale pass is gigabytes, and counting it must not hold it in memory."""
    lines, tail = 0, b""
    with path.open("rb") as fh:
        while block := fh.read(chunk):
            newlines = block.count(b"\n")
            if newlines:
                lines += newlines
                tail = block[block.rfind(b"\n") + 1:]
            else:
                tail += block
    if not tail:
        return lines, False
    try:
        _loads(tail)
    except ValueError:
        return lines, True
    return lines + 1, False


def _resume_fix(path: Path) -> str:
    run_dir = path.parent.parent if path.parent.name == RunPaths.RECORDS else path.parent
    return f"run `kit resume {run_dir}` to run that pass again (the records before it are kept)"


class RecordWriter:
    """Appends records (kit.record.model dataclasses) to a JSON-lines file; each is flushed and fsynced before
    `write` returns (with sync_each=False, once at `close`); `count` is the records the file holds
    (`answered()` gives the next one that seq). `context` (run_id, pass_id, protocol) is stamped on every
    record `answered()` makes."""

    def __init__(self, path: Path, *, sync_each: bool = True, **context: Any):
        self.path = path
        self.context = context
        self.sync_each = sync_each  # False: one sync at close (an importer writing a whole file it can redo)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.count = 0  # records in the file: one opened again goes on counting (seq) from its last record
        self._fh = open_append(path)  # a file the kit made (no link, one name, ours), checked before it is read
        try:
            count, torn_tail = _count(path)
            if torn_tail:
                raise CutShort(f"{path}:{count + 1} is a torn record; records are never appended after one",
                               _resume_fix(path))
        except BaseException:
            self._fh.close()
            raise
        self.count = count

    def write(self, record: RequestRecord | EpisodeSummary) -> None:
        """Append one record and make it durable (written, flushed, its data and the file's size synced)."""
        self.write_line(orjson.dumps(record, option=orjson.OPT_APPEND_NEWLINE))

    def write_line(self, line: bytes) -> None:
        """Append one record already serialized as `write` does (a line made elsewhere: kit.run.ray_executor)."""
        self._fh.write(line)
        if self.sync_each:
            self._fh.flush()
            _sync(self._fh.fileno())
        self.count += 1

    def flush(self) -> None:
        """Hand what is written to the OS (not yet durable: a crash of the process loses nothing, one of the
        machine may; `sync_later` makes it durable)."""
        self._fh.flush()

    def sync_later(self) -> int:
        """A duplicate of the file's descriptor, for `sync_fd` on another thread (the file may close meanwhile)."""
        return os.dup(self._fh.fileno())

    def answered(self, kind: type[R], completion: Completion, **fields: Any) -> R:
        """Make the record of one answer (`seq` = the records written so far), write it durably, return it."""
        record = answered(kind, completion, **self.context, seq=self.count, **fields)
        self.write(record)
        return record

    def close(self) -> None:
        if not self.sync_each and not self._fh.closed:
            self._fh.flush()
            _sync(self._fh.fileno())
        self._fh.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Counter:
    """Each record once: request records by (pass_id, seq) in order from 0, episode lines by unit."""

    def __init__(self, path: Path):
        self.path = path
        self.pass_id: Any = None
        self.units: dict[Any, int] = {}

    def check(self, record: dict[str, Any], number: int, index: int) -> None:
        where = f"{self.path}:{number}"
        if record["schema"] == EPISODE_SCHEMA:
            unit = record.get("unit")
            if unit in self.units:
                raise DamagedRecords(f"{where} lists episode {unit!r} again (first at line {self.units[unit]}); "
                                  "an episode is counted once", DAMAGED_FIX)
            self.units[unit] = number
            return
        if index == 0:
            self.pass_id = record.get("pass_id")
        elif record.get("pass_id") != self.pass_id:
            raise DamagedRecords(f"{where} is a record of pass {record.get('pass_id')!r} in the file of pass "
                              f"{self.pass_id!r}", DAMAGED_FIX)
        seq = record.get("seq")
        if seq == index and type(seq) is int:
            return
        if type(seq) is int and 0 <= seq < index:
            raise DamagedRecords(f"{where} repeats seq {seq} of pass {self.pass_id!r} (first at line {seq + 1}); "
                              "a record is counted once", DAMAGED_FIX)
        if type(seq) is int and seq > index:
            raise DamagedRecords(f"{where} has seq {seq} where {index} was due: {seq - index} record(s) of pass "
                              f"{self.pass_id!r} are missing", DAMAGED_FIX)
        raise DamagedRecords(f"{where} has seq {seq!r}; seq is the record's index in its pass, from 0", DAMAGED_FIX)


def sync_fd(fd: int) -> None:
    """Make a file durable through a descriptor `RecordWriter.sync_later` gave, and close it."""
    try:
        _sync(fd)
    finally:
        os.close(fd)


def partial_logprobs(where: str) -> Callable[[bytes], DeferredLogprobs]:
    """What a deferred read keeps of a completion's `logprobs` bytes, at `where` (file:line)."""
    return lambda raw: DeferredLogprobs(raw, where)


def _whole(data: bytes, start: int, stop: int, logprobs: bool | Literal["deferred"],
           where: str) -> tuple[dict[str, Any], str | None]:
    """The record in data[start:stop] read in full (its logprobs as `read_records` keeps them), upgraded to schema 2,
    and what is wrong with its digests (None if nothing)."""
    try:
        record = (_loads(memoryview(data)[start:stop]) if logprobs is True
                  else _loads_skimmed(data, start, stop, where if logprobs == "deferred" else None))
    except ValueError as exc:
        raise DamagedRecords(f"{where} is not a valid record ({getattr(exc, 'msg', exc)})", DAMAGED_FIX) from exc
    schema = record.get("schema") if isinstance(record, dict) else None
    if schema not in SUPPORTED:
        raise DamagedRecords(f"{where} has record schema {schema!r}", f"this kit reads {sorted(SUPPORTED)}; upgrade the kit")
    record = upgrade(record) if schema == V1 else record
    return record, digest_problem(record) if schema != EPISODE_SCHEMA else None


def read_records(path: Path, logprobs: bool | Literal["deferred"] = True, *,
                 torn: Literal["refuse", "report"] = "refuse", view: CheckedPrompts | None = None) -> RecordFile:
    """Read a records file, each record counted once (see the module docstring): a damaged line, a
    repeated or missing seq, an episode listed twice raise DamagedRecords naming file and line; a torn last
    line raises CutShort, or with ``torn="report"`` is left out and reported in ``torn_tail``.
    With ``logprobs=False`` every record's ``completion.logprobs`` is None (much faster to read); with
    ``logprobs="deferred"`` it is read as fast and parsed when `logprobs_of` asks for it. With `view` (and logprobs
    False or "deferred"), request records are read as kit.record.view.AnalysisRecord: only the fields analysis
    reads, checked as the full read checks them (their prompts' digests through `view`), in half the time."""
    data = path.read_bytes()
    spans, torn_tail = _spans(data)
    if torn_tail and torn == "refuse":
        raise CutShort(f"{path}:{len(spans) + 1} is a torn record (the file ends inside it: the run was killed "
                       "mid-write or the file was cut), so its pass is cut short", _resume_fix(path))
    records: list[dict[str, Any]] = []
    counter = _Counter(path)
    lines = memoryview(data)
    partial = view is not None and logprobs is not True and utf8(data)
    for number, (start, stop) in enumerate(spans, start=1):
        where = f"{path}:{number}"
        seen = parse_view(lines[start:stop], partial_logprobs(where) if logprobs == "deferred" else None,
                          view) if partial and view is not None else None
        record, forged = seen if seen is not None else _whole(data, start, stop, logprobs, where)
        if forged:
            raise DamagedRecords(f"{where}: {forged} (the record was changed after it was written)", DAMAGED_FIX)
        counter.check(record, number, len(records))
        records.append(record)
    return RecordFile(path=path, records=records, torn_tail=torn_tail, logprobs=logprobs)


@dataclass(frozen=True, slots=True)
class RecordView:
    """A request record as analysis reads it: typed, and only what analysis uses (`view`). The record's
    fields are kit.record.model's; a field a record does not have (another procedure's) is None."""

    pass_id: str
    seq: int
    unit: str | None
    step: int | None
    phase: str | None  # the reset phase (`cold`, `warm2`) or pinning phase (`calibration`, `cycle`, ...)
    role: str | None  # pinning: the call's role in its pass
    arm_index: int | None  # pinning: the call's index within its arm
    measured: bool | None  # pinning: whether it sent the measured prompt
    prompt_sha256: str
    output_sha256: str | None
    text: str  # completion.text ("" in a hash-only record)
    emitted: tuple  # the emitted token ids where the engine gave them, else the token strings
    cached_tokens: int | None
    prompt_tokens: int | None
    prefill_ms: float | None

    @classmethod
    def of(cls, record: dict[str, Any]) -> RecordView:
        completion = record.get("completion") or {}
        ids = completion.get("token_ids")
        return cls(pass_id=record["pass_id"], seq=record["seq"], unit=record.get("unit"), step=record.get("step"),
                   phase=record.get("phase"), role=record.get("role"), arm_index=record.get("arm_index"),
                   measured=record.get("measured"), prompt_sha256=record["prompt_sha256"],
                   output_sha256=record.get("output_sha256"), text=completion.get("text") or "",
                   emitted=tuple(ids) if ids is not None else tuple(completion.get("tokens") or ()),
                   cached_tokens=completion.get("cached_tokens"), prompt_tokens=completion.get("prompt_tokens"),
                   prefill_ms=completion.get("prefill_ms"))


def read_views(path: Path) -> list[RecordView]:
    """The request records of a file as `RecordView`s, read and checked as `read_records` reads them (without
    their log-probabilities, which no view holds)."""
    return [RecordView.of(record) for record in read_records(path, logprobs=False).records]


def cut_short(run_dir: Path, passes: Mapping[str, PassInfo],
              read: Mapping[Path, RecordFile] | None = None) -> dict[str, str]:
    """pass id -> why, for each pass the manifest says ended (OK or VOID) whose records file is torn,
    missing, or ends before the records the manifest counts. A file that holds a count other than the
    manifest's is read in full: a repeated or missing seq, or records beyond the count, raise
    DamagedRecords naming the file (and line). `read`: files (by path) the caller has already read with
    ``torn="report"``; their counts are taken from that read instead of reading them again."""
    read = read or {}

    def lines_of(path: Path) -> tuple[int, bool]:
        got = read.get(path)
        return (len(got.records), got.torn_tail) if got is not None else _count(path)

    found = {}
    for pass_id, info in passes.items():
        if info.status not in ("OK", "VOID") or not info.file:
            continue
        path = run_dir / info.file
        if not path.is_file():
            found[pass_id] = f"its records file {info.file} is missing"
            continue
        lines, torn_tail = lines_of(path)
        counted = info.records
        if torn_tail:
            found[pass_id] = f"{info.file} ends inside a record (line {lines + 1} is torn)"
        elif isinstance(counted, int) and lines != counted:
            if path not in read:
                read_records(path, logprobs=False)  # a repeated or missing seq: refused naming its line
            if lines > counted:
                raise DamagedRecords(f"{path} holds {lines} records but its pass {pass_id} ended with "
                                     f"{counted}", DAMAGED_FIX)
            found[pass_id] = f"{info.file} holds {lines} of the {counted} records the manifest counts"
        episodes = info.episodes_file
        if pass_id not in found and episodes and (run_dir / episodes).is_file():
            lines, torn_tail = lines_of(run_dir / episodes)
            if torn_tail:
                found[pass_id] = f"{episodes} ends inside an episode line (line {lines + 1} is torn)"
    return found


def require_whole(run_dir: Path, passes: Mapping[str, PassInfo],
                  read: Mapping[Path, RecordFile] | None = None) -> None:
    """Refuse a run with a pass cut short (see `cut_short`), naming the pass and why."""
    found = cut_short(run_dir, passes, read)
    if found:
        listed = "; ".join(f"pass {pass_id}: {why}" for pass_id, why in found.items())
        raise CutShort(f"{run_dir} has {len(found)} pass(es) cut short ({listed})",
                       f"run `kit resume {run_dir}` to run them again (the records before them are kept)")
