"""The run folder of a watch: its manifest, and the call records appended in rotating files.

Each records file is one pass of the run, `records/calls-0001.jsonl`, `calls-0002`, ...: a pass holds at
most `rotate` calls, then it is closed (status OK in the manifest) and the next one opened. Records are
written and fsynced by one writer thread, in the order the proxy hands them over (the order the calls were
answered, which is the order the alarms were raised in), so the proxy's event loop never waits on a disk.
`close(status, reason)` writes what is queued, closes the last pass and ends the run with its status.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import Any

from kit.core.paths import RunPaths
from kit.record.files import RecordWriter
from kit.record.manifest import Manifest, new_run_dir, now
from kit.record.model import WatchRecord

PROTOCOL = "watch"
ROTATE_DEFAULT = 10_000


def pass_name(index: int) -> str:
    return f"calls-{index:04d}"


class Recorder:
    """Appends WatchRecords to a new run folder under `out` (`open`), one writer thread."""

    def __init__(self, run_dir: Path, manifest: Manifest, rotate: int):
        self.run_dir, self.manifest, self.rotate = run_dir, manifest, rotate
        self.index = 0
        self.writer: RecordWriter | None = None
        self.written = 0
        self.failed: str | None = None
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._drain, name="kit-watch-records", daemon=True)
        self._thread.start()

    @classmethod
    def open(cls, out: Path, rotate: int = ROTATE_DEFAULT, **manifest: Any) -> Recorder:
        run_dir = new_run_dir(out, PROTOCOL)
        return cls(run_dir, Manifest.create(run_dir, **manifest), rotate)

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    def add(self, fields: dict[str, Any]) -> None:
        """Queue one call's record fields (all but run_id, pass_id, seq and the protocol's names)."""
        self._queue.put(fields)

    def _next_pass(self) -> RecordWriter:
        self.index += 1
        pass_id = pass_name(self.index)
        self.manifest.set_pass(pass_id, status="running", file=RunPaths.records_name(pass_id), records=0,
                               started=now())
        return RecordWriter(self.run_dir / RunPaths.records_name(pass_id), run_id=self.run_id, pass_id=pass_id,
                            protocol=PROTOCOL, protocol_name=PROTOCOL, protocol_kind=PROTOCOL)

    def _close_pass(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.manifest.set_pass(pass_name(self.index), status="OK", records=self.writer.count, ended=now())
            self.writer = None

    def _drain(self) -> None:
        while (fields := self._queue.get()) is not None:
            if self.failed:
                continue
            try:
                if self.writer is None or self.writer.count >= self.rotate:
                    self._close_pass()
                    self.writer = self._next_pass()
                self.writer.write(WatchRecord(**self.writer.context, seq=self.writer.count, **fields))
                self.written += 1
            except OSError as exc:
                self.failed = f"writing records failed: {exc.strerror or exc}"

    def close(self, status: str = "finished", reason: str | None = None) -> None:
        """Write what is queued, close the last pass, and end the run with `status` (finished, failed,
        interrupted)."""
        self._queue.put(None)
        self._thread.join()
        try:
            self._close_pass()
        except OSError as exc:
            self.failed = self.failed or f"closing the records failed: {exc.strerror or exc}"
        if self.failed:
            status, reason = "failed", self.failed
        self.manifest.update(watch={**(self.manifest.run.model_extra or {}).get("watch", {}),
                                    "calls_recorded": self.written})
        self.manifest.finish(status, reason)
