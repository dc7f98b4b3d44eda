"""Re-running a run's analysis from its raw inputs, per protocol kind.

`STEPS` maps a protocol kind to the steps that rebuild its computed files from a run folder that
holds only the raw inputs (manifest, records, protocol). Each step writes into that folder, as it
did after the run; `kit verify` then compares what they wrote with what the bundle holds. A kind
with more analysis (e.g. `kit analyze` writing analysis/findings.json) adds its step to the tuple.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

from kit.manifest import Manifest
from kit.protocols import kinds

Step = Callable[[Path], object]
RAW_INPUTS = ("manifest.json", "records", "protocol")
COMPUTED = ("results", "analysis")


def _procedure_results(run_dir: Path) -> object:
    """The procedure's own results (e.g. results/reset_table.json), for the kind in the manifest."""
    kind = Manifest.load(run_dir).data["protocol"]["kind"]
    return kinds.PROCEDURES[kind].results(run_dir)


STEPS: dict[str, tuple[Step, ...]] = {kind: (_procedure_results,) for kind in kinds.PROCEDURES}


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


def recompute(run_dir: Path, kind: str) -> dict[str, bytes]:
    """Run every step for `kind` on run_dir (a raw copy); the computed files it wrote, by relative path."""
    steps = STEPS.get(kind)
    if steps is None:
        raise KeyError(kind)
    for step in steps:
        step(run_dir)
    out = {}
    for folder in COMPUTED:
        base = run_dir / folder
        if base.is_dir():
            for path in sorted(p for p in base.rglob("*") if p.is_file()):
                out[path.relative_to(run_dir).as_posix()] = path.read_bytes()
    return out
