"""A run folder and its manifest: written first (status "started"), replaced atomically on change.

The manifest is read into one typed model, `RunManifest` (schema `kit.manifest/2`); this module is the
one that reads and writes it. A `kit.manifest/1` manifest (every release before) is upgraded as it is
read, the way kit.record_v1 upgrades records; the file is rewritten only when the run changes (resume):
- `schema` becomes `kit.manifest/2`; `legacy.schema` keeps the old value.
- Nothing else changed shape: /2 names the types /1 always had, and refuses a field of the wrong type
  with a one-line error naming it. Keys the model does not name are kept as they were (`extra="allow"`)
  and written back unchanged.
"""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from kit.atomic_file import write_json_atomic
from kit.errors import ConfigError
from kit.packaged_yaml import validated
from kit.paths import RunPaths
from kit.regular_file import read_regular
from kit.terminal_text import one_line

MANIFEST = RunPaths.MANIFEST
SCHEMA = "kit.manifest/2"
V1 = "kit.manifest/1"
FINAL_STATES = ("finished", "failed", "interrupted")
MANIFEST_BYTES = 64 << 20  # what a bundle reads whole (kit.bundle.limits.read_whole_bytes)
FILE_KEYS = ("file", "episodes_file")  # the keys of a pass that name a file of the run folder
MAX_NAME = 1000  # characters in a name a manifest gives a file of its run folder
PLAIN_NAME = re.compile(r"[^/\\\x00-\x1f.][^/\\\x00-\x1f]{0,49}")  # one file name: no /, no leading dot (so no ..)
CONFINED_FIX = "a run folder names only its own files (records/<pass>.jsonl); restore the manifest from its bundle"


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _encodable(name: str) -> bool:
    try:
        return all(len(part) <= 255 for part in os.fsencode(name).split(b"/"))
    except UnicodeError:
        return False


def inside(run_dir: Path, name: Any, what: str) -> Path:
    """The file a manifest names, `run_dir / name`, once `name` is checked to stay inside the run folder:
    a relative path without `..`, none of whose parts is a link leading out of it. The one check of every
    path read from a manifest (Manifest.load applies it to each pass's files); ConfigError otherwise."""
    problem = ("is not a string" if not isinstance(name, str) else "is empty" if not name
               else f"is over {MAX_NAME} characters" if len(name) > MAX_NAME
               else "contains a control character" if any(ord(c) < 32 for c in name)
               else "is not a file name this system can hold" if not _encodable(name)
               else "is an absolute path" if name.startswith("/")
               else "contains '..'" if ".." in Path(name).parts else None)
    path = run_dir / name if problem is None else run_dir
    if problem is None:
        try:
            root, resolved = run_dir.resolve(), path.resolve()
        except (OSError, RuntimeError) as exc:  # a link loop, a name the system refuses
            root, resolved, problem = None, None, f"cannot be followed ({exc})"
        if root is not None and resolved != root and root not in resolved.parents:
            problem = f"leads out of the run folder through a link (to {resolved})"
    if problem:
        shown = repr(name) if len(repr(name)) <= 120 else f"{repr(name)[:120]}…"
        raise ConfigError(f"{run_dir / MANIFEST}: {what} {shown} {problem}", CONFINED_FIX)
    return path


def not_plain(run_dir: Path) -> list[Path]:
    """What in a run folder is neither a regular file nor a folder: links (the kit never makes one there),
    pipes, sockets, devices. A folder the kit writes into again (`kit resume`) must hold none: a write
    through a link could land wherever it points, and a pipe would block."""
    return sorted(p for p in run_dir.rglob("*") if p.is_symlink() or not (p.is_file() or p.is_dir()))


def unfinished_problem(data: dict[str, Any]) -> str | None:
    """Why a run (its manifest's data) did not finish: its status and the reason it ended, on one line;
    None for a finished run. `kit bundle` refuses such a run and `kit analyze` flags it."""
    status = data.get("status")
    if status == "finished":
        return None
    if status == "started":
        return "status 'started': it is still running, or its kit was killed before it ended"
    return f"status {one_line(str(status))!r}: {one_line(str(data.get('reason') or 'no reason recorded'))}"


