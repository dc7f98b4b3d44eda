"""`kit` with no subcommand: help text when not in a terminal (scripts, pipes), the launcher in one."""

from __future__ import annotations

import subprocess
import sys


def test_kit_without_a_terminal_prints_help_and_does_not_open_the_launcher():
    done = subprocess.run([sys.executable, "-m", "kit.cli"], capture_output=True, text=True, timeout=60, check=False,
                          stdin=subprocess.DEVNULL)
    assert done.returncode == 0
    assert "Usage:" in done.stdout and "opens the launcher" in done.stdout
    assert "\x1b[" not in done.stdout + done.stderr  # no terminal UI was drawn
