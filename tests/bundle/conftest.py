"""Real CPU runs of the restored-state control (embedded llama-server, pinned SmolLM2), small N, made once
per test session and bundled by the tests. Nothing here is mocked."""

from __future__ import annotations

import json
import shutil
import tarfile
from pathlib import Path

import pytest

from kit.bundle.content import BundledRun
from kit.core.paths import RunPaths
from kit.record.manifest import WRITTEN
from tests.bundle import archives


def bundled_run(run_id: str, manifest: dict, files: dict[str, bytes] | None = None) -> BundledRun:
    """A bundle's run held in memory as the bundle holds it: its manifest (these fields, schema WRITTEN) as
    JSON bytes beside `files`."""
    data = json.dumps({"schema": WRITTEN, **manifest}).encode()
    return BundledRun(run_id, {RunPaths.MANIFEST: data, **(files or {})})


@pytest.fixture(scope="session")
def real_runs(shared_reset_runs) -> list[Path]:
    """Two finished real reset runs: 2 items x 2 sessions, and 2 items x 1 session (the session's shared ones,
    tests/shared_runs.py: read-only; `run_copies` for a test that changes them)."""
    return shared_reset_runs


@pytest.fixture
def run_copies(real_runs, tmp_path) -> list[Path]:
    """Copies of the real run folders a test may change or delete."""
    copies = []
    for run_dir in real_runs:
        copies.append(Path(shutil.copytree(run_dir, tmp_path / "runs" / run_dir.name)))
    return copies


def read_members(bundle: Path) -> tuple[str, dict[str, bytes]]:
    """The bundle's top folder and its files (relative to it), read with tarfile directly."""
    files, root = {}, None
    with tarfile.open(bundle, "r:gz") as tar:
        for member in tar.getmembers():
            root = root or member.name.split("/")[0]
            if member.isfile():
                files[member.name.split("/", 1)[1]] = tar.extractfile(member).read()
    return root, files


def repack(root: str, files: dict[str, bytes], out: Path) -> Path:
    """Write files as a .tar.gz in the writer's exact format (used to make altered copies of a real bundle)."""
    out.write_bytes(archives.pack(root, files))
    return out


def synthetic_grid_run(folder: Path, model_name: str = "toy-F16") -> Path:
    """A small finished grid run written as real record files (tests/analysis/records_builder: two
    passes, three one-request episodes), its results computed by the kit: bundles in milliseconds."""
    from kit.protocols.grid import protocol as grid  # noqa: PLC0415
    from tests.analysis.records_builder import position, write_grid_like  # noqa: PLC0415

    folder.mkdir(parents=True)
    on = {f"e{i}": [(f"e{i}-p0", [position(1, 1.5, 2, 2), position(3, 0.02, 4, 2)], 30)] for i in range(3)}
    on["e2"] = [("e2-p0", [position(1, 1.5, 2, 2), position(4, 0.01, 3, 2)], 30)]
    off = {u: [(p, pos, 0) for p, pos, _ in steps] for u, steps in on.items()}
    off["e2"] = [("e2-p0", [position(1, 1.5, 2, 2), position(3, 0.02, 4, 2)], 0)]
    write_grid_like(folder, {"on1": {"arm": "on", "order": sorted(on), "episodes": on},
                             "off1": {"arm": "off", "order": sorted(off), "episodes": off}}, model_name=model_name)
    grid.KIND.results(folder)
    return folder


@pytest.fixture(scope="session")
def synthetic_bundle(tmp_path_factory) -> bytes:
    """The bytes of a real bundle (written by kit.bundle.writer) of one synthetic grid run."""
    from kit.bundle.writer import write_bundle  # noqa: PLC0415

    root = tmp_path_factory.mktemp("synthetic")
    run = synthetic_grid_run(root / "grid-toy")
    return write_bundle([run], root / "base.tar.gz", environ={}).path.read_bytes()
