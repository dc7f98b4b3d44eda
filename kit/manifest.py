"""A run folder and its manifest: written first (status "started"), replaced atomically on change."""

from __future__ import annotations

import json
import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kit.atomic_file import write_json_atomic
from kit.errors import ConfigError
from kit.regular_file import read_regular
from kit.terminal_text import one_line

MANIFEST = "manifest.json"
SCHEMA = "kit.manifest/1"
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
    """The manifest of one run folder. Every change is written through atomically."""

    def __init__(self, run_dir: Path, data: dict[str, Any]):
        self.run_dir = run_dir
        self.data = data

    @classmethod
    def create(cls, run_dir: Path, **fields: Any) -> "Manifest":
        data = {"schema": SCHEMA, "run_id": run_dir.name, "status": "started", "started": now(), **fields}
        manifest = cls(run_dir, data)
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
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            schema = data.get("schema") if isinstance(data, dict) else None
            raise ConfigError(f"{path} has schema {schema!r}", f"this kit reads {SCHEMA}; upgrade the kit")
        passes = data.get("passes") or {}
        if not isinstance(passes, dict) or not all(isinstance(info, dict) for info in passes.values()):
            raise ConfigError(f"{path}: passes is not a mapping of pass id to pass", "restore it from a bundle")
        for pass_id, info in passes.items():
            for key in FILE_KEYS:
                if info.get(key) is not None:
                    inside(run_dir, info[key], f"passes.{pass_id}.{key}")
        return cls(run_dir, data)

    @property
    def run_id(self) -> str:
        """The run's identity: the manifest's run_id (a copied or renamed folder is still the same run)."""
        return str(self.data.get("run_id") or self.run_dir.name)

    def save(self) -> None:
        write_json_atomic(self.run_dir / MANIFEST, self.data)

    def update(self, **fields: Any) -> None:
        self.data.update(fields)
        self.save()

    def set_pass(self, pass_id: str, **fields: Any) -> None:
        passes = self.data.setdefault("passes", {})
        passes.setdefault(pass_id, {}).update(fields)
        self.save()

    def supersede(self, pass_id: str) -> None:
        """Drop a pass so it can run again: its record files move to records/superseded/ (kept, never
        counted) and its manifest entry goes."""
        info = self.data.get("passes", {}).pop(pass_id, {})
        superseded = self.run_dir / "records" / "superseded"
        for key in FILE_KEYS:
            if info.get(key) is None:
                continue
            path = inside(self.run_dir, info[key], f"passes.{pass_id}.{key}")  # checked again: moved, not read
            if path.is_file() and not path.is_symlink():
                superseded.mkdir(parents=True, exist_ok=True)
                path.rename(superseded / f"{path.name}.{now().replace(':', '')}")
        self.save()

    def finish(self, status: str, reason: str | None = None) -> None:
        assert status in FINAL_STATES, status
        self.update(status=status, reason=reason, ended=now())
