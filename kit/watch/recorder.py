"""The run folder of a watch: its manifest, and the call records appended in rotating files.

Each records file is one pass of the run, `records/calls-0001.jsonl`, `calls-0002`, ...: a pass holds at
most `rotate` calls, then it is closed (status OK in the manifest) and the next one opened. Records are
written in the order the proxy hands them over (the order the calls were answered, which is the order the
alarms were raised in), on the proxy's own event loop: each is handed to the OS at once (a crash of the
kit loses none) and made durable at most SYNC_SECONDS later by an fsync on a thread of the loop's executor
(an fsync per call would cost the proxy's clients a disk flush each; a crash of the machine may lose the
last second). `close(status, reason)` syncs the last pass, closes it, writes the results and ends the run
with its status.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from kit.core.paths import RunPaths
from kit.protocols import kinds
from kit.record.files import RecordWriter, sync_fd
from kit.record.manifest import Manifest, new_run_dir, now
from kit.record.model import WatchRecord
from kit.run.ending import end_run

PROTOCOL = "watch"
ROTATE_DEFAULT = 10_000
SYNC_SECONDS = 1.0


def pass_name(index: int) -> str:
    return f"calls-{index:04d}"


class Recorder:
    """Appends WatchRecords to a new run folder under `out` (`open`)."""

    def __init__(self, run_dir: Path, manifest: Manifest, rotate: int):
        self.run_dir, self.manifest, self.rotate = run_dir, manifest, rotate
        self.index = 0
        self.writer: RecordWriter | None = None
        self.written = 0
        self.failed: str | None = None
        self.synced = time.monotonic()

    @classmethod
    def open(cls, out: Path, rotate: int = ROTATE_DEFAULT, **manifest: Any) -> Recorder:
        run_dir = new_run_dir(out, PROTOCOL)
        return cls(run_dir, Manifest.create(run_dir, **manifest), rotate)

    @property
    def run_id(self) -> str:
        return self.manifest.run_id

    def _next_pass(self) -> RecordWriter:
        self.index += 1
        pass_id = pass_name(self.index)
        self.manifest.set_pass(pass_id, status="running", file=RunPaths.records_name(pass_id), records=0,
                               started=now())
        return RecordWriter(self.run_dir / RunPaths.records_name(pass_id), sync_each=False, run_id=self.run_id,
                            pass_id=pass_id, protocol=PROTOCOL, protocol_name=PROTOCOL, protocol_kind=PROTOCOL)

    def _close_pass(self) -> None:
        if self.writer is not None:
            self.writer.close()  # synced (sync_each=False: once, at close)
            self.manifest.set_pass(pass_name(self.index), status="OK", records=self.writer.count, ended=now())
            self.writer = None

    def add(self, fields: dict[str, Any]) -> None:
        """Append one call's record (its fields but run_id, pass_id, seq and the protocol's names)."""
        if self.failed:
            return
        try:
            if self.writer is None or self.writer.count >= self.rotate:
                self._close_pass()
                self.writer = self._next_pass()
            self.writer.write(WatchRecord(**self.writer.context, seq=self.writer.count, **fields))
            self.written += 1
            self.writer.flush()
            if time.monotonic() - self.synced < SYNC_SECONDS:
                return
            self.synced = time.monotonic()
            fd = self.writer.sync_later()
        except OSError as exc:
            self.failed = f"writing records failed: {exc.strerror or exc}"
            return
        try:
            asyncio.get_running_loop().run_in_executor(None, sync_fd, fd)
        except RuntimeError:  # not on an event loop: sync here
            sync_fd(fd)

    def close(self, status: str = "finished", reason: str | None = None,
              watch: dict[str, Any] | None = None) -> None:
        """Close the last pass (synced), write the results of the calls recorded (as every run does at its
        end, however it was stopped: `kit bundle` and `kit verify` then find them) and end the run with
        `status` (finished, failed, interrupted), its manifest's `watch` (what the proxy counted) saved with
        it (kit.run.ending). A stop while the results are written ends the run failed, naming it, and is
        passed on once the manifest is final."""
        try:
            self._close_pass()
        except OSError as exc:
            self.failed = self.failed or f"closing the records failed: {exc.strerror or exc}"
        if self.failed:
            status, reason = "failed", self.failed
        end_run(self.manifest, lambda: kinds.KINDS[PROTOCOL].results(self.run_dir), status, reason,
                watch={**(watch or {}), "calls_recorded": self.written}).pass_on()
