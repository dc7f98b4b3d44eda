"""Running `kit` in this process exactly as `python -m kit.cli` does (kit.cli.main: one-line errors,
exit codes), with the temporary and working folders pointed at empty scratch folders that must be
empty again afterwards: the extraction folder is removed and nothing is written anywhere else."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from kit.cli import main


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
