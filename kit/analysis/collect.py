"""Run folders given to `kit analyze`, recognised by what their manifests say they hold.

The manifest's protocol kind, looked up in the registry (kit.protocols.kinds), says through its
analysis entry which findings family a folder feeds. A folder is a *reset* run (the restored-state
control, or the GSM8K bridge when its items come from GSM8K), a *grid* run, or a *sweep cell*: a
grid-like folder whose manifest carries ``"sweep": {"format": ..., "history": k}`` (layout in
docs/analysis.md). A run whose manifest lists ``cells`` (the sweep and flag × order protocols: many
servers in one run) is read as one folder per cell, each seeing only its own passes. Anything else is
listed as skipped with its reason. VOID passes are never analysed; they are collected here with their
reasons.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kit.core.errors import KitError
from kit.engines import registry
from kit.record.manifest import Manifest, PassInfo, RunManifest, parsed
from kit.core.paths import RunPaths
from kit.protocols import kinds
from kit.record.files import DamagedRecords, RecordFile, read_records, require_whole
from kit.record.view import CheckedPrompts

# Weight formats in the paper's order of decreasing precision; scores are positions among those present.
FORMAT_ORDER = ("F32", "BF16", "F16", "Q8_0", "Q6_K", "Q5_K_M", "Q5_0", "Q4_K_M", "Q4_1", "Q4_0", "Q3_K_M",
                "Q2_K")
_FORMAT_RE = re.compile(r"(?<![A-Za-z0-9])(" + "|".join(f.replace("_", "[-_.]") for f in sorted(
    FORMAT_ORDER, key=len, reverse=True)) + r")(?![A-Za-z0-9])", re.IGNORECASE)


def format_rank(label: str) -> tuple[int, str]:
    """Sort key of a weight format: its position in FORMAT_ORDER (unknown formats last), then its name.
    A dequantized file (`Q4_K_M-deq-F16`) ranks as the format its kernels run (F16), after it."""
    upper = label.upper()
    kernels = upper.rsplit("-DEQ-", 1)[-1]
    return (FORMAT_ORDER.index(kernels) if kernels in FORMAT_ORDER else len(FORMAT_ORDER), upper)


def weight_format(manifest: RunManifest) -> str:
    """The run's weight format: the sweep's label, else the engine's `format`, else read off the model name."""
    if manifest.sweep.get("format"):
        return str(manifest.sweep["format"])
    engine = manifest.engine
    if engine.format:
        return engine.format
    for name in (engine.model_name, engine.model, engine.model_path):
        match = _FORMAT_RE.search(Path(name or "").name)
        if match:
            return re.sub(r"[-.]", "_", match.group(1).upper())
    return "unknown"


def model_label(manifest: RunManifest) -> str:
    """A short model name for tables: the engine's model name without its format suffix."""
    engine = manifest.engine
    name = engine.model_name or Path(engine.model or "unknown").name
    name = re.sub(r"\.gguf$", "", name, flags=re.IGNORECASE)
    return _FORMAT_RE.sub("", name).strip("-._") or name


# The prompts whose digests this process's reads have checked, for every run it reads (kit.record.view.CheckedPrompts:
# the runs of a sweep send the same prompts until they diverge: on the paper-scale bench 8,600 distinct prompts, 65,000
# counted run by run). Up to 128 MiB of prompts; `kit.analysis.findings.compute` forgets them when it ends.
checked_prompts = CheckedPrompts(budget=128 << 20)

Logprobs = Literal[True, False, "deferred"]  # what a read keeps of each completion's logprobs (read_records)
_DEPTH = {False: 0, "deferred": 1, True: 2}


