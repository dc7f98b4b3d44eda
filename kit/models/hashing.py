"""Streamed sha256 of model files, with a small sidecar cache so big files are not rehashed.

`HashCache` keeps one JSON file (`hashes.json` in the model cache folder) that maps a file's
absolute path to the (size, mtime_ns) it had when it was hashed and the sha256 found. A lookup
trusts the stored digest only when size and mtime still match; anything else is rehashed. The
sidecar is rewritten atomically; a lost update between two processes only costs a rehash.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from kit.core.atomic_file import write_json_atomic

CHUNK_BYTES = 4 * 1024 * 1024
SIDECAR_NAME = "hashes.json"

ByteProgress = Callable[[int, int | None], None]
"""Called with (bytes done, bytes total or None) while a stream is read."""


def sha256_stream(stream: BinaryIO, total: int | None = None, on_bytes: ByteProgress | None = None) -> str:
    """Hex sha256 of everything left in `stream`, read in fixed-size chunks."""
    digest = hashlib.sha256()
    done = 0
    while chunk := stream.read(CHUNK_BYTES):
        digest.update(chunk)
        done += len(chunk)
        if on_bytes is not None:
            on_bytes(done, total)
    return digest.hexdigest()


def sha256_file(path: Path, on_bytes: ByteProgress | None = None) -> str:
    """Hex sha256 of a file, streamed (never loads the file whole)."""
    with open(path, "rb") as stream:
        return sha256_stream(stream, total=os.fstat(stream.fileno()).st_size, on_bytes=on_bytes)


class HashCache:
    """The sidecar (path, size, mtime) → sha256 memo kept in one JSON file."""

    def __init__(self, sidecar: Path):
        self.sidecar = sidecar

    @classmethod
    def in_folder(cls, folder: Path) -> HashCache:
        return cls(folder / SIDECAR_NAME)

    def _load(self) -> dict[str, dict]:
        try:
            data = json.loads(self.sidecar.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _store(self, data: dict[str, dict]) -> None:
        write_json_atomic(self.sidecar, data, indent=1, sort_keys=True)

    def lookup(self, path: Path) -> str | None:
        """The remembered sha256 of `path` if the file is unchanged since it was hashed, else None."""
        entry = self._load().get(str(Path(path).resolve()))
        if not isinstance(entry, dict):
            return None
        try:
            stat = os.stat(path)
        except OSError:
            return None
        if entry.get("size") == stat.st_size and entry.get("mtime_ns") == stat.st_mtime_ns:
            digest = entry.get("sha256")
            return digest if isinstance(digest, str) else None
        return None

    def remember(self, path: Path, digest: str) -> None:
        """Record that `path`, as it is now on disk, hashes to `digest`."""
        stat = os.stat(path)
        data = self._load()
        data[str(Path(path).resolve())] = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}
        self._store(data)

    def forget(self, path: Path) -> None:
        data = self._load()
        if data.pop(str(Path(path).resolve()), None) is not None:
            self._store(data)

    def sha256(self, path: Path, on_bytes: ByteProgress | None = None) -> str:
        """The file's sha256, from the sidecar when still valid, otherwise hashed and remembered."""
        known = self.lookup(path)
        if known is not None:
            return known
        digest = sha256_file(path, on_bytes=on_bytes)
        self.remember(path, digest)
        return digest
