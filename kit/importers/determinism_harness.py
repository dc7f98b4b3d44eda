"""`kit import determinism-harness`: seed 002's harness records (schema 3) as a kit run folder.

Input: one or more of the harness's `<run>.jsonl`, each with its `<run>.manifest.json` and
`<run>.done.json` beside it (the format: ../shared/data/determinism-harness/SOURCE.md), and optionally
its own analyzer report. The harness writes one calls file per box (machine); the files of one study
(one mode, distinct runs) import as one run folder, file after file in the order given. Every call is
kept, in its file's execution order (`schedule_index`), as one `HarnessRecord` (kit.record.model) of the pass
`calls`, with its box (the call's `box`, else `meta_hardware`, else its manifest's `box`) and its file;
the harness's files are copied unchanged into `records/imported/`, so the run folder holds what it
came from. Everything is checked before the run folder exists, and a file that would lose or
double a call is refused naming file and line: a line that is not a schema-3 object, a missing field or
one of the wrong type, a `text_sha256` that is not the sha256 of its `text`, a repeated `schedule_index`,
another run's call, fewer calls than the harness's `done.json` says it finished; and a study whose files
are the same run twice, of different modes, or share a file name.

Every file is opened as a regular file, never through a symbolic link, a device or a FIFO
(kit.core.regular_file), within a size limit. The calls file is streamed twice, never held whole: once to
check every line and note where each call is (by `schedule_index`), then, copied into the run folder
and found unchanged, to write the records in execution order from that copy. If writing fails, the
half-written run folder is removed; the harness's files are never touched.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from array import array
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, BinaryIO

from kit.protocols.harness.calls import DERIVATION, FIX, LINE_BYTES, NAME, PASS, box_of_call, check_call, derive, lines
from kit.protocols.harness.files import HarnessFiles, json_file
from kit.protocols.harness.report import COMPARED
from kit.protocols.harness.results import DEFINITIONS
from kit.core.errors import ConfigError, KitError
from kit.core.limits import IMPORT_BOXES_MAX as BOXES_MAX
from kit.core.limits import IMPORT_CALLS_MAX
from kit.core.limits import IMPORT_FILES_MAX as FILES_MAX
from kit.record.manifest import Manifest, new_run_dir
from kit.core.paths import RunPaths
from kit.record.provenance import collect
from kit.record.files import RecordWriter
from kit.core.regular_file import open_regular

MIB, GIB = 1 << 20, 1 << 30
CALLS_BYTES = 4 * GIB  # the calls file: what a bundle holds in one file (kit.bundle.limits)
CHUNK = MIB
Progress = Callable[[str, int, int], None]  # (what, bytes done, bytes in all)


def _report_file(path: Path) -> bytes:
    """The bytes of the harness's report: a JSON object holding at least one of the blocks the kit compares
    (kit.protocols.harness.report.COMPARED), each an object, as the harness's analyzer writes them."""
    report, data = json_file(path, "report")
    expected = ", ".join(COMPARED)
    found = [key for key in COMPARED if key in report]
    if not found:
        keys = ", ".join(sorted(map(str, report))[:8]) or "none"
        raise ConfigError(f"--report {path} holds none of the values the kit compares (top-level keys {expected}; "
                          f"it has {keys})", "give the harness analyzer's report of this study, or leave out --report")
    for key in found:
        if not isinstance(report[key], dict):
            raise ConfigError(f"--report {path}: `{key}` is {json.dumps(report[key])[:40]}, not an object",
                              "give the harness analyzer's report of this study, or leave out --report")
    return data


@dataclass
class Scanned:
    """One calls file checked: its side files, and where each of its calls is, in execution order."""

    files: HarnessFiles
    manifest: dict[str, Any]
    done: dict[str, Any]
    side: dict[Path, bytes]  # each side file's bytes, copied as read
    calls_sha256: str
    calls_bytes: int
    offsets: array[int]  # the byte offset of each call's line, in execution order (by schedule_index)
    numbers: array[int]  # the line number of each call, in the same order
    mode: str  # the manifest's, else the first call's
    boxes: set[str]  # the boxes its calls name


