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


@pytest.fixture
def tiny_gguf(tmp_path: Path) -> Path:
    """A small synthetic GGUF with the tensor kinds conversion must handle.

    token_embd: Q4_1 (2-D), attn_q: F32 (2-D), attn_norm: F32 (1-D), odd: F32 2-D whose rows (48)
    no 32-block divides, positions: I32. Metadata includes strings, string and int arrays, floats, bools.
    """
    import gguf
    import numpy as np

    rng = np.random.default_rng(7)
    path = tmp_path / "tiny-Q4_1.gguf"
    writer = gguf.GGUFWriter(path, arch="llama")
    writer.add_name("tiny test model")
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    writer.add_uint32("llama.block_count", 1)
    writer.add_float32("llama.rope.freq_base", 10000.0)
    writer.add_bool("tokenizer.ggml.add_bos_token", False)
    writer.add_array("tokenizer.ggml.tokens", ["<s>", "</s>", "hello", "wörld"])
    writer.add_array("tokenizer.ggml.token_type", [1, 3, 1, 1])
    writer.add_string("tokenizer.chat_template", "{{ messages }}")
    embd = rng.standard_normal((8, 64), dtype=np.float32)
    writer.add_tensor("token_embd.weight", gguf.quants.quantize(embd, gguf.GGMLQuantizationType.Q4_1),
                      raw_dtype=gguf.GGMLQuantizationType.Q4_1)
    writer.add_tensor("blk.0.attn_q.weight", rng.standard_normal((16, 64), dtype=np.float32))
    writer.add_tensor("blk.0.attn_norm.weight", rng.standard_normal(64, dtype=np.float32))
    writer.add_tensor("odd.weight", rng.standard_normal((4, 48), dtype=np.float32))
    writer.add_tensor("positions", np.arange(10, dtype=np.int32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
