"""`kit ...` run in this process through the real entry point (kit.cli.main: one-line errors, exit codes)."""

from __future__ import annotations

import sys

import pytest

from kit import cli


def run_main(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `kit ARGS`."""
    monkeypatch.setattr(sys, "argv", ["kit", *args])
    with pytest.raises(SystemExit) as ended:
        cli.main()
    out, err = capsys.readouterr()
    return ended.value.code, out, err
