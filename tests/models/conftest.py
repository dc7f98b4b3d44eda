"""Shared fixtures for the model-file tests: small registries, fake files, a tiny synthetic GGUF."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kit.models.registry import parse_registry

SMOLLM2 = "smollm2-135m-instruct-q4_1"


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _registry_with(entry: dict, name: str = "fake-model"):
    body = {"file": "fake.gguf", "quant": "Q8_0", "family": "chatml", **entry}
    return parse_registry({"version": 1, "models": {name: body}}, origin="test-registry")


@pytest.fixture
def sha256_bytes():
    """hashlib's sha256 of some bytes (an independent check on the kit's hashing)."""
    return _sha256_bytes


@pytest.fixture
def registry_with():
    """Build a registry holding one model entry `fake-model` (defaults filled in)."""
    return _registry_with


@pytest.fixture
def fake_gguf(tmp_path: Path) -> Path:
    """A small file that starts with the GGUF magic (not a loadable model; enough for fetch tests)."""
    path = tmp_path / "src" / "fake.gguf"
    path.parent.mkdir()
    path.write_bytes(b"GGUF" + bytes(range(256)) * 40)
    return path


@pytest.fixture
def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache"
