"""Model files: a registry of GGUF files pinned by sha256, verified fetching, format conversion.

Public surface (conversion lives in `kit.models.dequant` / `kit.models.derived`, imported on
demand because it pulls in numpy and gguf):

    ensure_model(name_or_path, cache_dir=None, progress=None) -> ModelFile
    load_registry(path=None) -> Registry
    default_cache_dir() -> Path
"""

from kit.models.fetch import ModelFile, default_cache_dir, ensure_model
from kit.models.progress import FetchProgress
from kit.models.registry import DEFAULT_MODEL, Registry, load_registry

__all__ = ["DEFAULT_MODEL", "FetchProgress", "ModelFile", "Registry", "default_cache_dir", "ensure_model", "load_registry"]
