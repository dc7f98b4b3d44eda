"""One run folder, one writer: an OS lock (fcntl.flock) on the lock file `.kit-lock` in the run folder,
held by `kit run`, `kit resume` and `kit bundle` for as long as they use the folder.

Two `kit resume` of one folder at once would interleave their records and each rewrite the manifest;
a `kit bundle` during a resume would pack half a pass. The second one is refused in one line naming
who holds the folder (the holder's pid and command, written in the lock file). The OS releases the
lock when its holder exits, however it ends (a crash or `kill -9` included), so a stale lock file
never blocks anyone; the file itself stays (removing it would race a waiting kit) and is never
bundled.

A writer (run, resume) also keeps a reserve: RESERVE_BYTES allocated in the lock file when the lock
is taken (refused then if the disk lacks them). When the run ends, however it ends, the reserve is
given back first, so that a run stopped by a full disk can still write its final manifest (status,
true cause), and `kit resume` can go on once space is freed.
"""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from kit.core.errors import KitError
from kit.core.owned_file import open_owned
from kit.core.paths import RunPaths

LOCK = ".kit-lock"
RESERVE_BYTES = 1 << 20  # room for the final manifest writes of a run the disk filled up


class RunFolderBusy(KitError):
    """Another kit process is using the run folder."""


class Held:
    """A held lock on a run folder; `give_back_reserve()` frees the disk space kept for the run's end."""

    def __init__(self, fd: int, run_dir: Path, header: int):
        self.fd, self.run_dir, self._header = fd, run_dir, header

    def give_back_reserve(self) -> None:
        try:
            os.ftruncate(self.fd, self._header)
        except OSError:
            pass  # nothing to give back, or the file is gone: the final writes try anyway


def holder(run_dir: Path) -> str:
    """Who the lock file says holds the folder (`pid N, kit COMMAND`), or `another kit process`."""
    try:
        with (run_dir / LOCK).open("rb") as fh:
            pid, _, doing = fh.read(200).split(b"\0", 1)[0].decode("ascii", "replace").strip().partition(" ")
    except OSError:
        return "another kit process"
    return f"pid {pid}, kit {doing}" if pid.isdigit() and doing.isprintable() else "another kit process"


@contextmanager
def locked(run_dir: Path, doing: str, reserve: int = 0, *, writer: bool = True) -> Iterator[Held | None]:
    """Hold the run folder's lock while the block runs, with `reserve` bytes kept for its end; raise
    RunFolderBusy when another process holds it. A reader (`writer=False`, kit bundle) of a folder it
    cannot write to goes on without the lock (None): nothing can write there through this kit's user."""
    path = run_dir / LOCK
    if not writer and not RunPaths(run_dir).manifest.is_file():  # not a run folder: its reader refuses it
        yield None
        return
    try:
        fd = _open_locked(path, run_dir)
    except PermissionError as exc:
        if writer:
            raise KitError(f"cannot make the lock file {path} ({exc.strerror})",
                           "run the kit as a user who can write to the run folder") from exc
        yield None
        return
    try:
        header = f"{os.getpid()} {doing}\n".encode("ascii", "replace")
        os.ftruncate(fd, 0)  # a file a killed kit left: its holder line and reserve go
        os.pwrite(fd, header, 0)
        if reserve:
            _reserve(fd, len(header), reserve, run_dir)
        yield Held(fd, run_dir, len(header))
    finally:
        try:
            os.unlink(path)  # while still held: a kit that opened it before checks it is still the one named
        except OSError:
            os.ftruncate(fd, 0)
        os.close(fd)  # closing the last descriptor releases the lock


def _open_locked(path: Path, run_dir: Path) -> int:
    """A descriptor of the lock file at `path`, locked; RunFolderBusy when another process holds it.
    PermissionError when the folder cannot be written to."""
    for _ in range(100):
        try:  # a lock file a stranger's folder holds (a link, another user's) is refused before it is written
            fd = open_owned(path, os.O_RDWR | os.O_CREAT)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                raise PermissionError(exc.errno, exc.strerror, str(path)) from exc
            raise KitError(f"cannot open the lock file {path} ({exc.strerror or exc})",
                           "check that the run folder is one the kit wrote and that you can write to it") from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise RunFolderBusy(f"{run_dir} is in use by {holder(run_dir)}: a run folder has one writer at a time "
                                f"(kit run, resume and bundle each hold it)", "wait until it ends, then try again"
                                ) from None
        try:
            same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # its holder removed it as we opened it: open the one there now
    raise KitError(f"{path} keeps changing", "check that nothing else removes files in the run folder")


def _reserve(fd: int, offset: int, size: int, run_dir: Path) -> None:
    try:
        os.posix_fallocate(fd, offset, size)
    except OSError as exc:
        os.ftruncate(fd, offset)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise KitError(f"the disk holding {run_dir} has less than {size} bytes free",
                           "free some space, then try again") from exc
        if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL):  # a file system without fallocate: no reserve
            raise


@contextmanager
def readers(run_dirs: Iterable[Path], doing: str) -> Iterator[None]:
    """Each run folder's lock held while a reader (kit bundle) uses them (see `locked`, writer=False)."""
    with ExitStack() as stack:
        for run_dir in run_dirs:
            stack.enter_context(locked(run_dir, doing, writer=False))
        yield
