"""`kit import determinism-harness`: seed 002's harness records (schema 3) as a kit run folder.

Input: the harness's `<run>.jsonl` with its `<run>.manifest.json` and `<run>.done.json` beside it (the
format: ../shared/data/determinism-harness/SOURCE.md), and optionally its own analyzer report. Every
call is kept, in execution order (`schedule_index`), as one `HarnessRecord` (kit.record) of the pass
`calls`; the harness's files are copied unchanged into `records/imported/`, so the run folder holds
what it came from. Everything is checked before the run folder exists, and a file that would lose or
double a call is refused naming file and line: a line that is not a schema-3 object, a missing field,
a `text_sha256` that is not the sha256 of its `text`, a repeated `schedule_index`, another run's call,
or fewer calls than the harness's `done.json` says it finished.

Every file is opened as a regular file, never through a symbolic link, a device or a FIFO
(kit.regular_file), within a size limit. The calls file is streamed twice, never held whole: once to
check every line and note where each call is (by `schedule_index`), then, copied into the run folder
and found unchanged, to write the records in execution order from that copy. If writing fails, the
half-written run folder is removed; the harness's files are never touched.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from kit.digests import sha256_text
from kit.errors import ConfigError, KitError
from kit.limits import IMPORT_CALLS_MAX
from kit.manifest import Manifest, new_run_dir
from kit.paths import RunPaths
from kit.provenance import collect
from kit.record import HarnessRecord
from kit.records import RecordWriter
from kit.regular_file import open_regular, read_regular

SCHEMA = 3
PASS = "calls"
REQUIRED = {"cell": str, "schedule_index": int, "text": str, "text_sha256": str, "ok": bool,
            "request_sha256": str, "run_name": str}
FIX = "import the harness's files as it wrote them (see docs/import.md)"
MIB, GIB = 1 << 20, 1 << 30
SIDE_FILE_BYTES = 16 * MIB  # the manifest, done marker and report: small JSON objects
LINE_BYTES = 16 * MIB  # one call
CALLS_BYTES = 4 * GIB  # the calls file: what a bundle holds in one file (kit.bundle.limits)
INDEX_MAX = 2**62  # a schedule_index
CHUNK = MIB
Progress = Callable[[str, int, int], None]  # (what, bytes done, bytes in all)


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


def _json_file(path: Path, what: str) -> tuple[dict[str, Any], bytes]:
    """The JSON object in a side file (a regular file within SIDE_FILE_BYTES) and its bytes."""
    data = read_regular(path, f"the harness's {what}", SIDE_FILE_BYTES, FIX)
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise ConfigError(f"{path} is not a JSON file ({reason})", FIX) from exc
    if not isinstance(value, dict):
        raise ConfigError(f"{path} holds a {type(value).__name__}, not the harness's {what} object", FIX)
    return value, data


def _arm(cell: str) -> tuple[str | None, str | None]:
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


def _call(line: bytes, where: str, run_name: str) -> dict[str, Any]:
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
    usage = call.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise ConfigError(f"{where} has usage {usage!r}; the harness writes an object", FIX)
    return call


@dataclass
class Scanned:
    """The checked side files, and where each call of the calls file is, in execution order."""

    manifest: dict[str, Any]
    done: dict[str, Any]
    side: dict[Path, bytes]  # each side file's bytes, copied as read
    calls_sha256: str
    calls_bytes: int
    offsets: array  # the byte offset of each call's line, in execution order (by schedule_index)
    numbers: array  # the line number of each call, in the same order
    mode: str  # the manifest's, else the first call's
    box: str | None  # the box every call that names one names, else None


def _lines(fh: BinaryIO, path: Path) -> Any:
    """(line number, byte offset, bytes) of each line, at most LINE_BYTES each, never a longer one whole."""
    number = offset = 0
    while raw := fh.readline(LINE_BYTES + 1):
        number += 1
        if len(raw) > LINE_BYTES:
            raise ConfigError(f"{path}:{number} is longer than {LINE_BYTES} bytes; no harness call is", FIX)
        yield number, offset, raw
        offset += len(raw)


def scan(files: HarnessFiles, calls: BinaryIO, progress: Progress) -> Scanned:
    """Check the side files and every line of the open calls file (streamed, never held whole)."""
    manifest, manifest_bytes = _json_file(files.manifest, "manifest")
    done, done_bytes = _json_file(files.done, "done marker")
    side = {files.manifest: manifest_bytes, files.done: done_bytes}
    if files.report:
        side[files.report] = _json_file(files.report, "report")[1]
    run_name = manifest.get("run_name")
    if not isinstance(run_name, str) or done.get("run_name") != run_name:
        raise ConfigError(f"{files.manifest} and {files.done} name runs {run_name!r} and {done.get('run_name')!r}",
                          "give the manifest and done marker of the same run")
    total = calls.seek(0, 2)
    calls.seek(0)
    digest, indices, offsets, numbers = hashlib.sha256(), array("q"), array("Q"), array("Q")
    boxes: set[str] = set()  # at most two kept: only whether every call names the same one matters
    for number, offset, raw in _lines(calls, files.calls):
        digest.update(raw)
        if raw.strip():
            if len(indices) == IMPORT_CALLS_MAX:
                raise ConfigError(f"{files.calls}:{number} is call {IMPORT_CALLS_MAX + 1}: the kit imports at most "
                                  f"{IMPORT_CALLS_MAX} calls of one harness run", "import a run of that size or less")
            call = _call(raw, f"{files.calls}:{number}", run_name)
            if call.get("box") and len(boxes) < 2:
                boxes.add(str(call["box"]))
            indices.append(call["schedule_index"])
            offsets.append(offset)
            numbers.append(number)
        if number % 4096 == 0:
            progress("checking", offset + len(raw), total)
    progress("checking", total, total)
    if not indices:
        raise ConfigError(f"{files.calls} holds no calls", FIX)
    order = sorted(range(len(indices)), key=indices.__getitem__)  # stable: a repeat comes after its first
    for first, then in pairwise(order):
        if indices[first] == indices[then]:
            raise ConfigError(f"{files.calls}:{numbers[then]} repeats schedule_index {indices[then]} (first at line "
                              f"{numbers[first]}); a call is counted once", FIX)
    finished = done.get("done")
    if done.get("complete") is not True or finished != len(indices):
        raise ConfigError(f"{files.done} says {finished!r} calls finished (complete: {done.get('complete')!r}) "
                          f"but {files.calls} holds {len(indices)}", "import the run's complete files")
    calls.seek(offsets[order[0]])
    first = _call(calls.readline(LINE_BYTES + 1), f"{files.calls}:{numbers[order[0]]}", run_name)
    return Scanned(manifest, done, side, digest.hexdigest(), total, array("Q", (offsets[i] for i in order)),
                   array("Q", (numbers[i] for i in order)),
                   str(manifest.get("mode") or first.get("mode") or "unknown"), boxes.pop() if len(boxes) == 1 else None)


def _record(run_id: str, seq: int, number: int, call: dict[str, Any]) -> HarnessRecord:
    usage = call.get("usage") or {}
    key, arm = _arm(call["cell"])
    control = call.get("meta_control")
    prefill = usage.get("prompt_eval_duration_ns")
    latency = call.get("latency_ms")
    return HarnessRecord(
        run_id=run_id, pass_id=PASS, protocol="harness", seq=seq, unit=call["cell"],
        prompt_sha256=call["request_sha256"],
        output_sha256=call["text_sha256"], started=call.get("sent_at_utc"),
        wall_seconds=latency / 1000 if isinstance(latency, (int, float)) else None,
        error=None if call["ok"] else "the harness recorded this call as failed (ok: false)",
        source_line=number, schedule_index=call["schedule_index"], arm=None if control else arm,
        arm_key=None if control else key, control=control, cycle=call.get("meta_cycle"),
        pre_unload_confirmed=call.get("pre_unload_confirmed"), unload_wait_ms=call.get("unload_wait_ms"),
        prefill_ms=prefill / 1e6 if isinstance(prefill, (int, float)) else None, text=call["text"],
        stop_reason=call.get("stop_reason"), ok=call["ok"], wire_sha256=call.get("wire_sha256"),
        response_model=call.get("response_model"), model_sent=call.get("model_id_sent"), usage=call.get("usage"))


def _copy_calls(calls: BinaryIO, target: Path, scanned: Scanned, source: Path, progress: Progress) -> None:
    """Copy the open calls file into the run folder; refused if it is not what was checked."""
    calls.seek(0)
    digest, copied = hashlib.sha256(), 0
    with target.open("xb") as out:
        while chunk := calls.read(min(CHUNK, scanned.calls_bytes + 1 - copied)):
            digest.update(chunk)
            out.write(chunk)
            copied += len(chunk)
            progress("copying", copied, scanned.calls_bytes)
    if copied != scanned.calls_bytes or digest.hexdigest() != scanned.calls_sha256:
        raise ConfigError(f"{source} changed while it was imported", "import it again once nothing writes to it")


def _write(run_dir: Path, files: HarnessFiles, calls: BinaryIO, scanned: Scanned,
           thresholds: tuple[float, float] | None, progress: Progress) -> None:
    kept = RunPaths(run_dir).imported
    kept.mkdir(parents=True)
    for source, data in scanned.side.items():
        (kept / source.name).write_bytes(data)
    copy = kept / files.calls.name
    _copy_calls(calls, copy, scanned, files.calls, progress)
    manifest, done = scanned.manifest, scanned.done
    with copy.open("rb") as fh:  # the records come from the checked copy, not from a file that may change
        def call_at(offset: int, number: int) -> dict[str, Any]:
            fh.seek(offset)
            return _call(fh.readline(LINE_BYTES + 1), f"{files.calls}:{number}", manifest["run_name"])

        mode = scanned.mode
        resolved = {"protocol": "harness", "mode": mode, "box": scanned.box,
                    "thresholds": list(thresholds) if thresholds else None,
                    "report": f"{RunPaths.IMPORTED}/{files.report.name}" if files.report else None}
        engine = {"kind": "ollama (as the harness recorded it)", "version": manifest.get("engine_version"),
                  "models": manifest.get("model_digests"), "url": None}
        record = Manifest.create(
            run_dir, protocol={"name": "determinism-harness", "kind": "harness", "file": str(files.calls),
                               "sha256": scanned.calls_sha256, "content": None, "resolved": resolved,
                               "overrides": {}},
            imported={"from": "determinism-harness", "run_name": manifest["run_name"], "done": done,
                      "files": sorted(p.name for p in kept.iterdir()), "report": files.report is not None},
            engine=engine, plan={"calls": len(scanned.offsets), "mode": mode}, workload={"source": "determinism-harness"},
            seeds={}, provenance=collect())
        with RecordWriter(run_dir / RunPaths.records_name(PASS), sync_each=False) as writer:
            for seq, (offset, number) in enumerate(zip(scanned.offsets, scanned.numbers)):
                writer.write(_record(record.run_id, seq, number, call_at(offset, number)))
                if seq % 4096 == 0:
                    progress("writing records", seq, len(scanned.offsets))
        progress("writing records", len(scanned.offsets), len(scanned.offsets))
    record.set_pass(PASS, status="OK", reason=None, file=RunPaths.records_name(PASS), records=writer.count)
    from kit.analysis.harness import results  # noqa: PLC0415

    table = results(run_dir)
    record.update(results=table["files"])
    record.finish("finished")


def _quiet(what: str, done: int, total: int) -> None:
    """No progress shown."""


def import_run(files: HarnessFiles, out: Path, thresholds: tuple[float, float] | None = None,
               progress: Progress = _quiet) -> Path:
    """Check the harness's files, then write the run folder under `out` and its results; its path.
    `progress(what, done, total)` hears how far each pass over the calls file is. A run folder whose
    writing fails (a full disk, a signal) is removed, never left half-written."""
    with open_regular(files.calls, "the harness's calls file", CALLS_BYTES, FIX) as calls:
        scanned = scan(files, calls, progress)
        run_dir = new_run_dir(out, f"harness-{scanned.mode}")
        try:
            _write(run_dir, files, calls, scanned, thresholds, progress)
        except BaseException as exc:
            shutil.rmtree(run_dir, ignore_errors=True)
            if isinstance(exc, OSError):  # a full disk, a folder that went away: one line, never a traceback
                raise KitError(f"writing the run folder under {out} failed ({exc.strerror or exc}); nothing of it "
                               "was kept", "free some space or fix the folder, then import again") from exc
            raise
    return run_dir