def scan(files: HarnessFiles, calls: BinaryIO, progress: Progress, budget: int | None = None) -> Scanned:
    """Check the side files and every line of the open calls file (streamed, never held whole); at most
    `budget` calls (what is left of the study's IMPORT_CALLS_MAX)."""
    manifest, manifest_bytes = json_file(files.manifest, "manifest")
    done, done_bytes = json_file(files.done, "done marker")
    side = {files.manifest: manifest_bytes, files.done: done_bytes}
    run_name = manifest.get("run_name")
    if not isinstance(run_name, str) or done.get("run_name") != run_name:
        raise ConfigError(f"{files.manifest} and {files.done} name runs {run_name!r} and {done.get('run_name')!r}",
                          "give the manifest and done marker of the same run")
    budget = IMPORT_CALLS_MAX if budget is None else budget
    total = calls.seek(0, 2)
    calls.seek(0)
    digest, indices, offsets, numbers = hashlib.sha256(), array("q"), array("Q"), array("Q")
    boxes: set[str] = set()
    for number, offset, raw in lines(calls, files.calls):
        digest.update(raw)
        if raw.strip():
            if len(indices) == budget:
                raise ConfigError(f"{files.calls}:{number} is call {IMPORT_CALLS_MAX - budget + len(indices) + 1}: "
                                  f"the kit imports at most {IMPORT_CALLS_MAX} calls of one study",
                                  "import a study of that size or less")
            call = check_call(raw, f"{files.calls}:{number}", run_name)
            box = box_of_call(call, manifest)
            if box and box not in boxes:
                if len(boxes) == BOXES_MAX:
                    raise ConfigError(f"{files.calls}:{number} names box {box[:40]!r}, more than {BOXES_MAX} boxes "
                                      "in one study", FIX)
                boxes.add(box)
            indices.append(call.schedule_index)
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
    first_call = check_call(calls.readline(LINE_BYTES + 1), f"{files.calls}:{numbers[order[0]]}", run_name)
    return Scanned(files, manifest, done, side, digest.hexdigest(), total, array("Q", (offsets[i] for i in order)),
                   array("Q", (numbers[i] for i in order)), str(manifest.get("mode") or first_call.mode or "unknown"),
                   boxes)


def _copy_calls(calls: BinaryIO, target: Path, scanned: Scanned, progress: Progress) -> None:
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
        raise ConfigError(f"{scanned.files.calls} changed while it was imported",
                          "import it again once nothing writes to it")


def _write(run_dir: Path, handles: list[BinaryIO], study: list[Scanned], report: tuple[Path, bytes] | None,
           thresholds: tuple[float, float] | None, progress: Progress) -> None:
    kept = RunPaths(run_dir).imported
    kept.mkdir(parents=True)
    digests = {}  # every kept file's sha256, in the manifest: what `kit verify` holds them against
    for scanned, calls in zip(study, handles):
        for source, data in scanned.side.items():
            (kept / source.name).write_bytes(data)
            digests[source.name] = hashlib.sha256(data).hexdigest()
        _copy_calls(calls, kept / scanned.files.calls.name, scanned, progress)
        digests[scanned.files.calls.name] = scanned.calls_sha256
    if report:
        (kept / report[0].name).write_bytes(report[1])
        digests[report[0].name] = hashlib.sha256(report[1]).hexdigest()
    first, mode = study[0], study[0].mode
    boxes = sorted(set().union(*(s.boxes for s in study)))
    resolved = {"protocol": "harness", "mode": mode, "box": boxes[0] if len(boxes) == 1 else None, "boxes": boxes,
                "thresholds": list(thresholds) if thresholds else None,
                "report": f"{RunPaths.IMPORTED}/{report[0].name}" if report else None, "definitions": DEFINITIONS}
    engine = {"kind": "ollama (as the harness recorded it)", "version": first.manifest.get("engine_version"),
              "models": first.manifest.get("model_digests"), "url": None}
    runs = [{"run_name": s.manifest["run_name"], "boxes": sorted(s.boxes), "calls": s.files.calls.name,
             "calls_sha256": s.calls_sha256, "done": s.done} for s in study]
    single = {"run_name": first.manifest["run_name"], "done": first.done} if len(study) == 1 else {}
    total = sum(len(s.offsets) for s in study)
    record = Manifest.create(
        run_dir, protocol={"name": NAME, "kind": "harness", "file": str(first.files.calls),
                           "sha256": first.calls_sha256, "content": None, "resolved": resolved, "overrides": {}},
        imported={"from": "determinism-harness", **single, "runs": runs,
                  "files": sorted(p.name for p in kept.iterdir()), "report": report is not None,
                  "sha256": dict(sorted(digests.items())), "derivation": DERIVATION},
        engine=engine, plan={"calls": total, "mode": mode, "boxes": boxes}, workload={"source": "determinism-harness"},
        seeds={}, provenance=collect())
    study_files = [(s.files.calls.name, s.manifest["run_name"], s.manifest) for s in study]
    orders: list[Iterable[tuple[int, int]]] = [zip(s.offsets, s.numbers) for s in study]  # as the scan checked and sorted them
    with RecordWriter(run_dir / RunPaths.records_name(PASS), sync_each=False) as writer:
        for seq, made in enumerate(derive(kept, study_files, record.run_id, orders)):  # from the checked copies
            writer.write(made)
            if seq % 4096 == 0:
                progress("writing records", seq, total)
        progress("writing records", total, total)
    record.set_pass(PASS, status="OK", reason=None, file=RunPaths.records_name(PASS), records=writer.count)
    from kit.protocols.harness.results import results  # noqa: PLC0415

    table = results(run_dir)
    record.update(results=table.files)
    record.finish("finished")