@dataclass
class RunFolder:
    """One run folder: its manifest, what it holds, and which of its passes may be analysed."""

    path: Path
    manifest: RunManifest
    kind: str  # its findings family: "reset", "grid" or "sweep"
    ok_passes: dict[str, PassInfo] = field(default_factory=dict)
    void_passes: list[dict[str, Any]] = field(default_factory=list)
    read: dict[Path, RecordFile] = field(default_factory=dict, repr=False)  # files read (see `reading`)

    def records(self, file: str, logprobs: Logprobs = True) -> list[dict[str, Any]]:
        """The records of one of the run's files (`file` relative to the folder; `logprobs` as
        kit.record.files.read_records takes it), each file read once while `reading`: a file is read again only
        when a read keeps more log-probabilities than its first read did (False < "deferred" < True)."""
        path = self.path / file
        got = self.read.get(path)
        if got is None or _DEPTH[logprobs] > _DEPTH[got.logprobs]:
            got = self.read[path] = read_records(path, logprobs, torn="report", view=checked_prompts)
        return got.records

    @contextmanager
    def reading(self, logprobs: dict[str, Logprobs]) -> Iterator[RunFolder]:
        """Read the records files of the OK passes named in `logprobs` (pass id -> the log-probabilities to keep)
        and their episodes files, each once; refuse the run if any pass is cut short
        (kit.record.files.require_whole), counting those files from this read instead of reading them again;
        then let analysis take their records from `records` until the block ends (they are dropped then)."""
        try:
            for pass_id, keep in logprobs.items():
                info = self.ok_passes[pass_id]
                self.records(str(info.file), keep)
                if info.episodes_file and (self.path / info.episodes_file).is_file():
                    self.records(info.episodes_file)  # no completions: read in full, as cheap
            self.require_whole()
            yield self
        finally:
            self.read.clear()

    def bytes_to_read(self, *_: Any) -> int:
        """The size of the OK passes' records files: what analysing the run reads (a cost for parallel_map)."""
        return sum((self.path / str(info.file)).stat().st_size for info in self.ok_passes.values())

    def require_whole(self) -> None:
        """Refuse the run if a pass is cut short (kit.record.files.require_whole; files already read count as read)."""
        require_whole(self.path, self.manifest.passes, self.read)

    @property
    def run_id(self) -> str:
        return self.manifest.run_id or self.path.name

    @property
    def format(self) -> str:
        return weight_format(self.manifest)

    @property
    def model(self) -> str:
        return model_label(self.manifest)

    @property
    def engine_name(self) -> str:
        """The engine's label (llama.cpp, vLLM, Ollama, ...: kit.engines.registry), from what the manifest's engine
        entry says it was; llama.cpp, the default engine, where it names none."""
        engine = self.manifest.engine
        if engine.engine_kind:
            return engine.engine_kind
        return (registry.said_in(f"{engine.engine or ''} {engine.kind or ''}") or registry.named(registry.DEFAULT)).label

    @property
    def resolved(self) -> dict[str, Any]:
        return self.manifest.protocol.resolved

    @property
    def sweep(self) -> dict[str, Any]:
        return self.manifest.sweep

    @property
    def top_logprobs(self) -> int | None:
        value = self.resolved.get("top_logprobs", self.manifest.plan.top_logprobs)
        return int(value) if value is not None else None

    @property
    def cache_ram(self) -> Any:
        """The server-level prompt cache setting (MiB); None means llama.cpp's default (enabled)."""
        engine = self.manifest.engine
        return engine.cache_ram if "cache_ram" in engine.model_fields_set else (
            (self.resolved.get("engine") or {}).get("cache_ram"))

    @property
    def gsm8k(self) -> bool:
        return self.manifest.workload.source == "gsm8k"


@dataclass
class Collection:
    """Everything `kit analyze` was given, sorted by kind, with what was skipped and why."""

    runs: list[RunFolder] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[RunFolder]:
        return [r for r in self.runs if r.kind == kind]

    def void_passes(self) -> list[dict[str, Any]]:
        return [v for r in self.runs for v in r.void_passes]


