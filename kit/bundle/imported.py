"""`kit verify` of an imported run (kind `harness`): the harness's own files the run folder keeps in
records/imported/ are held against the manifest, and the records are made again from them.

- Each calls file's sha256 must be its `calls_sha256` in the manifest's `imported.runs` (the first one's,
  also `protocol.sha256`); every other kept file's sha256 its entry in `imported.sha256` (imports of earlier
  kits kept none: their done markers are held against the copy `imported` keeps, their other side files
  are listed as not checked).
- The records (records/calls.jsonl) are made again from the kept calls with the import's own rule
  (kit.protocols.harness.calls) and compared record by record with the bundled ones, so that changing a
  calls file and its `calls_sha256` together fails: the records no longer follow from the calls. A run
  imported by a kit that kept no `imported.derivation` was made by an earlier rule, which this kit does not
  hold whole: its records are compared on the fields every release's import wrote (`EVERY_KIT`: each call's
  cell, digests, text, outcome, schedule index and line), so that the calls they came from still cannot be
  changed alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kit.bundle import RUNS
from kit.bundle.coverage import NOT_CHECKED, PINNED, RECOMPUTED, Cover
from kit.bundle.value_diff import Mismatch, compare_json
from kit.core.errors import KitError
from kit.core.paths import RunPaths
from kit.protocols.harness.calls import DERIVATION, PASS, derive
from kit.protocols.harness.files import HarnessFiles, json_file
from kit.record.files import RecordWriter, read_records
from kit.record.manifest import ImportedInfo, RunManifest

IMPORTED = f"{RunPaths.IMPORTED}/"
RECORDS = RunPaths.records_name(PASS)
# what every release's import wrote of each call, as this one does: compared for an import by a kit that kept no
# `imported.derivation` (its other fields came from rules this kit does not hold)
EVERY_KIT = ("run_id", "pass_id", "seq", "unit", "prompt_sha256", "output_sha256", "text", "ok", "schedule_index",
             "source_line")
SHOWN = 20  # differing values listed


@dataclass
class Outcome:
    """What the check found: problems (file, what), mismatches, and the cover of each file it checked."""

    problems: list[tuple[str, str]]
    mismatches: list[Mismatch]
    covers: dict[str, Cover]


def study_of(manifest: RunManifest) -> tuple[ImportedInfo, list[dict[str, Any]]]:
    """The manifest's `imported` and the calls files of the import, in its order: each with its `calls` (file
    name), `run_name`, `calls_sha256`, `done` and where the manifest says so (`at`); ValueError when `imported`
    names none."""
    imported = manifest.imported
    if imported is None:
        raise ValueError("names no `imported` files, which every imported run does")
    runs: list[dict[str, Any]] | None = imported.runs
    if runs is None:  # one calls file, as the first releases imported it: named by the protocol
        protocol = manifest.protocol
        runs = [{"calls": Path(str(protocol.file)).name, "run_name": imported.run_name,
                 "calls_sha256": protocol.sha256, "done": imported.done, "at": "protocol.sha256"}]
    if not (isinstance(runs, list) and runs and all(isinstance(r, dict) and isinstance(r.get("calls"), str)
                                                    and isinstance(r.get("run_name"), str) for r in runs)):
        raise ValueError("its `imported.runs` is not a list of calls files with their run names")
    return imported, [{"at": f"imported.runs[{i}].calls_sha256", **r} for i, r in enumerate(runs)]


def check(folder: Path, prefix: str, manifest: RunManifest, digests: dict[str, str], scratch: Path) -> Outcome:
    """Check one imported run unpacked at `folder` (its bundle prefix `prefix`, `digests`: each bundled file's
    sha256 by name within the run)."""
    out = Outcome([], [], {})
    where = f"{prefix}{RunPaths.MANIFEST}"
    try:
        imported, study = study_of(manifest)
    except ValueError as exc:
        out.problems.append((where, str(exc)))
        return out
    pins = imported.sha256 or {}
    kept = {name[len(IMPORTED):] for name in digests if name.startswith(IMPORTED)}
    calls = {run["calls"]: run for run in study}
    for name in sorted(kept | set(calls) | set(pins)):
        file = f"{prefix}{IMPORTED}{name}"
        found = digests.get(f"{IMPORTED}{name}")
        expected, at = (calls[name]["calls_sha256"], calls[name]["at"]) if name in calls \
            else (pins.get(name), f"imported.sha256[{name!r}]")
        if found is None:
            out.problems.append((file, f"named by {at} in {where} but missing from the bundle"))
        elif expected is not None:
            if found != expected:
                out.problems.append((file, f"differs from its sha256 {at} in {where}"))
            else:
                out.covers[file] = Cover(PINNED, f"its sha256 is {at} in {where}")
        elif not pins:  # an import by an earlier kit, which kept no sha256 of its side files
            out.covers[file] = _earlier(folder, name, study, where)
    if out.problems:
        return out
    _records(folder, prefix, manifest, study, imported, scratch, out)
    return out


def _earlier(folder: Path, name: str, study: list[dict[str, Any]], where: str) -> Cover:
    """The cover of a side file an earlier kit imported without keeping its sha256: a done marker equal to
    the copy `imported` keeps is pinned by that copy; any other is not checked."""
    for i, run in enumerate(study):
        done = HarnessFiles.beside(folder / IMPORTED / run["calls"]).done
        if name == done.name and run.get("done") is not None:
            try:
                same = json_file(done, "done marker")[0] == run["done"]
            except KitError:
                same = False
            if same:
                return Cover(PINNED, f"equal to the done marker imported.runs[{i}].done in {where}")
    return Cover(NOT_CHECKED, "a file of an import by an earlier kit, which kept no sha256 of it")


def _records(folder: Path, prefix: str, manifest: RunManifest, study: list[dict[str, Any]],
             imported: ImportedInfo, scratch: Path, out: Outcome) -> None:
    """Make the records again from the kept calls and compare them with the bundled ones."""
    file = f"{prefix}{RECORDS}"
    whole = imported.derivation == DERIVATION
    remade = scratch / f"remade-{manifest.run_id}.jsonl"
    try:
        sides = [(run["calls"], run["run_name"], _side_manifest(folder, run["calls"])) for run in study]
        with RecordWriter(remade, sync_each=False) as writer:
            for record in derive(folder / IMPORTED, sides, str(manifest.run_id)):
                writer.write(record)
        fresh = read_records(remade, logprobs=False).records
        bundled = read_records(folder / RECORDS, logprobs=False).records
    except (KitError, OSError, ValueError) as exc:
        message = exc.message if isinstance(exc, KitError) else str(exc)
        out.problems.append((file, f"cannot be made again from the imported calls ({message})"))
        return
    finally:
        remade.unlink(missing_ok=True)
    if not whole:
        bundled, fresh = ([{key: r.get(key) for key in EVERY_KIT} for r in rs] for rs in (bundled, fresh))
    found = compare_json(bundled, fresh, file)
    out.mismatches.extend(found[:SHOWN])
    if len(found) > SHOWN:
        out.problems.append((file, f"{len(found)} values differ from the records made again from the imported "
                                   f"calls (the first {SHOWN} are shown)"))
    if not found:
        names = ", ".join(f"{prefix}{IMPORTED}{run['calls']}" for run in study)
        out.covers[file] = Cover(RECOMPUTED, f"made again from the imported calls {names}" + (
            "" if whole else f" (imported by an earlier kit: on the fields every kit's import writes, "
                             f"{', '.join(EVERY_KIT)})"))


def _side_manifest(folder: Path, calls: str) -> dict[str, Any]:
    """The harness's manifest beside a calls file (the box of calls that name none), read as the import reads
    it (a regular file within its size limit, a JSON object; ConfigError otherwise)."""
    return json_file(HarnessFiles.beside(folder / IMPORTED / calls).manifest, "manifest")[0]


def digests_of(files: dict[str, Any], run_id: str) -> dict[str, str]:
    """Each bundled file of run `run_id` by its name within the run -> sha256 (from a safe_tar listing)."""
    prefix = f"{RUNS}/{run_id}/"
    return {name[len(prefix):]: entry.sha256 for name, entry in files.items() if name.startswith(prefix)}

