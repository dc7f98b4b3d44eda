"""Writing into a file that is already there: only one the kit could have made (docs/security.md, rule 2).

A run folder may be a stranger's (a tarball, a copied folder), and a file in it may be a hard link to a
file elsewhere, which the kit would truncate and fill if it opened the name for writing. So the kit writes
a file in a folder it did not make in one of two ways only:

- a whole file is made anew under a staging name and renamed into place (`kit.core.atomic_file`): the
  rename drops whatever the name was, the file it led to stays as it was;
- a file the kit goes on writing (records, a server's log, the run-folder lock) is opened here, with
  `open_append` or `check_owned`: never through a symbolic link (O_NOFOLLOW), without blocking on a FIFO,
  and checked on the opened descriptor (fstat: the file checked is the file written) before one byte is
  written: a regular file, with one name (st_nlink == 1), owned by this user. Anything else is refused in
  one line naming the file.

tests/test_architecture.py fails on a write anywhere else in `kit/` that is not on its reviewed list.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

from kit.core.errors import KitError
from kit.core.regular_file import file_type, open_checked

FIX = ("the kit writes only into files it made: remove that file (or use a copy of the run folder in which every "
       "file is a plain copy), then try again")


class NotOurFile(KitError):
    """A file the kit would write into is not one it could have made."""


def _refuse_unowned(info: os.stat_result, path: Path) -> None:
    """Refuse (NotOurFile) the file `info` describes unless it is a regular file with one name, of this user."""
    if not stat.S_ISREG(info.st_mode):
        raise NotOurFile(f"{path} is {file_type(info)}, not a regular file the kit made; nothing was written to it",
                         FIX)
    if info.st_nlink != 1:
        raise NotOurFile(f"{path} has {info.st_nlink} names (a hard link: the same file is also elsewhere); "
                         "nothing was written to it", FIX)
    if info.st_uid != os.geteuid():
        raise NotOurFile(f"{path} belongs to user id {info.st_uid}, not to this user ({os.geteuid()}); nothing "
                         "was written to it", FIX)


def check_owned(fd: int, path: Path) -> None:
    """Refuse (NotOurFile) the opened `fd` of `path` unless it is a regular file with one name, of this user."""
    _refuse_unowned(os.fstat(fd), path)


def open_owned(path: Path, flags: int, mode: int = 0o644) -> int:
    """A descriptor of `path` opened with `flags` (with O_CREAT: made where it is missing), never through a
    symbolic link, checked by `check_owned` (kit.core.regular_file.open_checked); flags must not truncate
    (O_TRUNC): truncate after the check."""
    if flags & os.O_TRUNC:
        raise ValueError("open_owned never truncates on open: the file is checked first")
    try:
        return open_checked(path, flags, lambda info: _refuse_unowned(info, path), mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotOurFile(f"{path} is a symbolic link; the kit never writes through a link", FIX) from exc
        if exc.errno == errno.ENXIO:  # O_NONBLOCK open of a FIFO for writing with no reader
            raise NotOurFile(f"{path} is a FIFO (named pipe), not a regular file the kit made", FIX) from exc
        raise


def open_append(path: Path) -> BinaryIO:
    """`path` opened to append bytes (made where it is missing), when it is a file the kit could have made."""
    return os.fdopen(open_owned(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab")
