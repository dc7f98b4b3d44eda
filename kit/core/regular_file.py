"""Opening a file someone handed the kit: a regular file, never through a symbolic link, never a
device, FIFO or socket, and never bigger than the caller's limit.

`Path.read_text` would follow a link to a credential file and copy it into a run folder or bundle,
read /dev/zero until memory runs out, and block forever on a FIFO. `open_regular` opens without
following a final symbolic link (O_NOFOLLOW) and without blocking (O_NONBLOCK, so a FIFO's open
returns at once), then checks what it opened (fstat on the open descriptor, so the file checked is
the file read) and its size. Every refusal is a ConfigError naming the file and what it is.
"""

from __future__ import annotations

import fcntl
import os
import stat
from pathlib import Path
from typing import BinaryIO, Callable

from kit.core.errors import ConfigError

FILE_TYPES = {stat.S_IFDIR: "a folder", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
              stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket", stat.S_IFLNK: "a symbolic link"}


def file_type(info: os.stat_result) -> str:
    """What a file that is not a regular one is, in words ("a FIFO (named pipe)")."""
    return FILE_TYPES.get(stat.S_IFMT(info.st_mode), "not a regular file")


def open_checked(path: Path, flags: int, check: Callable[[os.stat_result], None], mode: int = 0o644) -> int:
    """A descriptor of `path` opened with `flags`, never through a final symbolic link (O_NOFOLLOW: ELOOP),
    without blocking on a FIFO (O_NONBLOCK, cleared once checked) and not inherited (O_CLOEXEC); `check` is
    handed the opened descriptor's fstat (the file checked is the file used) and raises to refuse it, and
    the descriptor is closed on any refusal or error. OSError of the open itself is the caller's to word.
    Only this module and kit.core.owned_file (which writes) call it."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    try:
        check(os.fstat(fd))
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path: Path, what: str, max_bytes: int, fix: str) -> BinaryIO:
    """`path` opened for binary reading, when it is a regular file of at most `max_bytes` bytes that is
    not a symbolic link; else ConfigError(what it is instead, `fix`)."""
    if path.is_symlink():
        raise ConfigError(f"{what} {path} is a symbolic link; the kit reads only regular files, never through "
                          "a link", fix)

    def check(info: os.stat_result) -> None:
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{what} {path} is {file_type(info)}, not a regular file", fix)
        if info.st_size > max_bytes:
            raise ConfigError(f"{what} {path} is {info.st_size} bytes, over the {max_bytes}-byte limit", fix)

    try:
        fd = open_checked(path, os.O_RDONLY, check)
    except FileNotFoundError as exc:
        raise ConfigError(f"{what} {path} is missing", fix) from exc
    except OSError as exc:
        raise ConfigError(f"{what} {path} cannot be opened ({exc.strerror or exc})", fix) from exc
    return os.fdopen(fd, "rb")


def read_regular(path: Path, what: str, max_bytes: int, fix: str) -> bytes:
    """The bytes of a regular file (see `open_regular`), at most `max_bytes` of them even if it grows."""
    with open_regular(path, what, max_bytes, fix) as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ConfigError(f"{what} {path} grew past the {max_bytes}-byte limit while it was read", fix)
    return data
