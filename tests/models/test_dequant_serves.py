"""`kit models dequant` output is a model the real engine serves: SmolLM2 Q4_1 -> F16 -> llama-server.

Runs the real CLI on the real pinned model (the user cache, fetched once if missing) and the real
embedded llama-server (tiny context, 8 tokens).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys

import gguf
import pytest

from kit.engines.base import CompletionRequest
from kit.engines.llamacpp import LlamaCppEngine
from kit.launch.native import NativeServer

pytestmark = pytest.mark.engine


def test_dequantized_f16_is_served_by_the_embedded_engine(smollm2, server_spec, tmp_path):
    f16 = tmp_path / "smollm2-f16.gguf"
    done = subprocess.run([sys.executable, "-m", "kit.cli", "models", "dequant", str(smollm2), "-o", str(f16),
                           "--to", "F16"], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    digest = hashlib.sha256(f16.read_bytes()).hexdigest()
    assert done.stdout.split()[0] == digest  # the CLI prints the file's real sha256
    assert f16.stat().st_size > smollm2.stat().st_size  # F16 is bigger than Q4_1
    file_type = gguf.GGUFReader(f16).get_field("general.file_type")
    assert file_type.contents() == gguf.LlamaFileType.MOSTLY_F16

    with NativeServer(server_spec(model=f16, ctx_size=512), tmp_path / "server.log") as server:
        engine = LlamaCppEngine(server.url)
        try:
            info = engine.info()
            completion = engine.complete(CompletionRequest(prompt="The capital of France is", max_tokens=8,
                                                           temperature=0.0, seed=42))
        finally:
            engine.close()
    assert info["build_info"] == "b1-7e4c0a9"
    assert info["model_path"] == str(f16)
    assert completion.token_ids and 0 < len(completion.token_ids) <= 8
    assert completion.decode_tokens == len(completion.token_ids)
