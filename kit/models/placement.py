"""Atomic placement of produced files: write under a hidden staging name, then rename into place.

A reader never sees a half-written model file under its final name, and a failed write leaves
nothing behind but a staging file that is deleted on the error path.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def staging_path(folder: Path, final_name: str) -> Path:
    """A new empty hidden file in `folder` (same file system as the final name)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=folder, prefix=f".{final_name}-", suffix=".partial")
    os.close(fd)
    return Path(name)


def publish(staging: Path, final: Path) -> Path:
    """Give `staging` the usual file mode (mkstemp makes it private) and rename it to `final`."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o666 & ~umask)
    os.replace(staging, final)
    return final
