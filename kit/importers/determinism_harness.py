"""`kit import determinism-harness`: seed 002's harness records (schema 3) as a kit run folder.

Input: the harness's `<run>.jsonl` with its `<run>.manifest.json` and `<run>.done.json` beside it (the
format: ../shared/data/determinism-harness/SOURCE.md), and optionally its own analyzer report. Every
call is kept, in execution order (`schedule_index`), as one `HarnessRecord` (kit.record) of the pass
`calls`; the harness's files are copied unchanged into `records/imported/`, so the run folder holds
what it came from. Everything is checked before the run folder exists, and a file that would lose or
double a call is refused naming file and line: a line that is not a schema-3 object, a missing field,
a `text_sha256` that is not the sha256 of its `text`, a repeated `schedule_index`, another run's call,
or fewer calls than the harness's `done.json` says it finished.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.digests import sha256_text
from kit.errors import ConfigError
from kit.manifest import Manifest, new_run_dir
from kit.provenance import collect
from kit.record import HarnessRecord
from kit.records import RecordWriter

SCHEMA = 3
PASS = "calls"
REQUIRED = {"cell": str, "schedule_index": int, "text": str, "text_sha256": str, "ok": bool,
            "request_sha256": str, "run_name": str}
FIX = "import the harness's files as it wrote them (see docs/import.md)"


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


def _json_file(path: Path, what: str) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path} is missing: the harness writes its {what} beside the calls", FIX) from exc
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path} is not a JSON file ({exc})", FIX) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} holds a {type(data).__name__}, not the harness's {what} object", FIX)
    return data


def _arm(cell: str) -> tuple[str | None, str | None]:
    """(key, value) of the cell's last part when it is `key=value` (`prefill=cold`), else (None, None)."""
    last = cell.rsplit("|", 1)[-1]
    key, sep, value = last.partition("=")
    return (key, value) if sep and key and value else (None, None)


def _call(line: str, where: str, run_name: str) -> dict[str, Any]:
    try:
        call = json.loads(line)
    except ValueError as exc:
        raise ConfigError(f"{where} is not a JSON object ({exc})", FIX) from exc
    if not isinstance(call, dict) or call.get("schema") != SCHEMA:
        schema = call.get("schema") if isinstance(call, dict) else None
        raise ConfigError(f"{where} is not a harness record of schema {SCHEMA} (schema {schema!r})", FIX)
    for key, kind in REQUIRED.items():
        if type(call.get(key)) is not kind:
            raise ConfigError(f"{where} has {key} {call.get(key)!r}; a harness record's {key} is a {kind.__name__}",
                              FIX)
    if sha256_text(call["text"]) != call["text_sha256"]:
        raise ConfigError(f"{where}: text_sha256 {call['text_sha256'][:12]}… is not the sha256 of its text",
                          "the file was changed after the harness wrote it; import an intact copy")
    if call["run_name"] != run_name:
        raise ConfigError(f"{where} is a call of run {call['run_name']!r}, not of {run_name!r} (its manifest)", FIX)
    usage = call.get("usage")
    if usage is not None and not isinstance(usage, dict):
        raise ConfigError(f"{where} has usage {usage!r}; the harness writes an object", FIX)
    return call


def read(files: HarnessFiles) -> tuple[dict[str, Any], dict[str, Any], list[tuple[int, dict[str, Any]]]]:
    """(manifest, done, [(line, call)] in execution order), every line checked."""
    manifest = _json_file(files.manifest, "manifest")
    done = _json_file(files.done, "done marker")
    run_name = manifest.get("run_name")
    if not isinstance(run_name, str) or done.get("run_name") != run_name:
        raise ConfigError(f"{files.manifest} and {files.done} name runs {run_name!r} and {done.get('run_name')!r}",
                          "give the manifest and done marker of the same run")
    try:
        lines = files.calls.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {files.calls} ({exc})", FIX) from exc
    calls, seen = [], {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        call = _call(line, f"{files.calls}:{number}", run_name)
        index = call["schedule_index"]
        if index in seen:
            raise ConfigError(f"{files.calls}:{number} repeats schedule_index {index} (first at line {seen[index]}); "
                              "a call is counted once", FIX)
        seen[index] = number
        calls.append((number, call))
    if not calls:
        raise ConfigError(f"{files.calls} holds no calls", FIX)
    finished = done.get("done")
    if done.get("complete") is not True or finished != len(calls):
        raise ConfigError(f"{files.done} says {finished!r} calls finished (complete: {done.get('complete')!r}) "
                          f"but {files.calls} holds {len(calls)}", "import the run's complete files")
    return manifest, done, sorted(calls, key=lambda item: item[1]["schedule_index"])


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


def import_run(files: HarnessFiles, out: Path, thresholds: tuple[float, float] | None = None) -> Path:
    """Check the harness's files, then write the run folder under `out` and its results; its path."""
    manifest, done, calls = read(files)
    report = _json_file(files.report, "report") if files.report else None
    mode = str(manifest.get("mode") or calls[0][1].get("mode") or "unknown")
    boxes = sorted({str(c.get("box")) for _, c in calls if c.get("box")})
    run_dir = new_run_dir(out, f"harness-{mode}")
    kept = run_dir / "records" / "imported"
    kept.mkdir(parents=True)
    for source in (files.calls, files.manifest, files.done, *([files.report] if files.report else [])):
        shutil.copyfile(source, kept / source.name)
    resolved = {"protocol": "harness", "mode": mode, "box": boxes[0] if len(boxes) == 1 else None,
                "thresholds": list(thresholds) if thresholds else None,
                "report": f"records/imported/{files.report.name}" if files.report else None}
    engine = {"kind": "ollama (as the harness recorded it)", "version": manifest.get("engine_version"),
              "models": manifest.get("model_digests"), "url": None}
    record = Manifest.create(
        run_dir, protocol={"name": "determinism-harness", "kind": "harness", "file": str(files.calls),
                           "sha256": sha256_text(files.calls.read_text(encoding="utf-8")), "content": None,
                           "resolved": resolved, "overrides": {}},
        imported={"from": "determinism-harness", "run_name": manifest["run_name"], "done": done,
                  "files": sorted(p.name for p in kept.iterdir()), "report": bool(report)},
        engine=engine, plan={"calls": len(calls), "mode": mode}, workload={"source": "determinism-harness"},
        seeds={}, provenance=collect())
    with RecordWriter(run_dir / "records" / f"{PASS}.jsonl") as writer:
        for seq, (number, call) in enumerate(calls):
            writer.write(_record(record.run_id, seq, number, call))
    record.set_pass(PASS, status="OK", reason=None, file=f"records/{PASS}.jsonl", records=writer.count)
    from kit.analysis.harness import results  # noqa: PLC0415

    table = results(run_dir)
    record.update(results=table["files"])
    record.finish("finished")
    return run_dir
