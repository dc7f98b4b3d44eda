"""Provisioning of BFCL in the kit cache and the worker's isolation."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kit.core.errors import KitError
from kit.workloads.bfcl import BFCL_PINS, BfclWorker, ensure_bfcl, kit_cache_dir
from kit.workloads.bfcl.client import BfclWorkerError, worker_environment
from kit.workloads.bfcl.provision import BFCL_VERSION, DATASET_SHA256, MARKER_NAME, verify_dataset


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    assert kit_cache_dir() == tmp_path
    monkeypatch.delenv("KIT_CACHE_DIR")
    assert kit_cache_dir() == Path.home() / ".cache" / "kit"


def test_missing_install_is_an_error_without_install(tmp_path):
    with pytest.raises(KitError, match="not installed"):
        ensure_bfcl(tmp_path, install=False)


def test_install_is_pinned_marked_and_verified(bfcl_install):
    marker = json.loads((bfcl_install.site_dir / MARKER_NAME).read_text())
    assert marker["pins"] == list(BFCL_PINS)
    assert "bfcl-eval==2026.3.23" in BFCL_PINS
    assert bfcl_install.dataset_sha256 == DATASET_SHA256
    manifest = bfcl_install.to_manifest()
    assert manifest["bfcl_eval"] == "2026.3.23" and manifest["pins"] == list(BFCL_PINS)
    # BFCL's project root (where it writes) is a scratch folder, not the installed packages.
    assert not bfcl_install.project_root.is_relative_to(bfcl_install.site_dir)


def test_marker_with_other_pins_is_not_reused(bfcl_install, tmp_path):
    site = tmp_path / "bfcl" / "site"
    site.mkdir(parents=True)
    (site / MARKER_NAME).write_text(json.dumps({"pins": ["bfcl-eval==2025.1.1"]}))
    with pytest.raises(KitError, match="not installed"):
        ensure_bfcl(tmp_path, install=False)


def test_tampered_dataset_file_is_rejected(bfcl_install, tmp_path):
    for relative in DATASET_SHA256:
        dest = tmp_path / relative
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(bfcl_install.path(relative), dest)
    assert verify_dataset(tmp_path) == DATASET_SHA256
    episodes = tmp_path / "bfcl_eval/data/BFCL_v4_multi_turn_base.json"
    episodes.write_text(episodes.read_text().replace("final_report.pdf", "final_report.txt", 1))
    with pytest.raises(KitError, match="BFCL_v4_multi_turn_base.json has sha256"):
        verify_dataset(tmp_path)
    episodes.unlink()
    with pytest.raises(KitError, match="missing"):
        verify_dataset(tmp_path)


def test_worker_environment_is_built_from_scratch(bfcl_install, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "do-not-leak")
    monkeypatch.setenv("HF_TOKEN", "do-not-leak")
    env = worker_environment(bfcl_install, tmp_path)
    assert set(env) == {"PATH", "HOME", "TMPDIR", "LANG", "BFCL_PROJECT_ROOT", "PYTHONPATH",
                        "PYTHONHASHSEED", "PYTHONUNBUFFERED", "TZ"}
    assert env["HOME"] == env["TMPDIR"] == env["BFCL_PROJECT_ROOT"] == str(tmp_path)
    with BfclWorker(bfcl_install) as worker:
        hello = worker.hello()
        home = worker.home
    assert hello["bfcl_eval"] == "2026.3.23"
    assert set(hello["environment_keys"]) == set(env)
    # BFCL writes into its project root: the worker's private folder, not the kit cache
    assert hello["project_root"] == str(home) and not home.is_relative_to(bfcl_install.site_dir)


def test_worker_reports_refused_operations(bfcl_worker):
    with pytest.raises(BfclWorkerError, match="unknown operation"):
        bfcl_worker.call("os_system", cmd="true")
    with pytest.raises(BfclWorkerError, match="unknown multi_turn_base episode"):
        bfcl_worker.system_prompt("multi_turn_base_9999")
    assert bfcl_worker.hello()["bfcl_eval"] == "2026.3.23"  # still serving


def test_worker_that_cannot_start_is_reported(bfcl_install, tmp_path):
    worker = BfclWorker(bfcl_install, python=str(tmp_path / "no-such-python"))
    with pytest.raises(BfclWorkerError, match="cannot start the BFCL worker"):
        worker.hello()


def test_worker_that_exits_is_reported(bfcl_install, tmp_path):
    false = shutil.which("false")
    assert false
    worker = BfclWorker(bfcl_install, python=false, timeout_s=20)
    with pytest.raises(BfclWorkerError, match="exited"):
        worker.hello()


def test_worker_that_hangs_is_killed_after_the_timeout(bfcl_install, tmp_path):
    silent = tmp_path / "silent-python"
    silent.write_text("#!/bin/sh\nexec sleep 60\n")
    silent.chmod(0o755)
    worker = BfclWorker(bfcl_install, python=str(silent), timeout_s=0.2)
    with pytest.raises(BfclWorkerError, match="no answer"):
        worker.hello()
    with pytest.raises(BfclWorkerError, match="has ended .timed out"):
        worker.hello()


def test_fresh_install_into_an_empty_cache(tmp_path):
    # Runs pip for real (PyPI or pip's own cache); the same path `kit workloads install bfcl` takes.
    said: list[str] = []
    install = ensure_bfcl(tmp_path, say=said.append)
    assert said[0].startswith(f"Installing BFCL {BFCL_VERSION} into {tmp_path / 'bfcl' / 'site'} once")
    assert said[-1] == f"BFCL {BFCL_VERSION} installed."
    steps = [line for line in said if line.startswith("  pip: ")]
    assert any(line.startswith("  pip: Downloading bfcl_eval-") for line in steps)  # what it fetches, with sizes
    (done,) = [line for line in steps if line.startswith("  pip: Successfully installed ")]
    assert all(pin.replace("==", "-") in done for pin in BFCL_PINS)
    assert ensure_bfcl(tmp_path, say=said.append) and len(said) == len(steps) + 2  # installed: nothing more said
    assert install.site_dir == tmp_path / "bfcl" / "site"
    assert (install.site_dir / "bfcl_eval").is_dir()
    assert not list((tmp_path / "bfcl").glob("site.partial-*"))
    assert install.dataset_sha256 == DATASET_SHA256
    dists = sorted(p.name for p in install.site_dir.glob("*.dist-info"))
    assert len(dists) == len(BFCL_PINS)  # nothing beyond the pins was installed
    assert ensure_bfcl(tmp_path, install=False).site_dir == install.site_dir


def test_an_ended_worker_is_not_silently_restarted(bfcl_install):
    worker = BfclWorker(bfcl_install)
    with worker:
        assert worker.hello()["bfcl_eval"] == "2026.3.23"
    with pytest.raises(BfclWorkerError, match="has ended"):
        worker.execute("p", "multi_turn_base_0", ["pwd()"])


def test_each_pip_step_is_shown_as_it_happens_and_a_failure_names_pips_last_words(tmp_path):
    """pip as the kit runs it (`python -m pip install ...`), played by a script that prints pip's lines one at a
    time: each step reaches `say` before pip ends, and its failure is one error with pip's own output."""
    fake, shown, seen = tmp_path / "python", tmp_path / "shown", tmp_path / "seen-while-running"
    fake.write_text("#!/bin/sh\n"
                    "echo 'Collecting bfcl-eval==2026.3.23'\n"
                    "echo '  Downloading bfcl_eval-2026.3.23-py3-none-any.whl (12.3 MB)'\n"
                    "echo 'some detail pip prints'\n"
                    f"i=0; while [ ! -e '{shown}' ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i + 1)); done\n"
                    f"if [ -e '{shown}' ]; then touch '{seen}'; fi\n"  # the step reached `say` while pip still ran
                    "echo 'ERROR: Could not install packages due to an OSError: no space left' >&2\n"
                    "exit 1\n")
    fake.chmod(0o755)
    said: list[str] = []

    def say(line: str) -> None:
        said.append(line)
        if line.startswith("  pip: Downloading"):
            shown.touch()

    with pytest.raises(KitError) as failed:
        ensure_bfcl(tmp_path / "cache", python=str(fake), say=say)
    assert said[0].startswith(f"Installing BFCL {BFCL_VERSION}") and said[1:] == [
        "  pip: Collecting bfcl-eval==2026.3.23", "  pip: Downloading bfcl_eval-2026.3.23-py3-none-any.whl (12.3 MB)"]
    assert seen.exists()  # shown while pip was still running (it waits up to 10 s for that), not after it ended
    assert failed.value.line().startswith("installing BFCL failed (pip exit 1): Collecting bfcl-eval==2026.3.23")
    assert "no space left" in failed.value.line() and "retry `kit workloads install bfcl`" in failed.value.line()
    assert not list((tmp_path / "cache" / "bfcl").glob("site*"))  # nothing half-installed is left
