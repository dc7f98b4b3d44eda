"""Format conversion on a tiny synthetic GGUF: types chosen per tensor, values, metadata, refusals."""

from __future__ import annotations

import os

import gguf
import numpy as np
import pytest

from kit.core.errors import ConfigError, KitError
from kit.models.dequant import dequantize_to_f16, open_gguf, requantize
from kit.models.derived import ensure_format
from kit.models.fetch import ensure_model
from kit.models.hashing import sha256_file

T = gguf.GGMLQuantizationType


def _tensors(path):
    reader = gguf.GGUFReader(path)
    return reader, {t.name: t for t in reader.tensors}


def _values(tensor) -> np.ndarray:
    return gguf.quants.dequantize(np.asarray(tensor.data), tensor.tensor_type).reshape(-1)


def test_dequantize_to_f16_types_values_and_metadata(tiny_gguf, tmp_path):
    out = tmp_path / "tiny-F16.gguf"
    digest = dequantize_to_f16(tiny_gguf, out)
    assert digest == sha256_file(out)
    src, src_t = _tensors(tiny_gguf)
    dst, dst_t = _tensors(out)
    assert list(dst_t) == list(src_t)
    assert {n: t.tensor_type for n, t in dst_t.items()} == {
        "token_embd.weight": T.F16, "blk.0.attn_q.weight": T.F16, "blk.0.attn_norm.weight": T.F32,
        "odd.weight": T.F16, "positions": T.I32}
    for name, tensor in dst_t.items():
        assert list(tensor.shape) == list(src_t[name].shape)
    # F16 holds exactly the source values rounded to half precision; 1-D and integer tensors are untouched.
    expected = _values(src_t["token_embd.weight"]).astype(np.float16)
    assert np.array_equal(np.asarray(dst_t["token_embd.weight"].data).reshape(-1), expected)
    assert np.array_equal(np.asarray(dst_t["blk.0.attn_norm.weight"].data), np.asarray(src_t["blk.0.attn_norm.weight"].data))
    assert np.array_equal(np.asarray(dst_t["positions"].data), np.arange(10, dtype=np.int32))
    src_keys = {k for k in src.fields if not k.startswith("GGUF.")}
    assert {k for k in dst.fields if not k.startswith("GGUF.")} == src_keys
    for key in src_keys - {"general.file_type"}:
        assert dst.fields[key].contents() == src.fields[key].contents(), key
    assert dst.fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_F16


def test_requantize_q8_0_and_fallback_for_rows_blocks_do_not_divide(tiny_gguf, tmp_path):
    f16 = tmp_path / "tiny-F16.gguf"
    dequantize_to_f16(tiny_gguf, f16)
    q8 = tmp_path / "tiny-Q8_0.gguf"
    requantize(f16, q8, "Q8_0")
    reader, tensors = _tensors(q8)
    assert tensors["token_embd.weight"].tensor_type == T.Q8_0
    assert tensors["blk.0.attn_q.weight"].tensor_type == T.Q8_0
    assert tensors["odd.weight"].tensor_type == T.F16  # 48 weights per row: no whole 32-blocks
    assert tensors["blk.0.attn_norm.weight"].tensor_type == T.F32
    assert reader.fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_Q8_0
    _, f16_t = _tensors(f16)
    a, b = _values(tensors["blk.0.attn_q.weight"]), _values(f16_t["blk.0.attn_q.weight"])
    assert np.max(np.abs(a - b)) < 0.05 * np.max(np.abs(b))
    assert not np.array_equal(a, b)  # it really was quantized


def test_requantize_any_source_equals_going_through_f16(tiny_gguf, tmp_path):
    via_f16 = tmp_path / "f16.gguf"
    dequantize_to_f16(tiny_gguf, via_f16)
    assert requantize(tiny_gguf, tmp_path / "direct.gguf", "Q4_0") == requantize(via_f16, tmp_path / "two-step.gguf", "Q4_0")


@pytest.mark.parametrize("target", ["Q4_K_M", "Q3_K_M", "Q6_K"])
def test_k_quants_are_refused_with_the_fix(tiny_gguf, tmp_path, target):
    with pytest.raises(KitError, match="llama-quantize"):
        requantize(tiny_gguf, tmp_path / "k.gguf", target)
    assert not list(tmp_path.glob("*k.gguf*"))


def test_bad_targets_and_paths(tiny_gguf, tmp_path):
    with pytest.raises(ConfigError, match="unknown target format"):
        requantize(tiny_gguf, tmp_path / "x.gguf", "Q7_0")
    with pytest.raises(ConfigError, match="dequantize_to_f16"):
        requantize(tiny_gguf, tmp_path / "x.gguf", "F16")
    with pytest.raises(ConfigError, match="same file"):
        dequantize_to_f16(tiny_gguf, tiny_gguf)
    not_gguf = tmp_path / "n.gguf"
    not_gguf.write_bytes(b"nope" * 10)
    with pytest.raises(ConfigError, match="cannot read GGUF"):
        dequantize_to_f16(not_gguf, tmp_path / "y.gguf")
    assert not (tmp_path / "x.gguf").exists() and not (tmp_path / "y.gguf").exists()


def test_ensure_format_records_provenance_and_reuses_only_a_matching_file(tiny_gguf, tmp_path):
    cache = tmp_path / "cache"
    source = ensure_model(tiny_gguf, cache_dir=cache)
    made = ensure_format(source, "Q8_0", cache)
    assert made.path.name == "tiny-Q4_1-req-Q8_0.gguf" and made.source == "derived"
    assert ensure_format(source, "Q8_0", cache).source == "derived (cached)"
    made.path.write_bytes(made.path.read_bytes()[:-1] + b"\x01")  # damage it (same size) ...
    stamp = os.stat(made.path).st_mtime_ns + 2_000_000_000  # ... at a visibly later time
    os.utime(made.path, ns=(stamp, stamp))
    again = ensure_format(source, "Q8_0", cache)
    assert again.source == "derived" and again.sha256 == made.sha256


def test_open_gguf_reads_the_same_as_the_stock_reader(tiny_gguf):
    fast, stock = open_gguf(tiny_gguf), gguf.GGUFReader(tiny_gguf)
    assert isinstance(fast, gguf.GGUFReader)
    assert list(fast.fields) == list(stock.fields)
    assert all(fast.fields[k].contents() == stock.fields[k].contents() for k in stock.fields)
    assert [(t.name, t.tensor_type, list(t.shape), np.asarray(t.data).tobytes()) for t in fast.tensors] == \
        [(t.name, t.tensor_type, list(t.shape), np.asarray(t.data).tobytes()) for t in stock.tensors]
