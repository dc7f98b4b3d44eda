"""Where the kit keeps things: its cache (models, engine builds) and the outputs folder."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """The kit's cache (`KIT_CACHE_DIR`, else `~/.cache/kit`), created on first use."""
    root = Path(os.environ.get("KIT_CACHE_DIR") or Path.home() / ".cache" / "kit")
    root.mkdir(parents=True, exist_ok=True)
    return root


def confine_library_caches() -> None:
    """Libraries that keep a cache of their own (matplotlib's font list, also imported by `arch`) keep it
    in the kit's cache, not under the home folder: the kit writes only to its outputs and cache. Call it
    before importing them; a person's own MPLCONFIGDIR is kept."""
    os.environ.setdefault("MPLCONFIGDIR", str(cache_dir() / "matplotlib"))


def outputs_dir() -> Path:
    """Default parent of run folders: `KIT_OUTPUTS`, else `outputs/` of the checkout, else `./outputs`."""
    env = os.environ.get("KIT_OUTPUTS")
    if env:
        return Path(env)
    repo_outputs = REPO_ROOT / "outputs"
    return repo_outputs if repo_outputs.is_dir() else Path.cwd() / "outputs"


def protocols_dir() -> Path:
    """The protocol files shipped with the kit (`protocols/` of the checkout)."""
    return REPO_ROOT / "protocols"


def shown_path(path: Path) -> str:
    """A path as a command to type here: relative to the current folder when inside it, else absolute."""
    absolute = Path(os.path.abspath(path))
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)
