"""How a run's procedure is executed once its folder and manifest exist (kit run and kit resume alike): the
kind's passes under the answer bounds, a pass voided by an unusable answer, the CPU backend switched after an
illegal instruction, and the final results and manifest written however the run ended.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from kit.core.errors import IllegalInstruction, InvalidAnswer, KitError
from kit.core.events import Emit, RunEnded, RunStarted, SessionEnded
from kit.core.owned_file import open_append
from kit.engines.bounds import AnswerBounds, bounded
from kit.launch.cpu import sigill_guard
from kit.protocols.kind import Kind
from kit.protocols.procedure import LOCAL, Executor, RunContext, RunStopped
from kit.record import files as records
from kit.record.manifest import Manifest, now
from kit.run import faults as run_faults, lock as run_lock
from kit.run.ending import end_run, reason_of
from kit.run.gc_pacing import fewer_collections


@dataclass(frozen=True)
class RunResult:
    run_dir: Path
    status: str
    reason: str | None
    table: dict[str, Any] | None

    def no_verdict(self) -> str | None:
        """Why this finished run gives no verdict: none of its passes is OK (every pass VOID, with the reasons,
        passes of one reason together); None when one is, or when the run did not finish."""
        if self.status != "finished":
            return None
        passes = Manifest.load(self.run_dir).run.passes
        if any(info.status == "OK" for info in passes.values()):
            return None
        if not passes:
            return "no pass ran"
        why: dict[str, list[str]] = {}
        for pass_id, info in passes.items():
            why.setdefault(info.reason or str(info.status), []).append(pass_id)
        every = "every pass was VOID" if all(info.status == "VOID" for info in passes.values()) else "no pass is OK"
        return f"{every} ({'; '.join(', '.join(ids) + f': {reason}' for reason, ids in why.items())})"


def _void_passes(manifest: Manifest, pass_ids: list[str], reason: str, emit: Emit) -> None:
    """Mark the passes VOID with `reason`, their records kept and counted (an empty file where none was
    written yet, so the pass is whole, not cut short)."""
    for pass_id in pass_ids:
        info = manifest.run.passes[pass_id]
        path = manifest.run_dir / info.file if info.file else None
        if path is not None and not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            open_append(path).close()  # never through a link (a dangling one included)
        count = len(records.read_records(path, logprobs=False, torn="report").records) if path else None
        manifest.set_pass(pass_id, status="VOID", reason=reason, records=count, ended=now())
        emit(SessionEnded(pass_id, "VOID", reason))


def execute(protocol, kind: Kind, prepared, provider, manifest: Manifest, emit: Emit, say: Callable[[str], None],
             done: set[str] | None = None, stop: threading.Event | None = None,
             bounds: AnswerBounds = AnswerBounds(), lock: run_lock.Held | None = None,
             executor: Executor = LOCAL) -> RunResult:
    """Run the kind's procedure, then its results from the run folder's files (as `kit verify` recomputes
    them), whatever way the run ended. Engine answers are held to `bounds`; an unusable answer (InvalidAnswer)
    voids the pass it served, and the procedure goes on with the passes after it; the same pass voided again
    (passes sharing a server run again together) fails the run. A stop signal, a full disk or a dead helper
    ends the run with its true cause (kit.run.faults), and the final manifest is written with the run lock's
    disk reserve given back."""
    run_dir = manifest.run_dir
    run_faults.clear()
    emit(RunStarted(run_dir, str(manifest.run.protocol.name), prepared.plan))
    status, reason, table = "finished", None, None
    stop = stop or threading.Event()
    voided: set[str] = set()
    try:
        while True:
            try:
                with fewer_collections(), bounded(bounds):
                    kind.run(protocol, prepared, RunContext(run_dir, manifest, provider, emit, done=done or set(),
                                                            stop=stop, executor=executor))
                break
            except IllegalInstruction as exc:
                provider = sigill_guard.switch(provider, manifest, exc, say)
            except InvalidAnswer as exc:
                running = [p for p, info in manifest.run.passes.items() if info.status == "running"]
                if not running or voided & set(running):
                    raise  # outside any pass, or a pass voided before and run again (passes sharing a server)
                _void_passes(manifest, running, exc.line(), emit)
                voided.update(running)
            done = {p for p, info in manifest.run.passes.items() if info.status in ("OK", "VOID")}
    except (KeyboardInterrupt, RunStopped, KitError, OSError) as exc:
        status, reason = _ended_by(exc)
    except BaseException as exc:  # noqa: BLE001 - also SystemExit or a test runner's timeout: never "finished"
        status, reason = "failed", f"internal error: {type(exc).__name__}: {exc}"
        raise
    finally:
        if lock is not None:
            lock.give_back_reserve()
        try:
            table = _finish(kind, run_dir, manifest, emit, status, reason)
        except OSError as exc:  # even the reserve did not make room: say so in one line
            raise KitError(f"the run ended ({status}: {reason}) but its manifest could not be updated: "
                           f"{run_faults.os_failure(exc)}", f"then `kit resume {run_dir}`") from exc
    return RunResult(run_dir, str(manifest.run.status), manifest.run.reason, table)


def _ended_by(exc: BaseException) -> tuple[str, str]:
    """(status, reason) of a run the exception ended: interrupted when it was stopped (a signal, Ctrl-C,
    the launcher's stop), even if a helper the signal killed raised something else on the way out."""
    stopped = run_faults.stop_cause(exc, (RunStopped,))
    if stopped:
        return "interrupted", stopped
    return "failed", run_faults.os_failure(exc) if isinstance(exc, OSError) else reason_of(exc)


def _finish(kind: Kind, run_dir: Path, manifest: Manifest, emit: Emit, status: str,
            reason: str | None) -> dict[str, Any] | None:
    """Mark passes cut short, write the results and the final manifest (kit.run.ending); the results table
    (None if none). A stop signal while the results are computed stops that (passed on once the manifest is
    final and the run's end emitted)."""
    with run_faults.deferred():
        for pass_id, info in manifest.run.passes.items():
            if info.status == "running":  # cut short: never reported as a result
                manifest.set_pass(pass_id, status=status, reason=reason)
    ended = end_run(manifest, lambda: kind.results(run_dir), status, reason)
    emit(RunEnded(run_dir, ended.status, ended.reason))
    ended.pass_on()  # Ctrl-C or SystemExit while writing results: recorded, then passed on
    return ended.table
def _reason(exc: Exception) -> str:
    return exc.line() if isinstance(exc, KitError) else f"internal error: {type(exc).__name__}: {exc}"
