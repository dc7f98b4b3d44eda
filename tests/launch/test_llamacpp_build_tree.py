"""Where a llama.cpp build is made (kit.launch.llamacpp.llamacpp_build): ccache as the compiler launcher where it
is on PATH, the sources at the same place in every build's work folder, and one build of a (build, backend) at a
time. cmake's steps are recorded, not run (the fakes of test_llamacpp_cuda_build); ccache is a script printing
the first line of ccache 4.7.5's `--version`."""

from __future__ import annotations

import fcntl
import json
import threading
import time

import pytest

from kit.launch.llamacpp import llamacpp_build
from tests.launch import test_llamacpp_cuda_build as fakes
from tests.launch.test_llamacpp_cuda_build import _fetch, _recorded_steps

cache = fakes.cache  # the fixtures: a cache folder of its own, a fake folder first on PATH
fake_path = fakes.fake_path


@pytest.mark.parametrize("switch", [None, "0"])
def test_ccache_on_path_is_the_compiler_launcher_and_recorded(cache, tmp_path, fake_path, monkeypatch, switch):
    """ccache (a script printing ccache 4.7.5's first line here) compiles each unchanged translation unit once
    across builds: the launcher flags, CCACHE_BASEDIR = the build's work folder (its sources lie at src/ in
    every build) and BUILD.json's record of it; KIT_CCACHE=0 builds without it."""
    bin_dir = fake_path(ccache="ccache version 4.7.5\nFeatures: file-storage http redis\n")
    if switch is not None:
        monkeypatch.setenv("KIT_CCACHE", switch)
    else:
        monkeypatch.delenv("KIT_CCACHE", raising=False)
    envs: list[dict[str, str] | None] = []
    steps = _recorded_steps(monkeypatch, envs)
    binary = llamacpp_build.build(11434, "portable", say=lambda _l: None, fetch=_fetch(tmp_path, []), jobs=2)
    work = cache / "engines" / "llama-server-b11434-portable.work"
    configure, _build = steps
    record = json.loads((binary.parent / llamacpp_build.BUILD_RECORD).read_text())
    assert configure[2] == str(work / "src" / "llama.cpp") and (work / "src" / "llama.cpp" / "CMakeLists.txt").is_file()
    launchers = [flag for flag in configure if "COMPILER_LAUNCHER" in flag]
    if switch == "0":
        assert launchers == [] and envs == [None, None] and "compiler_cache" not in record
        return
    assert launchers == [f"-DCMAKE_C_COMPILER_LAUNCHER={bin_dir / 'ccache'}",
                         f"-DCMAKE_CXX_COMPILER_LAUNCHER={bin_dir / 'ccache'}"]
    assert all(env is not None and env["CCACHE_BASEDIR"] == str(work) for env in envs) and len(envs) == 2
    assert record["compiler_cache"] == {"path": str(bin_dir / "ccache"), "version": "ccache version 4.7.5"}


def test_a_second_build_of_the_same_build_waits_for_the_first_and_builds_nothing(cache, tmp_path, fake_path,
                                                                                monkeypatch):
    fake_path()
    monkeypatch.setenv("KIT_CCACHE", "0")
    steps = _recorded_steps(monkeypatch)
    target = llamacpp_build.install_dir(11434, "portable")
    target.parent.mkdir(parents=True)
    said: list[str] = []
    with (target.parent / (target.name + ".lock")).open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the first build, in another process
        waiting = threading.Thread(target=llamacpp_build.build, args=(11434, "portable"),
                                   kwargs={"say": said.append, "fetch": _fetch(tmp_path, []), "jobs": 2})
        waiting.start()
        deadline = time.monotonic() + 30
        while not said and time.monotonic() < deadline:  # until it finds the lock held
            time.sleep(0.01)
        waiting.join(timeout=0.5)  # and then waits on it, building nothing
        assert waiting.is_alive() and steps == []
        assert said == ["another process is building llama-server-b11434-portable; waiting for it to finish ..."]
    waiting.join(timeout=30)
    assert not waiting.is_alive() and len(steps) == 2  # it built, once the first let go
    assert llamacpp_build.build(11434, "portable", say=said.append, fetch=_fetch(tmp_path, [])) == \
        target / llamacpp_build.BINARY and len(steps) == 2