def _or_empty(value: Any) -> Any:
    return {} if value is None else value


Obj = Annotated[dict[str, Any], BeforeValidator(_or_empty)]  # an object the kit reads by key; null reads as {}


class Entry(BaseModel):
    """A part of the manifest: the keys the kit reads are typed; any other key is kept as written."""

    model_config = ConfigDict(extra="allow", validate_assignment=True, populate_by_name=True)

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True)


class ProtocolInfo(Entry):
    """`protocol`: the protocol file as run."""

    name: str | None = Field(None, description="the protocol's name (its file's stem)")
    kind: str | None = Field(None, description="the protocol kind that ran it (kit.protocols.kinds)")
    file: str | None = Field(None, description="the protocol file's path when it ran")
    sha256: str | None = Field(None, description="sha256 of the protocol file's bytes")
    content: str | None = Field(None, description="the protocol file's text (null for imported runs)")
    resolved: Obj = Field(default_factory=dict, description="the protocol as validated, defaults filled in")
    overrides: Any = Field(None, description="the `--set key=value` overrides given")


class EngineInfo(Entry):
    """`engine`: what served the run, as its launcher describes it (keys differ by launcher)."""

    kind: str | None = Field(None, description="the launcher or engine kind: native, docker, vllm, ollama, ...")
    engine: str | None = Field(None, description="the engine's name and version as the launcher saw it")
    engine_kind: str | None = Field(None, description="llama.cpp, vLLM or Ollama, where the launcher says")
    url: str | None = Field(None, description="the engine's URL (credentials redacted), for an engine reached by URL")
    model: str | None = Field(None, description="the model file or name served")
    model_name: str | None = Field(None, description="the model's name")
    model_path: str | None = Field(None, description="the model file's path")
    model_sha256: str | None = Field(None, description="sha256 of the model file served, where the kit has it")
    threads: int | None = Field(None, description="llama-server's `--threads`")
    format: str | None = Field(None, description="the weight format served, where the launcher knows it")
    cache_ram: Any = Field(None, description="llama-server's `--cache-ram` (MiB); null: its default")
    server_bin_sha256: str | None = Field(None, description="sha256 of a server binary given with --server-bin")


class WorkloadInfo(Entry):
    """`workload`: what was sent, as the kind prepared it (keys differ by kind)."""

    source: str | None = Field(None, description="where the prompts come from (gsm8k, bfcl, synthetic, ...)")
    file: str | None = Field(None, description="the GSM8K file served, where the source is gsm8k")
    sha256: str | None = Field(None, description="that file's sha256")
    items: int | None = Field(None, description="the items sent (reset and bridge kinds)")
    first_item: int | None = Field(None, description="the first GSM8K item sent")
    seed: int | None = Field(None, description="the seed the arithmetic items were drawn with")


class PlanInfo(Entry):
    """`plan`: what the kind planned to run (keys differ by kind)."""

    max_tokens: int | None = Field(None, description="the tokens each answer may hold")
    top_logprobs: int | None = Field(None, description="the top log-probabilities each token asks for")


class ProvenanceInfo(Entry):
    """`provenance`: the kit's source, package versions, the host and the CPU backend."""

    kit: Obj = Field(default_factory=dict, description="the kit's version and source (git commit, dirty)")
    packages: Obj = Field(default_factory=dict, description="the versions of the packages it ran with")
    host: Obj = Field(default_factory=dict, description="the machine: OS, CPU, memory, GPUs")
    cpu_backend: dict[str, Any] | None = Field(None, description="the embedded engine's CPU backend; null for others")


class ImportedInfo(Entry):
    """`imported`: present when the run was imported (`kit import`), not run."""

    from_: str | None = Field(None, alias="from", description="what it was imported from")


