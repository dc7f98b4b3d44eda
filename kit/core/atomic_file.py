"""Atomic placement of produced files: write under a hidden staging name, then rename into place.

A reader never sees a half-written file (a model, a manifest, a results table) under its final name,
and a failed write leaves nothing behind but a staging file that is deleted on the error path.
`write_json_atomic` is the one way the kit replaces a JSON file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

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


def write_text_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` (UTF-8, newlines as given), fsynced before the rename, so a reader sees
    the old file or the new one, never a part."""
    staging = staging_path(path.parent, path.name)
    try:
        with staging.open("w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        publish(staging, path)
    except BaseException:
        staging.unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any, *, indent: int = 2, sort_keys: bool = False) -> None:
    """Replace `path` with `data` as JSON (UTF-8, non-ASCII kept, a final newline), atomically."""
    write_text_atomic(path, json.dumps(data, indent=indent, ensure_ascii=False, sort_keys=sort_keys) + "\n")
