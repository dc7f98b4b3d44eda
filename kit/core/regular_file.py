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
from typing import BinaryIO

from kit.core.errors import ConfigError

_FILE_TYPES = {stat.S_IFDIR: "a folder", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFIFO: "a FIFO (named pipe)", stat.S_IFSOCK: "a socket"}


def open_regular(path: Path, what: str, max_bytes: int, fix: str) -> BinaryIO:
    """`path` opened for binary reading, when it is a regular file of at most `max_bytes` bytes that is
    not a symbolic link; else ConfigError(what it is instead, `fix`)."""
    if path.is_symlink():
        raise ConfigError(f"{what} {path} is a symbolic link; the kit reads only regular files, never through "
                          "a link", fix)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise ConfigError(f"{what} {path} is missing", fix) from exc
    except OSError as exc:
        raise ConfigError(f"{what} {path} cannot be opened ({exc.strerror or exc})", fix) from exc
    try:
        info = os.fstat(fd)
        kind = stat.S_IFMT(info.st_mode)
        if kind != stat.S_IFREG:
            raise ConfigError(f"{what} {path} is {_FILE_TYPES.get(kind, 'not a regular file')}, not a regular file", fix)
        if info.st_size > max_bytes:
            raise ConfigError(f"{what} {path} is {info.st_size} bytes, over the {max_bytes}-byte limit", fix)
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path, what: str, max_bytes: int, fix: str) -> bytes:
    """The bytes of a regular file (see `open_regular`), at most `max_bytes` of them even if it grows."""
    with open_regular(path, what, max_bytes, fix) as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise ConfigError(f"{what} {path} grew past the {max_bytes}-byte limit while it was read", fix)
    return data