class PassInfo(Entry):
    """`passes.<id>`: one pass (keys beyond these differ by kind)."""

    status: str | None = Field(None, description="running, OK or VOID (not run: absent)")
    reason: str | None = Field(None, description="why the pass is VOID")
    file: str | None = Field(None, description="its records file, `records/<pass>.jsonl`")
    episodes_file: str | None = Field(None, description="its episode lines, `records/<pass>.episodes.jsonl`")
    records: int | None = Field(None, description="the records written")
    started: str | None = Field(None, description="when it started (UTC, ISO 8601)")
    ended: str | None = Field(None, description="when it ended")
    session: int | None = Field(None, description="its session number (reset kind)")
    phase: str | None = Field(None, description="calibration, cycle or steady (pinning kind)")
    arm: str | None = Field(None, description="its arm, `on` or `off` (grid kinds)")
    repeat: int | None = Field(None, description="its repeat number (grid kinds)")
    order_index: int | None = Field(None, description="which episode order it ran (grid kinds)")
    order: list[Any] = Field(default_factory=list, description="the units in the order they ran")
    role: str | None = Field(None, description="reference or replicate (sweep kind)")
    format: str | None = Field(None, description="its weight format (sweep kind)")
    history: int | None = Field(None, description="the turns of history before it (sweep kind)")
    server_session: str | None = Field(None, description="the server that served it (many-server kinds)")
    launch: dict[str, Any] | None = Field(None, description="how its engine was launched")
    reload: dict[str, Any] | None = Field(None, description="how the engine was reloaded before it")


class RunManifest(Entry):
    """A run folder's `manifest.json`, schema `kit.manifest/2`."""

    schema_id: str = Field(SCHEMA, alias="schema", description="`kit.manifest/2`")
    run_id: str | None = Field(None, description="the run's identity: its folder's name when it was made")
    status: str | None = Field(None, description="started, finished, failed or interrupted")
    started: str | None = Field(None, description="when the run started (UTC, ISO 8601)")
    protocol: ProtocolInfo = Field(default_factory=ProtocolInfo, description="the protocol as run")
    options: Obj = Field(default_factory=dict, description="the command's options (`kit run`)")
    plan: PlanInfo = Field(default_factory=PlanInfo, description="what the kind planned")
    workload: WorkloadInfo = Field(default_factory=WorkloadInfo, description="what was sent")
    engine: EngineInfo = Field(default_factory=EngineInfo, description="what served it")
    seeds: Obj = Field(default_factory=dict, description="the seeds used")
    provenance: ProvenanceInfo = Field(default_factory=ProvenanceInfo, description="where and with what it ran")
    prompt_format: str | None = Field(None, description="the chat template the grid kinds wrote prompts in")
    estimate: dict[str, Any] | None = Field(None, description="the time the run was estimated to take")
    calibration: dict[str, Any] | None = Field(None, description="the pinning kind's timing classes")
    cells: Obj = Field(default_factory=dict, description="a many-server run's cells: name to passes and settings")
    sweep: Obj = Field(default_factory=dict, description="a sweep cell's format and history")
    formats: Obj = Field(default_factory=dict, description="the sweep kind's weight formats")
    passes: dict[str, PassInfo] = Field(default_factory=dict, description="the passes run, by pass id")
    results: Obj = Field(default_factory=dict, description="the results files written, by name")
    imported: ImportedInfo | None = Field(None, description="what it was imported from (`kit import`)")
    resumed: list[dict[str, Any]] = Field(default_factory=list, description="each `kit resume` of it")
    replay_of: dict[str, Any] | None = Field(None, description="the run it replays (`kit replay`)")
    cpu_backend_switches: list[dict[str, Any]] = Field(default_factory=list,
                                                       description="CPU backend switches before any record")
    legacy: dict[str, Any] | None = Field(None, description="what the upgrade from `kit.manifest/1` changed")
    reason: str | None = Field(None, description="why the run failed or was interrupted")
    ended: str | None = Field(None, description="when the run ended")

    def unfinished_problem(self) -> str | None:
        """Why the run did not finish: its status and the reason it ended, on one line; None for a
        finished run. `kit bundle` refuses such a run and `kit analyze` flags it."""
        return unfinished_problem({"status": self.status, "reason": self.reason})


def upgrade(data: dict[str, Any]) -> dict[str, Any]:
    """The `kit.manifest/2` form of a `kit.manifest/1` manifest's data (changed in place and returned)."""
    if data.get("schema") == V1:
        data["schema"] = SCHEMA
        data["legacy"] = {**(data.get("legacy") or {}), "schema": V1}
    return data


