"""The main-process side of the BFCL worker: start it, call its operations, stop it.

Nothing here imports `bfcl_eval`. `BfclWorker` launches `python -S -m kit.workloads.bfcl.worker`
with an environment built from scratch (no inherited variables, so no credentials reach the
process that `eval`s model output) in a private folder of its own, and exchanges JSON lines with
it. The worker confines itself before its first request (`confinement.py`); `hello` reports how.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kit
from kit.core.errors import KitError
from kit.core.owned_file import open_append
from kit.workloads.bfcl.call_policy import Refusal
from kit.workloads.bfcl.provision import BfclInstall


class BfclWorkerError(KitError):
    """The BFCL worker died, hung, or refused an operation."""

    exit_code = 3


@dataclass(frozen=True)
class Episode:
    """One BFCL multi-turn episode as the agent loop needs it (function docs stay in the worker)."""

    id: str
    turns: tuple[tuple[dict, ...], ...]  # per turn, the messages BFCL adds (one user message)
    involved_classes: tuple[str, ...]
    function_names: tuple[str, ...]
    ground_truth: tuple[tuple[str, ...], ...]  # per turn, the reference call strings

    @classmethod
    def from_json(cls, d: dict) -> Episode:
        return cls(
            id=d["id"],
            turns=tuple(tuple(m for m in turn) for turn in d["turns"]),
            involved_classes=tuple(d["involved_classes"]),
            function_names=tuple(d["function_names"]),
            ground_truth=tuple(tuple(t) for t in d["ground_truth"]),
        )


@dataclass(frozen=True)
class Decoded:
    """BFCL's prompting-mode decoding of one model text.

    `calls` are executable call strings (None when decoding failed, with `error` saying why);
    `ast` is the AST-checker form of the same text (None if that decoder failed).
    """

    calls: tuple[str, ...] | None
    empty: bool | None
    ast: Any
    error: str | None

    @property
    def ends_turn(self) -> bool:
        """BFCL ends the turn at a step that fails to decode or decodes to an empty list."""
        return self.calls is None or bool(self.empty)

    @classmethod
    def from_json(cls, d: dict) -> Decoded:
        calls = d.get("calls")
        return cls(calls=None if calls is None else tuple(calls), empty=d.get("empty"),
                   ast=d.get("ast"), error=d.get("error"))


@dataclass(frozen=True)
class Execution:
    """What one step's calls gave: a result per call, in order, and the calls the policy refused
    (each answered with BFCL's error text for a failed call, never executed)."""

    results: tuple[str, ...]
    refused: tuple[Refusal, ...] = ()

    @classmethod
    def from_json(cls, d: dict) -> Execution:
        return cls(results=tuple(d["results"]), refused=tuple(Refusal.from_json(r) for r in d["refused"]))


@dataclass(frozen=True)
class Score:
    """BFCL's verdict on one episode; `decoded` is what the model's steps decoded to (turn -> step ->
    calls); `refused` the calls among them the checker got only as a failing stand-in."""

    valid: bool
    error_type: str | None
    error_message: Any
    decoded: list
    n_turns: int
    n_truth_turns: int
    refused: list = field(default_factory=list)

    @classmethod
    def from_json(cls, d: dict) -> Score:
        return cls(valid=bool(d["valid"]), error_type=d.get("error_type"),
                   error_message=d.get("error_message"), decoded=d.get("decoded", []),
                   n_turns=d.get("n_turns", 0), n_truth_turns=d.get("n_truth_turns", 0),
                   refused=d.get("refused", []))


def worker_environment(install: BfclInstall, home: Path) -> dict[str, str]:
    """The worker's whole environment, built from scratch: no variable is inherited except PATH.
    HOME, TMPDIR and BFCL's project root (where BFCL writes) are the worker's private folder `home`.

    TZ and PYTHONHASHSEED are fixed because BFCL environments format timestamps in local time
    and iterate over sets, and the kit compares passes token for token.
    """
    kit_parent = Path(kit.__file__).resolve().parent.parent
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(home),
        "TMPDIR": str(home),
        "LANG": "C.UTF-8",
        "BFCL_PROJECT_ROOT": str(home),
        "PYTHONPATH": os.pathsep.join([str(install.site_dir), str(kit_parent)]),
        "PYTHONHASHSEED": "0",
        "PYTHONUNBUFFERED": "1",
        "TZ": "UTC",
    }