def _quiet(what: str, done: int, total: int) -> None:
    """No progress shown."""


def _names(study: list[HarnessFiles], report: Path | None) -> None:
    """Every file of the study lands in records/imported/ under its own name: refuse two of one name."""
    seen: dict[str, Path] = {}
    for path in [p for f in study for p in (f.calls, f.manifest, f.done)] + ([report] if report else []):
        if path.name in seen and seen[path.name].resolve() != path.resolve():
            raise ConfigError(f"{path} and {seen[path.name]} have the same name; the run folder keeps each file "
                              "of the study under its name", "rename one of them")
        if path.name in seen:
            raise ConfigError(f"{path} is given twice", "give each box's calls file once")
        seen[path.name] = path


def _one_study(study: list[Scanned]) -> None:
    runs: dict[str, Path] = {}
    for scanned in study:
        name = scanned.manifest["run_name"]
        if name in runs:
            raise ConfigError(f"{scanned.files.calls} is run {name!r} again (also {runs[name]}); a call is counted "
                              "once", "give each run of the study once")
        runs[name] = scanned.files.calls
        if scanned.mode != study[0].mode:
            raise ConfigError(f"{scanned.files.calls} is a run of mode {scanned.mode!r}, {study[0].files.calls} of "
                              f"{study[0].mode!r}; one study has one mode", "import each mode's runs on their own")


def import_run(files: HarnessFiles | Sequence[HarnessFiles], out: Path, thresholds: tuple[float, float] | None = None,
               progress: Progress = _quiet) -> Path:
    """Check the harness's files (one run, or a study's runs: one per box), then write the run folder under
    `out` and its results; its path. `progress(what, done, total)` hears how far each pass over a calls
    file is. A run folder whose writing fails (a full disk, a signal) is removed, never left half-written."""
    study = [files] if isinstance(files, HarnessFiles) else list(files)
    if not 1 <= len(study) <= FILES_MAX:
        raise ConfigError(f"{len(study)} calls files given; a study has 1 to {FILES_MAX}", "give each box's file once")
    report_path = next((f.report for f in study if f.report), None)
    _names(study, report_path)
    report = (report_path, _report_file(report_path)) if report_path else None
    with ExitStack() as stack:
        handles: list[BinaryIO] = []
        scanned: list[Scanned] = []
        for harness_files in study:
            handles.append(stack.enter_context(open_regular(harness_files.calls, "the harness's calls file",
                                                            CALLS_BYTES, FIX)))
            left = IMPORT_CALLS_MAX - sum(len(s.offsets) for s in scanned)
            scanned.append(scan(harness_files, handles[-1], progress, left))
        _one_study(scanned)
        run_dir = new_run_dir(out, f"harness-{scanned[0].mode}")
        try:
            _write(run_dir, handles, scanned, report, thresholds, progress)
        except BaseException as exc:
            shutil.rmtree(run_dir, ignore_errors=True)
            if isinstance(exc, OSError):  # a full disk, a folder that went away: one line, never a traceback
                raise KitError(f"writing the run folder under {out} failed ({exc.strerror or exc}); nothing of it "
                               "was kept", "free some space or fix the folder, then import again") from exc
            raise
    return run_dir
