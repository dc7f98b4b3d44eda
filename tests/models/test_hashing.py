"""Streamed sha256 and the sidecar (size, mtime) → sha256 cache."""

from __future__ import annotations

import hashlib
import os

from kit.models.hashing import HashCache, sha256_file


def test_sha256_file_matches_hashlib_across_chunks(tmp_path):
    data = os.urandom(9 * 1024 * 1024 + 17)  # more than two read chunks
    path = tmp_path / "blob"
    path.write_bytes(data)
    seen = []
    assert sha256_file(path, on_bytes=lambda done, total: seen.append((done, total))) == hashlib.sha256(data).hexdigest()
    assert seen[-1] == (len(data), len(data)) and len(seen) >= 3


def test_sidecar_is_trusted_only_while_size_and_mtime_match(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"first contents")
    cache = HashCache.in_folder(tmp_path / "cache")
    real = cache.sha256(path)
    assert real == hashlib.sha256(b"first contents").hexdigest()
    assert cache.lookup(path) == real
    assert (tmp_path / "cache" / "hashes.json").is_file()

    # A remembered digest is returned without rehashing: plant a different one and see it come back.
    cache.remember(path, "0" * 64)
    assert cache.sha256(path) == "0" * 64

    # Same size, new mtime: the memo is stale and the file is hashed again.
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert cache.lookup(path) is None
    assert cache.sha256(path) == real

    # New size: stale too.
    path.write_bytes(b"other contents, longer")
    assert cache.lookup(path) is None
    assert cache.sha256(path) == hashlib.sha256(b"other contents, longer").hexdigest()


def test_sidecar_survives_a_new_instance_and_a_corrupt_file(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"x" * 100)
    HashCache.in_folder(tmp_path).sha256(path)
    assert HashCache.in_folder(tmp_path).lookup(path) == hashlib.sha256(b"x" * 100).hexdigest()
    (tmp_path / "hashes.json").write_text("{not json", encoding="utf-8")
    assert HashCache.in_folder(tmp_path).lookup(path) is None
