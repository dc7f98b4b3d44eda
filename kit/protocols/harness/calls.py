"""Seed 002's determinism-harness calls (schema 3) and the kit's records made from them: one rule, used by
`kit import determinism-harness` (kit.importers.determinism_harness) to write a run folder's
records/calls.jsonl, and by `kit verify` (kit.bundle.imported) to make them again from the harness's own
files the run folder keeps in records/imported/, so that a bundle's records are held against the calls
they came from.

`check_call` reads one line of a calls file (a schema-3 object with its required fields, `text_sha256` the
sha256 of its `text`, the run's own call), `record_of` makes one call's `HarnessRecord`; the records of a
calls file are its calls in execution order (by `schedule_index`), numbered across the study's files in
the order the manifest lists them. `DERIVATION` is the version of this rule, kept in the manifest of every
import (`imported.derivation`): runs imported by a kit that kept none were made by an earlier rule, which
this kit does not hold.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, BinaryIO, Iterable, Iterator, get_args

import orjson
from pydantic import BaseModel, Field, JsonValue, ValidationError
from pydantic_core import ErrorDetails

from kit.core.digests import sha256_text
from kit.core.errors import ConfigError
from kit.protocols.harness.record import Margins, Read
from kit.protocols.harness.table import Kept
from kit.protocols.results_model import JsonObject
from kit.record.model import HarnessRecord

SCHEMA = 3
PASS = "calls"
NAME = "determinism-harness"  # the imported protocol's own name (its kind: `harness`)
DERIVATION = 1  # the version of the calls -> records rule (`imported.derivation` of every import)
FIX = "import the harness's files as it wrote them (see docs/import.md)"
LINE_BYTES = 16 << 20  # one call
INDEX_MAX = 2**62  # a schedule_index
Index = Annotated[int, Field(ge=0, lt=INDEX_MAX)]
Amount = Annotated[int, Field(ge=0, lt=INDEX_MAX)] | Annotated[float, Field(ge=0, lt=INDEX_MAX)]  # a number >= 0


class Usage(Kept):
    """A call's `usage`: the numbers the analysis reads, each null or a number >= 0; kept as the harness wrote it
    (every key, in its order: the record keeps it so)."""

    prompt_eval_duration_ns: Amount | None = None
    load_duration_ns: Amount | None = None
    eval_duration_ns: Amount | None = None
    total_duration_ns: Amount | None = None
    input_tokens: Amount | None = None
    output_tokens: Amount | None = None


class HarnessCall(Read):
    """One line of a calls file, as the kit reads it: the fields it requires, then those it reads where present
    (null or of their type). `logprob_margins` is kept as the harness wrote it (the record keeps it so), its shape
    checked by kit.protocols.harness.record.Margins."""

    cell: str
    schedule_index: Index
    text: str
    text_sha256: str
    ok: bool
    request_sha256: str
    run_name: str
    box: str | None = None
    meta_hardware: str | None = None
    meta_arm: str | None = None
    meta_control: str | None = None
    meta_cycle: int | None = None
    repeat: int | None = None
    pre_unload_confirmed: bool | None = None
    stop_reason: str | None = None
    mode: str | None = None
    sent_at_utc: str | None = None
    wire_sha256: str | None = None
    response_model: str | None = None
    model_id_sent: str | None = None
    usage: Usage | None = None
    logprob_margins: JsonObject | None = None
    unload_wait_ms: Amount | None = None
    latency_ms: Amount | None = None


def arm_of(cell: str) -> tuple[str | None, str | None]:
    """(key, value) of the cell's last part when it is `key=value` (`prefill=cold`), else (None, None)."""
    last = cell.rsplit("|", 1)[-1]
    key, sep, value = last.partition("=")
    return (key, value) if sep and key and value else (None, None)


def _parse(line: bytes) -> JsonValue:
    """One line's JSON: orjson (fast), or json for what orjson refuses (NaN, nesting past 1024 levels)."""
    try:
        parsed: JsonValue = orjson.loads(line)
    except ValueError:
        parsed = json.loads(line.decode("utf-8"))
    return parsed


def _type_of(key: str) -> str:
    """The name of the JSON type field `key` of a call holds (`str`, `int`, `dict`, ...)."""
    annotation = HarnessCall.model_fields[key].annotation
    kind = next(t for t in get_args(annotation) or (annotation,) if t is not type(None))
    return "dict" if isinstance(kind, type) and issubclass(kind, BaseModel) else kind.__name__


def _said(where: str, call: dict[str, JsonValue], model: str, first: ErrorDetails) -> str:
    """What is wrong with a call, as one line naming `where` and the field."""
    key, inner = str(first["loc"][0]), first["loc"][1:]
    if model == Margins.__name__:
        return (f"{where} has a logprob_margins that is not the harness's (tokens: rows of [token, chosen, top1, "
                "top2 logprob], min_top2_margin, chosen_not_top1)")
    if (key == "usage" and inner) or key in ("unload_wait_ms", "latency_ms"):
        name = f"usage.{inner[0]}" if key == "usage" else key
        return f"{where} has {name} {str(first['input'])[:40]!r}; the harness writes a number >= 0"
    if key == "schedule_index" and first["type"] in ("greater_than_equal", "less_than"):
        return f"{where} has schedule_index {call[key]}; the harness counts from 0"
    if HarnessCall.model_fields[key].is_required():
        return f"{where} has {key} {call.get(key)!r}; a harness record's {key} is a {_type_of(key)}"
    return f"{where} has {key} {str(call[key])[:40]!r}; the harness writes a {_type_of(key)} or null"


