"""Run one hostile case through `kit` in a process of its own and judge how it ended (see README.md here)."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from tests.adversarial.forks import Forks

REPO = Path(__file__).resolve().parents[2]
CLASSES = ("bundle", "run folder", "protocol file", "import file", "engine answer", "concurrency and faults",
           "browser", "proxy client", "bisect folder")
OUTCOMES = ("clear", "traceback", "hang", "accepted", "touched", "executed")
_WATCHED_SOURCE = (REPO / "kit", REPO / "protocols")


@dataclass
class Ending:
    code: int | None  # None: killed after the timeout
    lines: list[str]  # non-empty lines of stdout and stderr together
    text: str


@dataclass(frozen=True)
class Case:
    cls: str
    name: str
    make: Callable[[Scratch], list[str]]
    expect: str = "refused"  # or "handled"
    needle: str = ""
    check: Callable[[Scratch, Ending], str | None] | None = None
    timeout: float = 60.0
    engine: bool = False  # the kit starts the real llama-server in this case (the `engine` test tier)
    progress: tuple[str, ...] = ()  # starts of the progress lines a long step prints before its refusal
    own_process: bool = False  # the case finds the kit by its command line (/proc): never forked (forks.py)

    def __post_init__(self) -> None:
        if self.cls not in CLASSES or self.expect not in ("refused", "handled"):
            raise ValueError(f"case {self.name!r}: class {self.cls!r} or expect {self.expect!r} unknown")

    @property
    def id(self) -> str:
        return f"{self.cls}: {self.name}"


@dataclass
class Scratch:
    """The folders of one case. The kit may write under inbox, outputs, cache and tmp; nowhere else."""

    root: Path
    stack: ExitStack = field(default_factory=ExitStack)

    def __post_init__(self) -> None:
        for name in ("inbox", "outputs", "cache", "tmp", "home/.ssh", "outside"):
            (self.root / name).mkdir(parents=True, exist_ok=True)
        real_cache = Path(os.environ.get("KIT_CACHE_DIR") or Path.home() / ".cache" / "kit")
        for shared in ("models", "engines"):
            if (real_cache / shared).exists():
                (self.cache / shared).symlink_to(real_cache / shared)
        (self.home / ".ssh" / "id_ed25519").write_text("canary private key\n")
        (self.home / ".bashrc").write_text("# canary\n")
        (self.outside / "keep.txt").write_text("a file no input may change\n")
        self.canary_program.write_text(f"#!/bin/sh\necho executed > '{self.marker}'\nexec sleep 30\n")
        self.canary_program.chmod(0o755)

    inbox = property(lambda self: self.root / "inbox")
    outputs = property(lambda self: self.root / "outputs")
    cache = property(lambda self: self.root / "cache")
    tmp = property(lambda self: self.root / "tmp")
    home = property(lambda self: self.root / "home")
    outside = property(lambda self: self.root / "outside")
    marker = property(lambda self: self.root / "EXECUTED")
    canary_program = property(lambda self: self.root / "outside" / "llama-server")

    def defer(self, callback: Callable[[], object]) -> None:
        self.stack.callback(callback)

    def victim(self) -> int:
        """A process that is not the kit's: the case may name its pid anywhere; it must survive."""
        process = subprocess.Popen(["sleep", "300"], start_new_session=True)
        self._victims.append(process)
        self.defer(lambda: (process.kill(), process.wait()))
        return process.pid

    @property
    def _victims(self) -> list[subprocess.Popen]:
        if not hasattr(self, "_victim_list"):
            self._victim_list: list[subprocess.Popen] = []
        return self._victim_list

    def env(self) -> dict[str, str]:
        return {**os.environ, "HOME": str(self.home), "KIT_CACHE_DIR": str(self.cache), "KIT_OUTPUTS": str(self.outputs),
                "TMPDIR": str(self.tmp), "PYTHONPATH": str(REPO), "COLUMNS": "80"}


def _snapshot(scratch: Scratch) -> dict[str, str]:
    """Every file that must not change: canaries, the kit's own source and protocols, the scratch's top level."""
    seen: dict[str, str] = {}
    for root in (scratch.home, scratch.outside, *_WATCHED_SOURCE):
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                stat = path.stat()
                seen[str(path)] = f"{stat.st_size}:{stat.st_mtime_ns}" if root in _WATCHED_SOURCE else \
                    hashlib.sha256(path.read_bytes()).hexdigest()
    for path in scratch.root.iterdir():
        seen.setdefault(str(path), "top level")
    return seen


def run_case(case: Case, root: Path, forks: Forks | None = None) -> tuple[str, str]:
    """(outcome, detail) of one case made and run under the empty folder `root`: `kit` in a fresh process, or
    forked from `forks` (the same process as far as the case can see, without a Python start) unless the case
    needs its own."""
    scratch = Scratch(root)
    with scratch.stack:
        args = case.make(scratch)
        before = _snapshot(scratch)
        if forks is None or case.own_process:
            code, text = fresh_process(args, scratch, case.timeout)
        else:
            code, text = forks.run(args, scratch.tmp, scratch.env(), case.timeout)
        ending = Ending(code, [ln for ln in text.splitlines() if ln.strip()], text)
        return _judge(case, scratch, ending, before)


def fresh_process(args: list[str], scratch: Scratch, timeout: float) -> tuple[int | None, str]:
    """(exit status, or None when killed after `timeout`; stdout and stderr together) of `python -m kit.cli`."""
    process = subprocess.Popen([sys.executable, "-m", "kit.cli", *args], cwd=scratch.tmp, env=scratch.env(),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, errors="replace", start_new_session=True)
    try:
        text, _ = process.communicate(timeout=timeout)
        return process.returncode, text
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        text, _ = process.communicate()
        return None, text


def _judge(case: Case, scratch: Scratch, ending: Ending, before: dict[str, str]) -> tuple[str, str]:
    if scratch.marker.exists():
        return "executed", scratch.marker.read_text().strip()
    after = _snapshot(scratch)
    changed = sorted(path for path in set(before) | set(after) if before.get(path) != after.get(path))
    dead = [p.pid for p in scratch._victims if p.poll() is not None]
    if changed or dead:
        return "touched", f"changed {changed[:3]} killed {dead}"
    last = ending.lines[-1] if ending.lines else "(nothing printed)"
    if ending.code is None:
        return "hang", last
    if "Traceback (most recent call last)" in ending.text:
        return "traceback", ending.text[-400:]
    if case.expect == "refused":
        said = [line for line in ending.lines if not (case.progress and line.startswith(case.progress))]
        clear = (ending.code != 0 and len(said) == 1 and said[0].startswith("kit: error: ")
                 and case.needle in said[0])
        if not clear:
            return "accepted", f"exit {ending.code}: " + " | ".join(ending.lines)[-400:]
    problem = case.check(scratch, ending) if case.check else None
    if problem:
        return "accepted", problem
    return "clear", last


def all_cases() -> list[Case]:
    import importlib

    cases: list[Case] = []
    for module in sorted(Path(__file__).parent.glob("cases_*.py")):
        cases += importlib.import_module(f"tests.adversarial.{module.stem}").CASES
    names = [case.id for case in cases]
    duplicated = {name for name in names if names.count(name) > 1}
    if duplicated:
        raise ValueError(f"adversarial cases named twice: {sorted(duplicated)}")
    return cases
