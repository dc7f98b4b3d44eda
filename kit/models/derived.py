"""Derived formats: a registry model re-stored as F16 / Q8_0 / Q4_0 / ... next to it in the cache.

`ensure_format` converts once and records provenance in a small JSON file beside the result
(source sha256, target, produced sha256, gguf version); a later call reuses the file only if that
record matches and the file still hashes to the recorded digest.
"""

from __future__ import annotations

import json
from importlib import metadata
from pathlib import Path

from kit.core.atomic_file import write_json_atomic
from kit.models.dequant import convert, target_types
from kit.models.fetch import ModelFile
from kit.models.hashing import HashCache
from kit.models.progress import Progress


def derived_file_name(source: ModelFile, target: str) -> str:
    """`<stem>-deq-F16.gguf` for F16 (the paper's naming), `<stem>-req-<T>.gguf` for quantized targets."""
    stem = source.path.name.removesuffix(".gguf")
    tag = "deq" if target == "F16" else "req"
    return f"{stem}-{tag}-{target}.gguf"


def _gguf_version() -> str:
    try:
        return metadata.version("gguf")
    except metadata.PackageNotFoundError:
        return "unknown"


def ensure_format(source: ModelFile, target: str, cache_dir: Path, progress: Progress | None = None) -> ModelFile:
    """`source` converted to `target` in `cache_dir` (reused when its provenance record matches)."""
    target = target.upper()
    target_types(target)  # refuses K-quants and unknown names with a fix
    out = cache_dir / derived_file_name(source, target)
    record_path = out.with_name(out.name + ".json")
    hashes = HashCache.in_folder(cache_dir)
    name = f"{source.name or source.path.name}@{target}"
    if out.exists() and record_path.exists():
        try:
            record = json.loads(record_path.read_text(encoding="utf-8"))
        except ValueError:
            record = {}
        if record.get("source_sha256") == source.sha256 and record.get("target") == target:
            digest = hashes.sha256(out)
            if digest == record.get("sha256"):
                return ModelFile(out, digest, name, "derived (cached)")
    digest = convert(source.path, out, target, progress)
    hashes.remember(out, digest)
    record = {"source": source.path.name, "source_sha256": source.sha256, "target": target,
              "sha256": digest, "converter": f"kit.models.dequant (gguf {_gguf_version()})"}
    write_json_atomic(record_path, record, indent=1)
    return ModelFile(out, digest, name, "derived")