def _where(loc: tuple[Any, ...], _data: Any) -> str:
    return ".".join(str(part) for part in loc) or "the manifest"


def parsed(data: dict[str, Any], origin: str) -> RunManifest:
    """A manifest's data (schema /1 or /2) as a RunManifest; ConfigError naming `origin` and the first
    field of a wrong type otherwise."""
    return validated(RunManifest, upgrade(data), origin, _where, "restore it from a bundle")


def new_run_dir(parent: Path, protocol: str) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    base = parent / f"{re.sub(r'[^A-Za-z0-9_.-]', '-', protocol)}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    path.mkdir(parents=True)
    return path


class Manifest:
    """The manifest of one run folder: its typed content (`run`, a RunManifest) and the folder it
    describes. Every change is written through atomically."""

    def __init__(self, run_dir: Path, run: RunManifest):
        self.run_dir = run_dir
        self.run = run

    @classmethod
    def create(cls, run_dir: Path, **fields: Any) -> "Manifest":
        data = {"schema": SCHEMA, "run_id": run_dir.name, "status": "started", "started": now(), **fields}
        manifest = cls(run_dir, parsed(data, str(run_dir / MANIFEST)))
        manifest.save()
        return manifest

    @classmethod
    def load(cls, run_dir: Path) -> "Manifest":
        path = run_dir / MANIFEST
        if not (path.exists() or path.is_symlink()):
            raise ConfigError(f"{run_dir} has no {MANIFEST}", "pass a run folder made by `kit run`")
        raw = read_regular(path, "the run's manifest", MANIFEST_BYTES, "restore it from a bundle")
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
            raise ConfigError(f"{path} is not valid JSON ({reason})", "restore it from a bundle") from exc
        if not isinstance(data, dict) or data.get("schema") not in (SCHEMA, V1):
            schema = data.get("schema") if isinstance(data, dict) else None
            raise ConfigError(f"{path} has schema {schema!r}", f"this kit reads {SCHEMA} and {V1}; upgrade the kit")
        passes = data.get("passes") or {}
        if not isinstance(passes, dict) or not all(isinstance(info, dict) for info in passes.values()):
            raise ConfigError(f"{path}: passes is not a mapping of pass id to pass", "restore it from a bundle")
        for pass_id, info in passes.items():  # before the types: a path's own problem is the clearer message
            for key in FILE_KEYS:
                if info.get(key) is not None:
                    inside(run_dir, info[key], f"passes.{pass_id}.{key}")
        return cls(run_dir, parsed(data, str(path)))

    @property
    def run_id(self) -> str:
        """The run's identity: the manifest's run_id (a copied or renamed folder is still the same run)."""
        return str(self.run.run_id or self.run_dir.name)

    def save(self) -> None:
        write_json_atomic(self.run_dir / MANIFEST, self.run.to_json())

    def update(self, **fields: Any) -> None:
        for key, value in fields.items():
            setattr(self.run, key, value)
        self.save()

    def set_pass(self, pass_id: str, **fields: Any) -> None:
        info = self.run.passes.get(pass_id)
        if info is None:
            self.run.passes = {**self.run.passes, pass_id: PassInfo(**fields)}
        else:
            for key, value in fields.items():
                setattr(info, key, value)
        self.save()

    def supersede(self, pass_id: str) -> None:
        """Drop a pass so it can run again: its record files move to records/superseded/ (kept, never
        counted) and its manifest entry goes."""
        info = self.run.passes.pop(pass_id, None)
        superseded = RunPaths(self.run_dir).superseded
        for key in FILE_KEYS:
            name = getattr(info, key, None)
            if name is None:
                continue
            path = inside(self.run_dir, name, f"passes.{pass_id}.{key}")  # checked again: moved, not read
            if path.is_file() and not path.is_symlink():
                superseded.mkdir(parents=True, exist_ok=True)
                path.rename(superseded / f"{path.name}.{now().replace(':', '')}")
        self.save()

    def finish(self, status: str, reason: str | None = None) -> None:
        assert status in FINAL_STATES, status
        self.update(status=status, reason=reason, ended=now())
