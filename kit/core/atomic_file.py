"""Atomic placement of produced files: write under a hidden staging name, then rename into place.

A reader never sees a half-written file (a model, a manifest, a results table) under its final name,
and a failed write leaves nothing behind but a staging file that is deleted on the error path.
`write_json_atomic` is the one way the kit replaces a JSON file.

This is also how the kit never writes through a file it did not make (docs/security.md, rule 2): the
staging file is created anew (mkstemp: O_CREAT|O_EXCL, never through a link), and the rename replaces
the name in the folder, never the file a name pointed to: a hard or symbolic link a stranger's run
folder holds under that name is dropped, and the file it led to is left as it was. Appending to a file
that exists goes through `kit.core.owned_file` instead.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

STAGING_SUFFIX = ".partial"  # a hidden file ending so is unfinished: never read, never bundled


def staging_path(folder: Path, final_name: str) -> Path:
    """A new empty hidden file in `folder` (same file system as the final name)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=folder, prefix=f".{final_name}-", suffix=STAGING_SUFFIX)
    os.close(fd)
    return Path(name)


def publish(staging: Path, final: Path) -> Path:
    """Give `staging` the usual file mode (mkstemp makes it private) and rename it to `final`."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o666 & ~umask)
    os.replace(staging, final)
    return final


@contextmanager
def _synced(staging: Path, mode: str) -> Iterator[IO[Any]]:
    """`staging` open for writing (text "w", UTF-8 with newlines as written, or binary "wb"), flushed and
    fsynced once the block ends without an error."""
    encoding = None if "b" in mode else "utf-8"
    with staging.open(mode, encoding=encoding, newline=None if encoding is None else "") as fh:
        yield fh
        fh.flush()
        os.fsync(fh.fileno())


@contextmanager
def writing(path: Path, mode: str = "w") -> Iterator[IO[Any]]:
    """A new file (text "w", UTF-8 with newlines as written, or binary "wb") that replaces `path` once the
    block ends without an error, fsynced before the rename; on an error `path` is left as it was."""
    staging = staging_path(path.parent, path.name)
    try:
        with _synced(staging, mode) as fh:
            yield fh
        publish(staging, path)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` (UTF-8, newlines as given), fsynced before the rename, so a reader sees
    the old file or the new one, never a part."""
    with writing(path) as fh:
        fh.write(text)


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data`, as `write_text_atomic` does."""
    with writing(path, "wb") as fh:
        fh.write(data)


def create_private(path: Path, data: bytes) -> bool:
    """`path` made with `data`, readable by this user only, where no file of that name is: False (nothing
    written) when one is, made meanwhile by another process included (a link of a finished file, never a
    half-written one)."""
    staging = staging_path(path.parent, path.name)  # mkstemp: private
    try:
        with _synced(staging, "wb") as fh:
            fh.write(data)
        os.link(staging, path, follow_symlinks=False)
        return True
    except FileExistsError:
        return False
    finally:
        staging.unlink(missing_ok=True)


def write_json_atomic(path: Path, data: Any, *, indent: int = 2, sort_keys: bool = False) -> None:
    """Replace `path` with `data` as JSON (UTF-8, non-ASCII kept, a final newline), atomically."""
    write_text_atomic(path, json.dumps(data, indent=indent, ensure_ascii=False, sort_keys=sort_keys) + "\n")
