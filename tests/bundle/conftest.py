"""Real CPU runs of the restored-state control (embedded llama-server, pinned SmolLM2), small N, made once
per test session and bundled by the tests. Nothing here is mocked."""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path

import pytest

from kit import runner


def _run(out: Path, overrides: dict) -> Path:
    result = runner.run(runner.RunOptions(protocol="reset", out=out, overrides=overrides), say=lambda _: None)
    assert result.status == "finished", result.reason
    return result.run_dir


@pytest.fixture(scope="session")
def real_runs(tmp_path_factory, embedded_binary) -> list[Path]:
    """Two finished real reset runs: 2 items x 2 sessions, and 2 items x 1 session."""
    out = tmp_path_factory.mktemp("real-runs")
    small = {"max_tokens": 12, "engine": {"ctx_size": 1024}}
    return [_run(out, {**small, "workload": {"items": 2}, "sessions": 2}),
            _run(out, {**small, "workload": {"items": 2}, "sessions": 1})]


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
    """Write files as a bundle-shaped .tar.gz (used to make altered copies of a real bundle)."""
    with tarfile.open(out, "w:gz") as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{root}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out
