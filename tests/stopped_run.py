"""A reset run folder stopped after its first pass was cut short, as `kit resume` finds one."""

from __future__ import annotations

import hashlib
from pathlib import Path

from kit.record.manifest import Manifest
from kit.core.paths import REPO_ROOT


def stopped_run(tmp_path: Path, options: dict | None = None, engine: dict | None = None) -> Path:
    text = (REPO_ROOT / "protocols" / "reset.yaml").read_bytes().decode("utf-8")
    run_dir = tmp_path / "reset-stopped"
    run_dir.mkdir()
    Manifest.create(run_dir, protocol={"name": "reset", "kind": "reset", "file": "protocols/reset.yaml",
                                       "sha256": hashlib.sha256(text.encode()).hexdigest(), "content": text,
                                       "overrides": {}},
                    options={"out": str(tmp_path), **(options or {})}, engine=engine or {},
                    passes={"s1": {"status": "interrupted"}}).finish("interrupted")
    return run_dir
