"""One run folder, one writer (kit.run.lock): while a kit holds a run folder, a second `kit resume` or
`kit bundle` of it is refused in one line naming the holder, and nothing in the folder changes; the lock
goes with its holder however it ends, and a writer keeps a disk reserve for its last manifest writes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kit.run import lock as run_lock
from kit.core.errors import KitError
from tests.bundle.kit_cli import run_here as kit
from tests.test_cli_errors import one_line_error

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "records_v1" / "demo-20261201-070851"
HOLD = ("import sys, time; from pathlib import Path; from kit.run import lock as run_lock\n"
        "with run_lock.locked(Path(sys.argv[1]), 'resume', run_lock.RESERVE_BYTES):\n"
        "    print('held', flush=True); time.sleep(120)\n")


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def held(tmp_path):
    """A copy of a finished run folder, held by another process (as a `kit resume` would hold it)."""
    run_dir = shutil.copytree(FIXTURE, tmp_path / FIXTURE.name)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert holder.stdout.readline().strip() == "held"
    yield run_dir, holder.pid
    holder.kill()
    holder.wait()


def test_a_second_kit_on_a_held_run_folder_is_refused_in_one_line_and_changes_nothing(held, tmp_path):
    run_dir, pid = held
    before = snapshot(run_dir)
    for args in (["resume", str(run_dir)], ["bundle", str(run_dir), "-o", str(tmp_path / "b.tar.gz")]):
        one_line_error(kit(*args), f"{run_dir} is in use by pid {pid}, kit resume: a run folder has one writer")
    assert snapshot(run_dir) == before and not (tmp_path / "b.tar.gz").exists()
    with pytest.raises(run_lock.RunFolderBusy, match=f"pid {pid}"):
        with run_lock.locked(run_dir, "run"):
            pass


def test_the_lock_goes_with_its_holder_however_it_ends(held):
    run_dir, pid = held
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    assert (run_dir / run_lock.LOCK).stat().st_size > run_lock.RESERVE_BYTES  # left behind by kill -9, reserve too
    with run_lock.locked(run_dir, "resume") as lock:
        assert lock is not None and (run_dir / run_lock.LOCK).read_bytes() == f"{os.getpid()} resume\n".encode()
    assert not (run_dir / run_lock.LOCK).exists()


def test_a_writer_keeps_a_reserve_and_gives_it_back(tmp_path):
    with run_lock.locked(tmp_path, "run", run_lock.RESERVE_BYTES) as lock:
        path = tmp_path / run_lock.LOCK
        assert path.stat().st_blocks * 512 >= run_lock.RESERVE_BYTES
        lock.give_back_reserve()
        assert path.read_bytes() == f"{os.getpid()} run\n".encode()
    assert not path.exists()


def test_a_reader_of_no_run_folder_goes_on_without_the_lock_and_a_linked_lock_file_is_refused(tmp_path):
    with run_lock.locked(tmp_path, "bundle", writer=False) as lock:  # no manifest.json: not a run folder
        assert lock is None and not any(tmp_path.iterdir())
    with pytest.raises(KitError, match="symbolic link"):
        (tmp_path / run_lock.LOCK).symlink_to(tmp_path / "elsewhere")
        with run_lock.locked(tmp_path, "run"):
            pass
    assert not (tmp_path / "elsewhere").exists()


def test_a_disk_without_room_for_the_reserve_is_refused_before_the_run(tmp_path):
    folder = tmp_path / "tiny"
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(folder)],
                      capture_output=True, check=False).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        with pytest.raises(KitError, match=f"the disk holding {folder} has less than {run_lock.RESERVE_BYTES} bytes"):
            with run_lock.locked(folder, "run", run_lock.RESERVE_BYTES):
                pass
        assert not any(folder.iterdir())
    finally:
        subprocess.run(["umount", str(folder)], check=True)
