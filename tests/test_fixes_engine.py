"""`--fix` and `--server-arg` on a real run of the embedded engine: every server carries them, the manifest and
engine record keep them, `kit show` lists them, `kit replay` applies them again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bundle.kit_cli import run_here as kit

pytestmark = pytest.mark.engine

SMALL = ("--items", "2", "--sessions", "1", "--max-tokens", "8")


def _run(out: Path, *args: str) -> tuple[Path, dict]:
    done = kit("run", "demo", "--out", str(out), *SMALL, *args)
    assert done.returncode == 0, done.stderr
    (run_dir,) = out.glob("demo-*")
    return run_dir, json.loads((run_dir / "manifest.json").read_text())


def test_fixes_are_applied_recorded_shown_and_replayed(tmp_path):
    run_dir, manifest = _run(tmp_path / "run", "--fix", "chunk-16", "--server-arg=--swa-full")
    assert manifest["options"]["fixes"] == ["chunk-16"] and manifest["options"]["server_args"] == ["--swa-full"]
    assert manifest["engine"]["fixes"] == ["chunk-16"] and manifest["engine"]["server_args"] == ["--swa-full"]
    for info in manifest["passes"].values():
        assert info["status"] == "OK"
        assert info["launch"]["argv"][-5:] == ["--ubatch-size", "16", "--batch-size", "16", "--swa-full"]

    bundle = tmp_path / "fixed.tar.gz"
    assert kit("bundle", str(run_dir), "-o", str(bundle)).returncode == 0
    shown = kit("show", str(bundle))
    assert "fixes: chunk-16" in shown.stdout and "extra server flags: --swa-full" in shown.stdout

    replayed = kit("replay", str(run_dir), "--out", str(tmp_path / "replay"))
    assert replayed.returncode == 0, replayed.stderr
    (again,) = (tmp_path / "replay").iterdir()
    manifest = json.loads((again / "manifest.json").read_text())
    assert manifest["options"]["fixes"] == ["chunk-16"] and manifest["options"]["server_args"] == ["--swa-full"]
    assert all(info["launch"]["argv"][-5:] == ["--ubatch-size", "16", "--batch-size", "16", "--swa-full"]
               for info in manifest["passes"].values())
    comparison = json.loads((again / "replay" / "comparison.json").read_text())
    assert comparison["requests_identical"] == comparison["requests"] > 0


def test_the_fixed_kernels_backend_is_applied_and_recorded(tmp_path):
    """`--fix cpu-backend-portable-fixedkernels`: every server runs on that build's library (its folder first on
    the loader path), and the manifest's provenance and every pass's launch name it with its sha256."""
    from kit.launch.cpu import portable_backend  # noqa: PLC0415

    record = portable_backend.build_record(portable_backend.FIXED_KERNELS)
    if record is None:
        pytest.skip("the fixed-kernels backend is not built here (kit engines build-cpu-backend --variant "
                    "portable-fixedkernels)")
    _, manifest = _run(tmp_path / "run", "--fix", "cpu-backend-portable-fixedkernels")
    assert manifest["options"]["fixes"] == ["cpu-backend-portable-fixedkernels"]
    assert manifest["engine"]["fixes"] == ["cpu-backend-portable-fixedkernels"]
    assert manifest["engine"]["cpu_backend"] == "portable-fixedkernels"
    cpu = manifest["provenance"]["cpu_backend"]
    assert cpu["name"] == "portable-fixedkernels" and cpu["library_sha256"] == record["library_sha256"]
    assert cpu["folder"] == str(portable_backend.build_dir(portable_backend.FIXED_KERNELS))
    for info in manifest["passes"].values():
        assert info["status"] == "OK"
        assert info["launch"]["cpu_backend"] == "portable-fixedkernels"
        assert info["launch"]["cpu_backend_sha256"] == record["library_sha256"]
