"""Model files reach a Ray task by sha256, never by a shared disk (docs/ray.md): on its node a task takes the
file with the run's sha256 at the recorded path, in the node's own model cache, or the registry's; where the
node has none, the driver ships its copy through Ray's object store (chunks, put once per run) and the node
keeps it in its model cache, under its sha256, only once the sha256 of what arrived is the recorded one.
Derived sweep formats travel the same way (each format's provider records its file's sha256)."""

from __future__ import annotations

import hashlib
import re
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from filelock import FileLock

from kit.core.atomic_file import publish, staging_path
from kit.core.errors import ConfigError, KitError
from kit.models.fetch import default_cache_dir, ensure_model
from kit.models.hashing import HashCache
from kit.models.registry import SHA256_PATTERN, load_registry

CHUNK_BYTES = 64 * 2**20  # one object of the store per chunk: the driver never holds a whole model in memory


@dataclass(frozen=True)
class Shipment:
    """A model file in Ray's object store: its sha256, size, file suffix and chunks (ObjectRefs, in order)."""

    sha256: str
    size: int
    suffix: str
    chunks: tuple[Any, ...]


class NeedsModel(ConfigError):
    """This node has no file with the run's sha256: the driver is asked to ship it."""

    def __init__(self, path: Path, sha256: str):
        super().__init__(f"node {socket.gethostname()} has no model file with sha256 {sha256[:12]}… at {path} or in "
                         "its model cache", "the driver ships it through Ray's object store")
        self.path, self.sha256 = path, sha256


def _hashes() -> HashCache:
    """The sha256 memo of the node's model cache, for every file it hashes: a run's recorded model path names a
    folder the kit did not make (a user's, or one a stranger's manifest chose), so no side file goes there."""
    return HashCache.in_folder(default_cache_dir())


def shipped_path(sha256: str, suffix: str = ".gguf") -> Path:
    """Where a shipped model is kept in this machine's model cache (KIT_CACHE_DIR/models/by-sha256). The sha256
    and the suffix come from a run folder's manifest, which may be a stranger's: a name that is not 64 hex digits
    is refused, an odd suffix becomes .gguf, so the path stays inside the cache."""
    if not re.fullmatch(SHA256_PATTERN, sha256):
        raise ConfigError(f"the run's model sha256 {sha256[:70]!r} is not 64 lowercase hex digits",
                          "the run folder's manifest was altered; run the protocol again")
    if not re.fullmatch(r"\.[A-Za-z0-9_-]{1,16}", suffix):
        suffix = ".gguf"
    return default_cache_dir() / "by-sha256" / f"{sha256}{suffix}"


def local_copy(path: Path, sha256: str) -> Path | None:
    """This machine's file with `sha256`: at `path`, shipped here before, or the registry's (its model cache,
    an installed copy, or fetched); None where it has none."""
    for candidate in (path, shipped_path(sha256, path.suffix or ".gguf")):
        if candidate.is_file() and _hashes().sha256(candidate) == sha256:
            return candidate
    entry = load_registry().find_by_sha256(sha256)
    if entry is None:
        return None
    try:
        return ensure_model(entry.name).path
    except KitError:  # e.g. a node without internet: shipped instead
        return None


def node_model(path: Path, sha256: str | None, shipment: Shipment | None = None) -> Path:
    """The run's model file on this node, verified by sha256: its own copy, else the shipment the driver sent
    (NeedsModel when there is neither)."""
    if sha256 is None:
        raise ConfigError(f"the run's model {path} has no recorded sha256, so a node cannot verify its copy",
                          "run it with a model the kit hashed (a registry name or a GGUF path)")
    if (found := local_copy(path, sha256)) is not None:
        return found
    if shipment is None or shipment.sha256 != sha256:
        raise NeedsModel(path, sha256)
    return receive(shipment)


def ship(path: Path, sha256: str) -> Shipment:
    """On the driver: its copy of the model with `sha256` put into the object store, chunk by chunk."""
    found = local_copy(path, sha256)
    if found is None:
        raise ConfigError(f"no node has the model with sha256 {sha256[:12]}…, and neither has this machine (not at "
                          f"{path}, not in its model cache)", "put the file at its path on one machine, then resume")
    chunks = []
    with found.open("rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            chunks.append(ray.put(chunk))
    return Shipment(sha256, found.stat().st_size, found.suffix or ".gguf", tuple(chunks))


def receive(shipment: Shipment) -> Path:
    """On a node: the shipped file written into its model cache, kept only if its sha256 is the shipment's.
    The tasks of one node receive one at a time (a lock beside its cache): a node's first task writes the
    file, the ones that asked with it take that file, so a node receives a model at most once."""
    target = shipped_path(shipment.sha256, shipment.suffix)
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(target.parent.parent / ".by-sha256.lock"):
        if target.is_file() and _hashes().sha256(target) == shipment.sha256:
            return target  # received by another task of this node meanwhile
        return _write(shipment, target)


def _write(shipment: Shipment, target: Path) -> Path:
    staging = staging_path(target.parent, target.name)
    digest, size = hashlib.sha256(), 0
    try:
        with staging.open("wb") as out:
            for ref in shipment.chunks:
                data = ray.get(ref)
                digest.update(data)
                size += len(data)
                out.write(data)
        if digest.hexdigest() != shipment.sha256 or size != shipment.size:
            raise ConfigError(f"the model shipped to node {socket.gethostname()} has sha256 "
                              f"{digest.hexdigest()[:12]}… ({size} bytes), not the run's {shipment.sha256[:12]}… "
                              f"({shipment.size} bytes): refused", "check the driver's copy of the model, then resume")
        publish(staging, target)
    finally:
        staging.unlink(missing_ok=True)
    _hashes().remember(target, shipment.sha256)
    return target
