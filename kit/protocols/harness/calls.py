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
from typing import Any, BinaryIO, Iterable, Iterator

import orjson

from kit.core.digests import sha256_text
from kit.core.errors import ConfigError
from kit.record.model import HarnessRecord

SCHEMA = 3
PASS = "calls"
NAME = "determinism-harness"  # the imported protocol's own name (its kind: `harness`)
DERIVATION = 1  # the version of the calls -> records rule (`imported.derivation` of every import)
REQUIRED = {"cell": str, "schedule_index": int, "text": str, "text_sha256": str, "ok": bool,
            "request_sha256": str, "run_name": str}
# optional fields the analysis reads: null or of this type
OPTIONAL = {"box": str, "meta_hardware": str, "meta_arm": str, "meta_control": str, "meta_cycle": int, "repeat": int,
            "pre_unload_confirmed": bool, "stop_reason": str, "usage": dict, "logprob_margins": dict}
DURATIONS = {"prompt_eval_duration_ns", "load_duration_ns", "eval_duration_ns", "total_duration_ns", "input_tokens",
             "output_tokens"}  # in `usage`
NUMBERS = {"unload_wait_ms", "latency_ms"}
FIX = "import the harness's files as it wrote them (see docs/import.md)"
LINE_BYTES = 16 << 20  # one call
INDEX_MAX = 2**62  # a schedule_index


def arm_of(cell: str) -> tuple[str | None, str | None]:
    """(key, value) of the cell's last part when it is `key=value` (`prefill=cold`), else (None, None)."""
    last = cell.rsplit("|", 1)[-1]
    key, sep, value = last.partition("=")
    return (key, value) if sep and key and value else (None, None)


def _parse(line: bytes) -> Any:
    """One line's JSON: orjson (fast), or json for what orjson refuses (NaN, nesting past 1024 levels)."""
    try:
        return orjson.loads(line)
    except ValueError:
        return json.loads(line.decode("utf-8"))


def check_call(line: bytes, where: str, run_name: str) -> dict[str, Any]:
    """One line of a calls file as a checked call of run `run_name`; ConfigError naming `where` otherwise."""
    try:
        call = _parse(line)
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ConfigError(f"{where} is not a JSON object ({reason})", FIX) from exc
    if not isinstance(call, dict) or call.get("schema") != SCHEMA:
        schema = call.get("schema") if isinstance(call, dict) else None
        raise ConfigError(f"{where} is not a harness record of schema {SCHEMA} (schema {schema!r})", FIX)
    for key, kind in REQUIRED.items():
        if type(call.get(key)) is not kind:
            raise ConfigError(f"{where} has {key} {call.get(key)!r}; a harness record's {key} is a {kind.__name__}",
                              FIX)
    if not 0 <= call["schedule_index"] < INDEX_MAX:
        raise ConfigError(f"{where} has schedule_index {call['schedule_index']}; the harness counts from 0", FIX)
    if sha256_text(call["text"]) != call["text_sha256"]:
        raise ConfigError(f"{where}: text_sha256 {call['text_sha256'][:12]}… is not the sha256 of its text",
                          "the file was changed after the harness wrote it; import an intact copy")
    if call["run_name"] != run_name:
        raise ConfigError(f"{where} is a call of run {call['run_name']!r}, not of {run_name!r} (its manifest)", FIX)
    for key in OPTIONAL.keys() & call.keys():
        if call[key] is not None and type(call[key]) is not OPTIONAL[key]:
            raise ConfigError(f"{where} has {key} {str(call[key])[:40]!r}; the harness writes a "
                              f"{OPTIONAL[key].__name__} or null", FIX)
    usage = call.get("usage") or {}
    numbers = [(f"usage.{key}", usage[key]) for key in DURATIONS & usage.keys()]
    for key, value in numbers + [(key, call[key]) for key in NUMBERS & call.keys()]:
        if value is not None and (type(value) not in (int, float) or not 0 <= value < INDEX_MAX):
            raise ConfigError(f"{where} has {key} {str(value)[:40]!r}; the harness writes a number >= 0", FIX)
    _check_margins(call.get("logprob_margins"), where)
    return call