def cell_manifest(manifest: RunManifest, name: str, cell: dict[str, Any], origin: str) -> RunManifest:
    """The manifest one cell of a many-server run would have had as a run of its own: its passes only,
    its engine details (model, cache setting), its sweep label and its arms."""
    data = manifest.to_json()
    view = {k: v for k, v in data.items() if k not in ("passes", "cells")}
    view["run_id"] = f"{manifest.run_id or 'run'}/{name}"
    view["passes"] = {p: data.get("passes", {}).get(p, {"status": "not run"}) for p in cell.get("passes", [])}
    view["engine"] = {**(view.get("engine") or {}), **(cell.get("engine") or {})}
    view["protocol"] = {**(view.get("protocol") or {}), "kind": "grid"}
    view["protocol"]["resolved"] = {**(view["protocol"].get("resolved") or {}), **(cell.get("resolved") or {})}
    if cell.get("sweep"):
        view["sweep"] = cell["sweep"]
    return parsed(view, f"{origin} (its cell {name!r})")


def read_runs(path: Path) -> list[RunFolder]:
    """A run folder as analysis sees it: itself, or one view per cell when its manifest lists cells."""
    manifest = Manifest.load(path).run
    if not manifest.cells:
        return [read_run(path, manifest)]
    origin = str(RunPaths(path).manifest)
    return [read_run(path, cell_manifest(manifest, name, cell, origin)) for name, cell in manifest.cells.items()]


def family(path: Path, manifest: RunManifest) -> str:
    """The findings family a folder (or a cell's view of one) feeds, from its kind's analysis entry
    (kit.protocols.kind.Analysis): reset, grid, or sweep for a grid folder that carries `sweep`."""
    name = manifest.protocol.kind
    kind = kinds.named(name, str(path))
    if kind.analysis is None:
        readable = [k.name for k in kinds.KINDS.values() if k.analysis is not None]
        raise KitError(f"{path}: protocol kind {name!r} has no analysis yet",
                       f"pass run folders of the {', '.join(readable[:-1])} or {readable[-1]} kinds")
    if kind.analysis.family is None:
        raise KitError(f"{path}: this {name} run lists no cells (it stopped before its first pass), "
                       "so it holds nothing to analyse", "pass a run folder that ran at least one pass")
    return "sweep" if kind.analysis.family == "grid" and manifest.sweep else kind.analysis.family


def read_run(path: Path, manifest: RunManifest | None = None) -> RunFolder:
    """Read one run folder's manifest (or a cell's view of it) and split its passes into OK ones and
    excluded ones. Its records are not read here: analysis reads each file once (`RunFolder.reading`),
    and refuses a run with a pass cut short then."""
    manifest = manifest if manifest is not None else Manifest.load(path).run
    run = RunFolder(path=path, manifest=manifest, kind=family(path, manifest))
    for pass_id, info in manifest.passes.items():
        if info.status == "OK" and info.file and (path / info.file).is_file():
            run.ok_passes[pass_id] = info
        else:
            reason = info.reason or ("record file missing" if info.status == "OK" else f"status {info.status}")
            run.void_passes.append({"run": run.run_id, "pass": pass_id, "status": info.status,
                                    "reason": reason})
    return run


def collect(paths: list[Path]) -> Collection:
    """Recognise each folder (or each run folder directly inside a folder that holds several)."""
    collection = Collection()
    for path in paths:
        candidates = [path] if RunPaths(path).manifest.is_file() else sorted(
            p for p in path.iterdir() if RunPaths(p).manifest.is_file()) if path.is_dir() else []
        if not candidates:
            collection.skipped.append({"path": str(path), "reason": "no manifest.json here or one level below"})
        for candidate in candidates:
            try:
                collection.runs.extend(read_runs(candidate))
            except DamagedRecords:
                raise  # a run that lost or repeats a record is refused, never skipped as "not a run"
            except KitError as exc:
                collection.skipped.append({"path": str(candidate), "reason": exc.line()})
    return collection
