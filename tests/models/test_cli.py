"""`kit models list | pull | dequant` through click's test runner (real files, no network)."""

from __future__ import annotations

import hashlib

import gguf
from click.testing import CliRunner

from kit.models.cli import models


def _registry_file(tmp_path, digest: str, source) -> str:
    reg = tmp_path / "reg.yaml"
    reg.write_text(
        "version: 1\nmodels:\n  tiny:\n    file: tiny.gguf\n    sha256: " + digest +
        "\n    quant: Q4_1\n    family: chatml\n    sources:\n      - {kind: file, path: " + str(source) + "}\n"
        "checkpoints:\n  ckpt:\n    repo: Org/Model\n    family: qwen\n", encoding="utf-8")
    return str(reg)


def test_list_shows_models_checkpoints_and_cache_state(tiny_gguf, tmp_path):
    digest = hashlib.sha256(tiny_gguf.read_bytes()).hexdigest()
    reg = _registry_file(tmp_path, digest, tiny_gguf)
    cache = tmp_path / "cache"
    before = CliRunner().invoke(models, ["list", "--registry", reg, "--cache-dir", str(cache)])
    assert before.exit_code == 0, before.output
    tiny_line = next(line for line in before.output.splitlines() if line.strip().startswith("tiny "))
    assert "Q4_1" in tiny_line and "cached" not in tiny_line
    assert "Org/Model@main" in before.output
    pulled = CliRunner().invoke(models, ["pull", "tiny", "--registry", reg, "--cache-dir", str(cache),
                                         "--formats", "f16,Q8_0"])
    assert pulled.exit_code == 0, pulled.output
    assert (cache / "tiny-deq-F16.gguf").is_file() and (cache / "tiny-req-Q8_0.gguf").is_file()
    after = CliRunner().invoke(models, ["list", "--registry", reg, "--cache-dir", str(cache)])
    assert next(line for line in after.output.splitlines() if line.strip().startswith("tiny ")).endswith("cached")


def test_pull_refuses_k_quant_formats_before_fetching(tiny_gguf, tmp_path):
    reg = _registry_file(tmp_path, hashlib.sha256(tiny_gguf.read_bytes()).hexdigest(), tiny_gguf)
    result = CliRunner().invoke(models, ["pull", "tiny", "--registry", reg, "--cache-dir", str(tmp_path / "c"),
                                         "--formats", "Q4_K_M"])
    assert result.exit_code != 0 and "llama-quantize" in result.output
    assert not (tmp_path / "c" / "tiny.gguf").exists()


def test_dequant_command_writes_the_requested_format(tiny_gguf, tmp_path):
    out = tmp_path / "out.gguf"
    result = CliRunner().invoke(models, ["dequant", str(tiny_gguf), "-o", str(out), "--to", "q4_0",
                                         "--cache-dir", str(tmp_path / "c")])
    assert result.exit_code == 0, result.output
    assert result.stdout.split()[0] == hashlib.sha256(out.read_bytes()).hexdigest()
    reader = gguf.GGUFReader(out)
    assert reader.fields["general.file_type"].contents() == gguf.LlamaFileType.MOSTLY_Q4_0
    refused = CliRunner().invoke(models, ["dequant", str(tiny_gguf), "-o", str(tmp_path / "k.gguf"),
                                          "--to", "Q4_K_M"])
    assert refused.exit_code != 0 and refused.output.count("\n") == 1 and "llama-quantize" in refused.output
