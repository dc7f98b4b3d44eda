"""Running `kit` in this process exactly as `python -m kit.cli` does (kit.cli.main: one-line errors,
exit codes), without a new interpreter importing the kit each time. `run_kit` points the temporary and
working folders at empty scratch folders that must be empty again afterwards (the extraction folder is
removed and nothing is written anywhere else); `run_here` answers like `subprocess.run` would."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import tempfile
import traceback
from dataclasses import dataclass
from pathlib import Path

from kit.cli import main
from kit.run.faults import STOP_SIGNALS


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str
    left_behind: list[str]  # anything found in the scratch temporary or working folder afterwards

    @property
    def text(self) -> str:
        return self.out + self.err

    def one_line_reason(self) -> str:
        """The reason it failed: the single `kit: error:` line, or the first FAIL/MISMATCH line of a
        verdict ending FAILED; AssertionError when it is neither."""
        err = [line for line in self.err.splitlines() if line.strip()]
        if err:
            assert len(err) == 1 and err[0].startswith("kit: error: ") and not self.out.strip(), self.text
            return err[0]
        lines = self.out.splitlines()
        assert lines and lines[-1].startswith("FAILED: "), self.text
        return next(line for line in lines if line.startswith(("FAIL ", "MISMATCH ")))


def run_kit(*args: str, scratch: Path) -> Outcome:
    tmp, cwd = scratch / "tmp", scratch / "cwd"
    tmp.mkdir(parents=True)
    cwd.mkdir()
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP)}
    saved_tempdir, saved_argv, saved_cwd = tempfile.tempdir, sys.argv, os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        tempfile.tempdir, sys.argv = str(tmp), ["kit", *args]
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
    finally:
        os.chdir(saved_cwd)
        tempfile.tempdir, sys.argv = saved_tempdir, saved_argv
        for number, handler in saved.items():
            signal.signal(number, handler)
    left = sorted(str(p.relative_to(scratch)) for p in (*tmp.rglob("*"), *cwd.rglob("*")))
    return Outcome(code, out.getvalue(), err.getvalue(), left)


def run_here(*args: str, cwd: Path | str | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`subprocess.run([python, -m, kit.cli, *args], capture_output=True, text=True, cwd=cwd)` in this process:
    its exit code, stdout and stderr; an exception the kit lets escape is printed as the interpreter would
    (a traceback, exit code 1). `env`: variables set for the call. For the kit's refusals and short commands;
    what needs a process of its own (signals, locks held by another process, a hang) still runs in one."""
    saved_signals = {number: signal.getsignal(number) for number in STOP_SIGNALS}
    saved_argv, saved_cwd = sys.argv, os.getcwd()
    saved_env = {key: os.environ.get(key) for key in env or {}}
    out, err = io.StringIO(), io.StringIO()
    code = 0
    try:
        sys.argv = ["kit", *map(str, args)]
        os.environ.update(env or {})
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if not isinstance(exc.code, (int, type(None))):
                    print(exc.code, file=sys.stderr)
            except Exception:  # noqa: BLE001 - what the interpreter prints for an escaped exception
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(saved_cwd)
        sys.argv = saved_argv
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        for number, handler in saved_signals.items():
            signal.signal(number, handler)
    return subprocess.CompletedProcess([sys.executable, "-m", "kit.cli", *map(str, args)], code,
                                       out.getvalue(), err.getvalue())
