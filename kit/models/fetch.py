"""Interim model resolution (replaced by the registry-backed fetcher)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kit.errors import ConfigError
from kit.paths import cache_dir
from kit.provenance import file_sha256

DEFAULT = "smollm2-135m-instruct-q4_1"


@dataclass(frozen=True)
class ModelFile:
    name: str
    path: Path
    sha256: str
    source: str


def ensure_model(name_or_path: str = DEFAULT, cache: Path | None = None, progress=None) -> ModelFile:
    path = Path(name_or_path)
    if name_or_path == DEFAULT:
        path = (cache or cache_dir()) / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.is_file():
        raise ConfigError(f"model file not found: {path}", "pass --model with the path of a GGUF file")
    return ModelFile(name=path.name, path=path, sha256=file_sha256(path), source="file")