def _check_margins(margins: dict[str, Any] | None, where: str) -> None:
    """The margins mode's `logprob_margins`: rows [token, chosen, top1, top2], a minimum, a count."""
    if margins is None:
        return
    rows = margins.get("tokens")
    numbers = (int, float, type(None))
    fine = (isinstance(rows, list) and all(isinstance(r, list) and len(r) == 4 and isinstance(r[0], str)
                                            and all(type(v) in numbers for v in r[1:]) for r in rows)
            and type(margins.get("min_top2_margin")) in numbers and type(margins.get("chosen_not_top1")) is int)
    if not fine:
        raise ConfigError(f"{where} has a logprob_margins that is not the harness's (tokens: rows of [token, "
                          "chosen, top1, top2 logprob], min_top2_margin, chosen_not_top1)", FIX)


def lines(fh: BinaryIO, path: Path | str) -> Iterator[tuple[int, int, bytes]]:
    """(line number, byte offset, bytes) of each line, at most LINE_BYTES each, never a longer one whole."""
    number = offset = 0
    while raw := fh.readline(LINE_BYTES + 1):
        number += 1
        if len(raw) > LINE_BYTES:
            raise ConfigError(f"{path}:{number} is longer than {LINE_BYTES} bytes; no harness call is", FIX)
        yield number, offset, raw
        offset += len(raw)


def box_of_call(call: dict[str, Any], manifest: dict[str, Any]) -> str | None:
    """The call's box: its `box`, else `meta_hardware`, else its run's manifest's `box`."""
    box = call.get("box") or call.get("meta_hardware") or manifest.get("box")
    return box if isinstance(box, str) and box else None


def record_of(run_id: str, seq: int, number: int, call: dict[str, Any], calls_name: str,
              manifest: dict[str, Any]) -> HarnessRecord:
    """The record of one checked call (line `number` of the calls file `calls_name`, whose run's manifest is
    `manifest`), the `seq`-th of the study."""
    usage = call.get("usage") or {}
    key, arm = arm_of(call["cell"])
    control = call.get("meta_control")
    prefill = usage.get("prompt_eval_duration_ns")
    latency = call.get("latency_ms")
    return HarnessRecord(
        run_id=run_id, pass_id=PASS, protocol="harness", protocol_name=NAME, protocol_kind="harness", seq=seq,
        unit=call["cell"], prompt_sha256=call["request_sha256"],
        output_sha256=call["text_sha256"], started=call.get("sent_at_utc"),
        wall_seconds=latency / 1000 if isinstance(latency, (int, float)) else None,
        error=None if call["ok"] else "the harness recorded this call as failed (ok: false)",
        source_line=number, source_file=calls_name, schedule_index=call["schedule_index"],
        box=box_of_call(call, manifest), repeat=call.get("repeat"),
        arm=None if control else call.get("meta_arm") or arm,
        arm_key=None if control else key, control=control, cycle=call.get("meta_cycle"),
        pre_unload_confirmed=call.get("pre_unload_confirmed"), unload_wait_ms=call.get("unload_wait_ms"),
        prefill_ms=prefill / 1e6 if isinstance(prefill, (int, float)) else None, text=call["text"],
        stop_reason=call.get("stop_reason"), ok=call["ok"], wire_sha256=call.get("wire_sha256"),
        response_model=call.get("response_model"), model_sent=call.get("model_id_sent"), usage=call.get("usage"),
        logprob_margins=call.get("logprob_margins"))


def in_order(fh: BinaryIO, path: Path | str, run_name: str) -> list[tuple[int, int]]:
    """(byte offset, line number) of each call of an open calls file, in execution order (by schedule_index;
    a repeated index is refused, naming both lines)."""
    found: list[tuple[int, int, int]] = []
    for number, offset, raw in lines(fh, path):
        if raw.strip():
            found.append((check_call(raw, f"{path}:{number}", run_name)["schedule_index"], offset, number))
    found.sort(key=lambda f: f[0])
    for (index, _, first), (then, _, number) in zip(found, found[1:]):
        if index == then:
            raise ConfigError(f"{path}:{number} repeats schedule_index {index} (first at line {first}); a call is "
                              "counted once", FIX)
    return [(offset, number) for _, offset, number in found]


def derive(folder: Path, study: list[tuple[str, str, dict[str, Any]]], run_id: str,
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
