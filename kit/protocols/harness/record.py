"""An imported harness call as the harness table reads it from records/calls.jsonl: the fields of
kit.record.model.HarnessRecord its analyzers use, typed, read once at the border (`calls_of`) and passed
inward as `Call`s. A run folder is untrusted (a bundle's, a copy): a record of another shape is refused in
one line naming the file, the record and the field, never a traceback. A field the kit indexes is required;
one it reads where present (`box`, `cycle`, `usage`, ...) may be absent or null, as earlier releases wrote it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

from kit.core.packaged_yaml import validated
from kit.protocols.results_model import Number
from kit.record.files import DAMAGED_FIX, DamagedRecords, read_records


class Read(BaseModel):
    """Strict (a value of another JSON type is refused, never converted); keys not read are ignored."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class Usage(Read):
    """The harness's `usage`: Ollama's durations in ns and the token counts."""

    load_duration_ns: Number | None = None
    output_tokens: Number | None = None


class MarginRow(NamedTuple):
    """One token of the margins mode: the token and the chosen, top-1 and top-2 logprobs."""

    token: str
    chosen: Number | None
    top1: Number | None
    top2: Number | None

    def margin(self) -> Number | None:
        return None if self.top1 is None or self.top2 is None else self.top1 - self.top2


class Margins(Read):
    """The margins mode's `logprob_margins`."""

    tokens: list[MarginRow]
    min_top2_margin: Number | None = None
    chosen_not_top1: int


class Call(Read):
    """One record of records/calls.jsonl (kit.record.model.HarnessRecord), as the analyzers read it."""

    unit: str
    ok: bool
    prompt_sha256: str
    output_sha256: str
    text: str
    schedule_index: int
    arm: str | None = None
    control: str | None = None
    box: str | None = None
    cycle: int | None = None
    repeat: int | None = None
    stop_reason: str | None = None
    prefill_ms: Number | None = None
    pre_unload_confirmed: bool | None = None
    unload_wait_ms: Number | None = None
    wire_sha256: str | None = None
    response_model: str | None = None
    model_sent: str | None = None
    usage: Usage | None = None
    logprob_margins: Margins | None = None

    def kept(self) -> bool:
        """Ended normally: `ok` and stopped at `stop`."""
        return self.ok and self.stop_reason == "stop"


class Resolved(Read):
    """What the harness table reads of a run's `protocol.resolved` (kit.protocols.harness.protocol.HarnessProtocol,
    as the import wrote it): its mode, the box of a first-layout run, the thresholds, the report and the version
    of the definitions (absent: a run imported before several boxes)."""

    mode: str | None = None
    box: str | None = None
    thresholds: list[Number] | None = None
    report: str | None = None
    definitions: int | None = None

    @classmethod
    def of(cls, data: object, source: str) -> Resolved:
        """`data` (a run's `protocol.resolved`) as read; ConfigError naming `source` (the run) and the field."""
        return validated(cls, data, f"{source}: manifest's protocol.resolved", _place,
                         "the manifest was edited; restore it from the run's bundle")


def _place(loc: tuple[object, ...], _data: object) -> str:
    return ".".join(str(part) for part in loc)


def calls_of(records: Iterable[object], path: Path | str) -> list[Call]:
    """Records read from `path` as `Call`s; DamagedRecords naming the record (its line) and the field otherwise."""
    return [validated(Call, record, f"{path}:{number}", _place, DAMAGED_FIX, error=DamagedRecords)
            for number, record in enumerate(records, start=1)]


def read_calls(path: Path) -> list[Call]:
    """The calls of a run folder's records/calls.jsonl (kit.record.files.read_records), in execution order."""
    return calls_of(read_records(path).records, path)
