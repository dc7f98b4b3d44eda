"""A replay compared while it runs: each new record is held against the original's as soon as it is
durable (the launcher's live view; the full comparison is kit.replay.comparison, at the end)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kit.core.events import RunStarted
from kit.record.manifest import Manifest
from kit.core.paths import RunPaths
from kit.record.files import read_records
from kit.replay.comparison import differs_at


@dataclass
class PassSoFar:
    original: int  # requests the original pass holds
    replayed: int = 0
    identical: int = 0
    first_difference: str | None = None


@dataclass
class Follower:
    """Feed it the replay's events; `passes` says, per pass, how the records written so far compare."""

    original_dir: Path
    passes: dict[str, PassSoFar] = field(default_factory=dict)
    run_dir: Path | None = None
    _records: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    _offsets: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for pass_id, info in Manifest.load(self.original_dir).run.passes.items():
            if info.file:
                self._records[pass_id] = read_records(self.original_dir / info.file, logprobs=False).records
                self.passes[pass_id] = PassSoFar(len(self._records[pass_id]))

    def __call__(self, event: Any) -> list[str]:
        """Take one event; the lines it adds (one per newly compared request)."""
        if isinstance(event, RunStarted):
            self.run_dir = event.run_dir
            return []
        return self.catch_up()

    def catch_up(self) -> list[str]:
        """Compare the complete records the replay has written since the last call (none before it started)."""
        lines: list[str] = []
        if self.run_dir is None:
            return lines
        for path in sorted(RunPaths(self.run_dir).records.glob("*.jsonl")):
            pass_id = path.name.removesuffix(".jsonl")
            if pass_id not in self.passes or pass_id.endswith(".episodes"):
                continue
            with path.open("rb") as fh:
                fh.seek(self._offsets.get(pass_id, 0))
                data = fh.read()
            complete = data[:data.rfind(b"\n") + 1]
            self._offsets[pass_id] = self._offsets.get(pass_id, 0) + len(complete)
            for line in complete.splitlines():
                lines.append(self._compare(pass_id, line))
        return lines

    def _compare(self, pass_id: str, line: bytes) -> str:
        record, so_far = orjson.loads(line), self.passes[pass_id]
        seq = record.get("seq", so_far.replayed)
        so_far.replayed += 1
        original = self._records[pass_id][seq] if seq < len(self._records[pass_id]) else None
        token = differs_at(original, record) if original is not None else -2
        if token is None:
            so_far.identical += 1
            return f"{pass_id} #{seq} {record.get('unit')}: identical"
        what = ("not in the original" if token == -2 else "prompt differs" if token == -1
                else f"differs at token {token}")
        so_far.first_difference = so_far.first_difference or f"#{seq}, {what}"
        return f"{pass_id} #{seq} {record.get('unit')}: {what}"