def check_call(line: bytes, where: str, run_name: str) -> HarnessCall:
    """One line of a calls file as a checked call of run `run_name`; ConfigError naming `where` otherwise."""
    try:
        call = _parse(line)
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ConfigError(f"{where} is not a JSON object ({reason})", FIX) from exc
    if not isinstance(call, dict) or call.get("schema") != SCHEMA:
        schema = call.get("schema") if isinstance(call, dict) else None
        raise ConfigError(f"{where} is not a harness record of schema {SCHEMA} (schema {schema!r})", FIX)
    try:
        checked = HarnessCall.model_validate(call)
        if checked.logprob_margins is not None:
            Margins.model_validate(checked.logprob_margins)
    except ValidationError as err:
        raise ConfigError(_said(where, call, err.title, err.errors()[0]), FIX) from None
    if sha256_text(checked.text) != checked.text_sha256:
        raise ConfigError(f"{where}: text_sha256 {checked.text_sha256[:12]}… is not the sha256 of its text",
                          "the file was changed after the harness wrote it; import an intact copy")
    if checked.run_name != run_name:
        raise ConfigError(f"{where} is a call of run {checked.run_name!r}, not of {run_name!r} (its manifest)", FIX)
    return checked


def lines(fh: BinaryIO, path: Path | str) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, bytes) of each line, at most LINE_BYTES each, never a longer one whole."""
    number = offset = 0
    while raw := fh.readline(LINE_BYTES + 1):
        number += 1
        if len(raw) > LINE_BYTES:
            raise ConfigError(f"{path}:{number} is longer than {LINE_BYTES} bytes; no harness call is", FIX)
        yield number, offset, raw
        offset += len(raw)


def box_of_call(call: HarnessCall, manifest: JsonObject) -> str | None:
    """The call's box: its `box`, else `meta_hardware`, else its run's manifest's `box` (the harness's manifest,
    as it wrote it)."""
    box = call.box or call.meta_hardware or manifest.get("box")
    return box if isinstance(box, str) and box else None


def record_of(run_id: str, seq: int, number: int, call: HarnessCall, calls_name: str,
              manifest: JsonObject) -> HarnessRecord:
    """The record of one checked call (line `number` of the calls file `calls_name`, whose run's manifest is
    `manifest`), the `seq`-th of the study."""
    prefill = call.usage.prompt_eval_duration_ns if call.usage else None
    key, arm = arm_of(call.cell)
    control = call.meta_control
    latency = call.latency_ms
    return HarnessRecord(
        run_id=run_id, pass_id=PASS, protocol="harness", protocol_name=NAME, protocol_kind="harness", seq=seq,
        unit=call.cell, prompt_sha256=call.request_sha256,
        output_sha256=call.text_sha256, started=call.sent_at_utc,
        wall_seconds=latency / 1000 if latency is not None else None,
        error=None if call.ok else "the harness recorded this call as failed (ok: false)",
        source_line=number, source_file=calls_name, schedule_index=call.schedule_index,
        box=box_of_call(call, manifest), repeat=call.repeat,
        arm=None if control else call.meta_arm or arm,
        arm_key=None if control else key, control=control, cycle=call.meta_cycle,
        pre_unload_confirmed=call.pre_unload_confirmed, unload_wait_ms=call.unload_wait_ms,
        prefill_ms=prefill / 1e6 if prefill is not None else None, text=call.text,
        stop_reason=call.stop_reason, ok=call.ok, wire_sha256=call.wire_sha256,
        response_model=call.response_model, model_sent=call.model_id_sent,
        usage=call.usage.to_json() if call.usage is not None else None, logprob_margins=call.logprob_margins)


def in_order(fh: BinaryIO, path: Path | str, run_name: str) -> list[tuple[int, int]]:
    """(byte offset, line number) of each call of an open calls file, in execution order (by schedule_index;
    a repeated index is refused, naming both lines)."""
    found: list[tuple[int, int, int]] = []
    for number, offset, raw in lines(fh, path):
        if raw.strip():
            found.append((check_call(raw, f"{path}:{number}", run_name).schedule_index, offset, number))
    found.sort(key=lambda f: f[0])
    for (index, _, first), (then, _, number) in zip(found, found[1:]):
        if index == then:
            raise ConfigError(f"{path}:{number} repeats schedule_index {index} (first at line {first}); a call is "
                              "counted once", FIX)
    return [(offset, number) for _, offset, number in found]


def derive(folder: Path, study: list[tuple[str, str, JsonObject]], run_id: str,
           orders: list[Iterable[tuple[int, int]]] | None = None) -> Iterator[HarnessRecord]:
    """The records of a study's calls files held in `folder` (each given as (file name, run name, its run's
    manifest), in the study's order), as the import writes them. `orders`: each file's calls in execution order
    as (byte offset, line number), where the caller has checked and sorted them already (the import's scan);
    else `in_order` finds them (kit verify)."""
    seq = 0
    for index, (name, run_name, manifest) in enumerate(study):
        path = folder / name
        with path.open("rb") as fh:
            for offset, number in (orders[index] if orders is not None else in_order(fh, path.name, run_name)):
                fh.seek(offset)
                call = check_call(fh.readline(LINE_BYTES + 1), f"{name}:{number}", run_name)
                yield record_of(run_id, seq, number, call, name, manifest)
                seq += 1
