"""Run `kit` in-process as a user would and say how it ended: exit code and the lines it printed."""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kit import cli

FIXTURES = Path(__file__).parents[1] / "fixtures"
BAD_PROTOCOLS = sorted((FIXTURES / "bad_protocols").glob("*.yaml"))
BAD_OPTIONS = json.loads((FIXTURES / "bad_options.json").read_text())


def expected(protocol_file: Path) -> str:
    """What the error for a corpus file must name (its first line: `# expect: TEXT`)."""
    return protocol_file.read_text().splitlines()[0].removeprefix("# expect: ")


@dataclass
class Ending:
    code: int
    lines: list[str]  # non-empty lines of stdout and stderr together

    def clear_error(self, needle: str) -> bool:
        return (self.code not in (0, None) and len(self.lines) == 1 and self.lines[0].startswith("kit: error: ")
                and needle in self.lines[0])


def run_kit(args: list[str], capsys) -> Ending:
    argv = sys.argv
    sys.argv = ["kit", *args]
    try:
        cli.main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = argv
    out, err = capsys.readouterr()
    return Ending(code, [line for line in (out + err).splitlines() if line.strip()])


@contextmanager
def places(root: Path):
    """The paths and the busy port a bad option line refers to ({out}, {file}, {noexec}, ...)."""
    (root / "out").mkdir()
    (root / "run").mkdir()
    (root / "folder").mkdir()
    (root / "a-file").write_text("not a folder\n")
    noexec = root / "llama-server"
    noexec.write_text("#!/bin/sh\n")
    noexec.chmod(stat.S_IRUSR | stat.S_IWUSR)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield {"out": str(root / "out"), "run_dir": str(root / "run"), "file": str(root / "a-file"),
               "noexec": str(noexec), "missing": str(root / "missing"), "folder": str(root / "folder"),
               "busy_port": str(busy.getsockname()[1])}


def fill(args: list[str], where: dict[str, str]) -> list[str]:
    return [arg.format(**where) for arg in args]


def written(root: Path) -> list[str]:
    """Everything under the folders a refused command must leave empty."""
    return [str(p) for name in ("out", "run", "folder") for p in (root / name).rglob("*")] + \
        [str(p) for p in root.iterdir() if p.name not in ("out", "run", "folder", "a-file", "llama-server")]


__all__ = ["BAD_OPTIONS", "BAD_PROTOCOLS", "Ending", "expected", "fill", "os", "places", "run_kit", "written"]
