"""Where the kit keeps things: its cache (models, engine builds), the outputs folder and the layout of a
run folder (RunPaths)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

REPO_ROOT = Path(__file__).resolve().parents[2]


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


@dataclass(frozen=True)
class RunPaths:
    """The layout of one run folder, in one place: the manifest, records/ (one `<pass>.jsonl` per pass,
    its episode lines beside it), results/, logs/, replay/ and analysis/. The `*_name` helpers give the
    relative names a manifest records (`records/<pass>.jsonl`); the properties give paths under `root`."""

    root: Path

    MANIFEST: ClassVar[str] = "manifest.json"
    RECORDS: ClassVar[str] = "records"
    SUPERSEDED: ClassVar[str] = f"{RECORDS}/superseded"  # the records of a pass run again (kept, never counted)
    IMPORTED: ClassVar[str] = f"{RECORDS}/imported"  # the files an imported run was made from, as they were
    RESULTS: ClassVar[str] = "results"
    LOGS: ClassVar[str] = "logs"
    REPLAY: ClassVar[str] = "replay"
    ANALYSIS: ClassVar[str] = "analysis"
    FINDINGS: ClassVar[str] = "findings.json"

    @staticmethod
    def records_name(pass_id: str) -> str:
        """The records file of a pass, as its manifest names it: `records/<pass>.jsonl`."""
        return f"{RunPaths.RECORDS}/{pass_id}.jsonl"

    @staticmethod
    def episodes_name(pass_id: str) -> str:
        """A pass's episode lines, as its manifest names them: `records/<pass>.episodes.jsonl`."""
        return f"{RunPaths.RECORDS}/{pass_id}.episodes.jsonl"

    @staticmethod
    def result_name(stem: str, suffix: str = ".json") -> str:
        """A results file, as a results table names it: `results/<stem>.json`."""
        return f"{RunPaths.RESULTS}/{stem}{suffix}"

    @property
    def manifest(self) -> Path:
        return self.root / self.MANIFEST

    @property
    def records(self) -> Path:
        return self.root / self.RECORDS

    @property
    def superseded(self) -> Path:
        return self.root / self.SUPERSEDED

    @property
    def imported(self) -> Path:
        return self.root / self.IMPORTED

    @property
    def results(self) -> Path:
        return self.root / self.RESULTS

    @property
    def logs(self) -> Path:
        return self.root / self.LOGS

    @property
    def replay(self) -> Path:
        return self.root / self.REPLAY

    @property
    def analysis(self) -> Path:
        """Where `kit analyze RUN_DIR` writes by default (its findings.json and tables)."""
        return self.root / self.ANALYSIS

    @property
    def findings(self) -> Path:
        return self.analysis / self.FINDINGS