class BfclWorker:
    """A running BFCL worker process. Use as a context manager:

        with BfclWorker(ensure_bfcl()) as worker:
            episodes = worker.load_episodes(count=80)
    """

    def __init__(self, install: BfclInstall, *, python: str | None = None,
                 timeout_s: float = 120.0, log_path: Path | None = None):
        self.install = install
        self.python = python or sys.executable
        self.timeout_s = timeout_s
        self.log_path = Path(log_path) if log_path else install.project_root / "worker.log"
        self._proc: subprocess.Popen | None = None
        self._home: Path | None = None  # the worker's private HOME and cwd, deleted when it stops
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._next_id = 0
        # Set once the process is gone: its environment state went with it, so a silent restart
        # in the middle of an episode would give wrong tool results. A new BfclWorker is needed.
        self._ended: str | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def __enter__(self) -> BfclWorker:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        if self._proc is not None:
            return
        if self._ended:
            raise BfclWorkerError(f"this BFCL worker has ended ({self._ended})",
                                  "start a new BfclWorker (environment state does not survive)")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._home = Path(tempfile.mkdtemp(prefix="kit-bfcl-worker-"))
        log = open_append(self.log_path)
        try:
            self._proc = subprocess.Popen(
                [self.python, "-S", "-m", "kit.workloads.bfcl.worker"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                env=worker_environment(self.install, self._home), cwd=str(self._home),
                text=True, encoding="utf-8", bufsize=1,
            )
        except OSError as e:
            self._remove_home()
            raise BfclWorkerError(f"cannot start the BFCL worker with {self.python}: {e}",
                                  "check the Python interpreter the kit runs under") from e
        finally:
            log.close()
        threading.Thread(target=self._pump, args=(self._proc.stdout,), daemon=True).start()

    def _pump(self, stream) -> None:
        for line in stream:
            self._lines.put(line)
        self._lines.put(None)

    @property
    def pid(self) -> int | None:
        """The running worker's process id (None when it is not running)."""
        return self._proc.pid if self._proc else None

    @property
    def home(self) -> Path | None:
        """The running worker's private HOME and working directory."""
        return self._home

    def _remove_home(self) -> None:
        home, self._home = self._home, None
        if home is not None:
            shutil.rmtree(home, ignore_errors=True)

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        self._ended = self._ended or "closed"
        try:
            if proc.stdin:
                proc.stdin.close()
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        self._remove_home()

    # -- calls -------------------------------------------------------------------------------

    def call(self, op: str, **args: Any) -> Any:
        """Send one operation and wait for its answer; raise BfclWorkerError on any failure."""
        if self._proc is None:
            self.start()
        assert self._proc is not None and self._proc.stdin is not None
        self._next_id += 1
        req_id = self._next_id
        try:
            self._proc.stdin.write(json.dumps({"id": req_id, "op": op, "args": args}) + "\n")
            self._proc.stdin.flush()
        except OSError:
            raise self._died(op) from None
        try:
            line = self._lines.get(timeout=self.timeout_s)
        except queue.Empty:
            self._kill("timed out")
            raise BfclWorkerError(f"BFCL worker gave no answer to {op!r} within {self.timeout_s:g} s",
                                  f"see {self.log_path}; raise the timeout if the machine is slow"
                                  ) from None
        if line is None:
            raise self._died(op)
        reply = json.loads(line)
        if reply.get("id") != req_id:
            raise BfclWorkerError(f"BFCL worker answered request {reply.get('id')} for {req_id}",
                                  "this is a kit bug; please report it")
        if not reply.get("ok"):
            raise BfclWorkerError(f"BFCL worker could not {op}: {reply.get('kind')}: "
                                  f"{reply.get('error')}", f"see {self.log_path}")
        return reply["result"]

    def _kill(self, reason: str = "killed") -> int | None:
        """Make sure the worker is gone; its exit status (None if it was not running)."""
        self._ended = self._ended or reason
        proc, self._proc = self._proc, None
        status = None
        if proc is not None:
            proc.kill()
            status = proc.wait()
        self._remove_home()
        return status

    def _died(self, op: str) -> BfclWorkerError:
        status = self._kill("exited")
        tail = ""
        try:
            tail = " ".join(self.log_path.read_text(errors="replace").strip().splitlines()[-2:])
        except OSError:
            pass
        if status is not None and status < 0 and -status in (signal.SIGXCPU, signal.SIGXFSZ):
            limit = "CPU time" if -status == signal.SIGXCPU else "file size"
            return BfclWorkerError(f"BFCL worker exceeded its {limit} limit during {op!r} "
                                   f"({signal.Signals(-status).name})",
                                   "see kit/workloads/bfcl/confinement.py for the limits")
        if status is not None and status < 0:  # killed by a signal from outside: the install is not the cause
            return BfclWorkerError(f"BFCL worker was killed by {signal.Signals(-status).name} during {op!r}",
                                   f"something outside the kit stopped it (the kernel's out-of-memory killer sends "
                                   f"SIGKILL: check free memory); see {self.log_path}")
        return BfclWorkerError(f"BFCL worker exited during {op!r}: {tail}".rstrip(": "),
                               f"see {self.log_path}; `kit workloads install bfcl` repairs the install")

    # -- operations --------------------------------------------------------------------------

    def hello(self) -> dict:
        return self.call("hello")

    def load_episodes(self, count: int | None = None,
                      ids: list[str] | None = None) -> list[Episode]:
        """The first `count` multi_turn_base episodes by ascending id, or the given ids in order."""
        return [Episode.from_json(d) for d in self.call("load_episodes", count=count, ids=ids)]

    def system_prompt(self, episode_id: str, functions: int | None = None) -> str:
        """BFCL's system prompt of the episode: every function doc, or the first `functions` of them."""
        if functions is None:
            return self.call("system_prompt", episode_id=episode_id)
        return self.call("system_prompt", episode_id=episode_id, functions=functions)

    def decode(self, text: str) -> Decoded:
        return Decoded.from_json(self.call("decode", text=text))

    def execute(self, pass_id: str, episode_id: str, calls: list[str] | tuple[str, ...]) -> Execution:
        """Run one step's calls (those the call policy allows) in the (pass, episode)'s environment."""
        return Execution.from_json(self.call("execute", pass_id=pass_id, episode_id=episode_id,
                                             calls=list(calls)))

    def release(self, pass_id: str, episode_id: str) -> int:
        return self.call("release", pass_id=pass_id, episode_id=episode_id)

    def score(self, episode_id: str, turns: list[list[str]]) -> Score:
        """Score step texts per turn (re-decoded by the worker, as BFCL's evaluator does)."""
        return Score.from_json(self.call("score", episode_id=episode_id, turns=turns))

    def check(self, episode_id: str, decoded_turns: list[list[list[str]]]) -> Score:
        """Score already decoded calls (turn -> step -> call strings)."""
        return Score.from_json(self.call("check", episode_id=episode_id,
                                         decoded_turns=decoded_turns))
