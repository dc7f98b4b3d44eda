"""Provider variants: the same launcher with another model file or --cache-ram (no server started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kit.core.errors import ConfigError
from kit.launch.native import ServerSpec
from kit.launch.provider import ExternalProvider, NativeProvider


def test_a_native_variant_changes_only_what_it_is_asked_to():
    base = NativeProvider(ServerSpec(binary=Path("/bin/llama-server"), model=Path("/m/a.gguf"), cache_ram=0),
                          {"model_name": "a", "model_family": "chatml"})
    other = base.variant(model=Path("/m/b.gguf"), details={"model_name": "b", "format": "F16"})
    argv = other.spec.argv(8080)
    assert argv[argv.index("-m") + 1] == "/m/b.gguf" and argv[argv.index("--cache-ram") + 1] == "0"
    assert other.describe()["model_name"] == "b" and other.describe()["model_family"] == "chatml"
    assert "--cache-ram" not in base.variant(cache_ram=None).spec.argv(8080)
    assert base.spec.model == Path("/m/a.gguf")  # the original is untouched


def test_an_external_engine_cannot_be_varied():
    with pytest.raises(ConfigError, match="cannot restart"):
        ExternalProvider("http://127.0.0.1:8080").variant(cache_ram=0)
