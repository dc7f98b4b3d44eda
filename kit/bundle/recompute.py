"""Re-running a run's analysis from its raw inputs: the results its kind computes at the end of a run.

`recompute` runs the kind's `results` (kit.protocols.kind; the same entry the runner calls) on a
run folder that holds only the raw inputs (manifest, records, protocol); it writes into that folder,
as it did after the run, and `kit verify` then compares what it wrote with what the bundle holds.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from kit.record.manifest import RunManifest
from kit.core.paths import RunPaths
from kit.protocols import kinds
from kit.record.files import require_whole

RAW_INPUTS = (RunPaths.MANIFEST, RunPaths.RECORDS, "protocol")
COMPUTED = (RunPaths.RESULTS, RunPaths.ANALYSIS)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)  # the raw inputs are only read; a link saves copying large records
    except OSError:
        shutil.copy2(source, target)


def raw_copy(run_dir: Path, dest: Path, run_id: str) -> Path:
    """A copy of a run folder holding only its raw inputs, under dest/<run_id> (the run's identity comes
    from its manifest, never from the name of the folder it was found in)."""
    copy = dest / run_id
    copy.mkdir(parents=True)
    for name in RAW_INPUTS:
        source = run_dir / name
        if source.is_dir():
            shutil.copytree(source, copy / name, symlinks=False, copy_function=_link_or_copy)
        elif source.is_file():
            _link_or_copy(str(source), str(copy / name))
    return copy


def recompute(run_dir: Path, manifest: RunManifest) -> dict[str, bytes]:
    """The results of run_dir's kind (from `manifest`, its manifest as already read), recomputed on run_dir (a
    raw copy); the computed files they wrote, by relative path. Raises KitError for a kind this kit does not
    know, CutShort for a run with a pass cut short (kit.record.files.require_whole)."""
    require_whole(run_dir, manifest.passes)
    kinds.named(manifest.protocol.kind, str(run_dir)).results(run_dir)
    out = {}
    for folder in COMPUTED:
        base = run_dir / folder
        if base.is_dir():
            for path in sorted(p for p in base.rglob("*") if p.is_file()):
                out[path.relative_to(run_dir).as_posix()] = path.read_bytes()
    return out


def count_records(run_dir: Path) -> int:
    """Record lines in run_dir's records/ files (one JSON line per request, or per episode)."""
    total = 0
    for path in sorted(RunPaths(run_dir).records.rglob("*.jsonl")):
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                total += chunk.count(b"\n")
    return total
