"""A run folder and its manifest: written first (status "started"), replaced atomically on change."""

from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kit.atomic_file import write_json_atomic
from kit.errors import ConfigError
from kit.terminal_text import one_line

MANIFEST = "manifest.json"
SCHEMA = "kit.manifest/1"
FINAL_STATES = ("finished", "failed", "interrupted")


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


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
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError as exc:
            raise ConfigError(f"{run_dir} has no {MANIFEST}", "pass a run folder made by `kit run`") from exc
        except ValueError as exc:
            raise ConfigError(f"{path} is not valid JSON ({exc})", "restore it from a bundle") from exc
        if data.get("schema") != SCHEMA:
            raise ConfigError(f"{path} has schema {data.get('schema')!r}", f"this kit reads {SCHEMA}; upgrade the kit")
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
        for key in ("file", "episodes_file"):
            if info.get(key) and (self.run_dir / info[key]).exists():
                superseded.mkdir(parents=True, exist_ok=True)
                (self.run_dir / info[key]).rename(superseded / f"{Path(info[key]).name}.{now().replace(':', '')}")
        self.save()

    def finish(self, status: str, reason: str | None = None) -> None:
        assert status in FINAL_STATES, status
        self.update(status=status, reason=reason, ended=now())
