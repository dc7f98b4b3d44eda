"""`kit check` plumbing without an engine: which provider a URL gets, option overrides, the
OpenAI-compatible response normalizer (on the OpenAI chat shape llama-server answers), and bad input."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kit.app.check import kind_overrides, overrides, resolve_kind
from kit.cli import cli
from kit.engines.openai_compat import normalize_chat
from kit.core.errors import ConfigError, NoVerdict
from kit.launch.instance import ChatUrlProvider, OllamaProvider, ResetProvider, VllmResetProvider, url_provider


def test_kinds_resolve_from_url_and_option():
    assert resolve_kind(None, "auto") == "embedded"
    assert resolve_kind("http://localhost:11434", "auto") == "ollama"
    assert resolve_kind("http://localhost:8000", "auto") == "openai"
    assert resolve_kind("http://localhost:8000", "vllm") == "vllm"
    with pytest.raises(ConfigError, match="needs the engine's URL"):
        resolve_kind(None, "ollama")


def test_each_kind_gets_its_provider():
    assert isinstance(url_provider("http://h:11434", "ollama", "llama3.2", 5), OllamaProvider)
    assert isinstance(url_provider("http://h:8000", "vllm", None, 5), VllmResetProvider)
    llama = url_provider("http://h:8080", "llamacpp", None, 5)
    assert isinstance(llama, ResetProvider) and llama.kind == "llamacpp"  # slot erase, not "cannot reload"
    assert isinstance(url_provider("http://h:30000", "sglang", None, 5), ResetProvider)
    assert isinstance(url_provider("http://h:8000", "openai", "m", 5), ChatUrlProvider)
    with pytest.raises(ConfigError, match="--model"):
        url_provider("http://h:11434", "ollama", None, 5)


def test_overrides_map_options_onto_the_protocol():
    assert overrides(None, None, None, None, None, None, None) == {}
    assert overrides(2, 3, 24, 1, 0, 4, "default") == {
        "cycles": 2, "per_arm": 3, "max_tokens": 24, "calibration": {"rounds": 1},
        "regimes": {"always_fresh": 0, "steady": 4}, "engine": {"cache_ram": None}}
    assert overrides(None, None, None, None, None, None, "0")["engine"] == {"cache_ram": 0}
    with pytest.raises(ConfigError, match="cache-ram"):
        overrides(None, None, None, None, None, None, "lots")
    assert kind_overrides("vllm") == {"reuse_tolerance": 16}  # vLLM reuses whole 16-token blocks
    assert kind_overrides("ollama") == {} and kind_overrides("embedded") == {}


def test_openai_chat_answers_normalize_with_and_without_llama_server_timings():
    body = {"choices": [{"message": {"role": "assistant", "content": "Hi there"}, "finish_reason": "length",
                         "logprobs": {"content": [
                             {"token": "Hi", "logprob": -0.1, "bytes": [72, 105], "top_logprobs": [
                                 {"token": "Hi", "logprob": -0.1, "bytes": [72, 105]}]},
                             {"token": " there", "logprob": -0.5, "bytes": [32], "top_logprobs": []}]}}],
            "usage": {"prompt_tokens": 62, "completion_tokens": 2, "total_tokens": 64},
            "timings": {"cache_n": 61, "prompt_n": 1, "prompt_ms": 18.2, "predicted_ms": 25.0}}
    completion = normalize_chat(body)
    assert completion.text == "Hi there" and completion.tokens == ("Hi", " there")
    assert completion.cached_tokens == 61 and completion.prefill_tokens == 1 and completion.prefill_ms == 18.2
    del body["timings"]
    bare = normalize_chat(body)
    assert bare.cached_tokens is None and bare.prefill_ms is None  # unknown, never 0
    body["usage"]["prompt_tokens_details"] = {"cached_tokens": 48}
    assert normalize_chat(body).cached_tokens == 48


def test_check_refuses_an_ollama_url_without_a_model():
    result = CliRunner().invoke(cli, ["check", "http://localhost:11434"])
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError) and "--model" in str(result.exception)


SMALL = ["--cycles", "2", "--per-arm", "2", "--max-tokens", "3", "--calibration-rounds", "1", "--always-fresh", "1",
         "--steady", "2"]


def _check(url, out):
    import json  # noqa: PLC0415

    result = CliRunner().invoke(cli, ["check", url, *SMALL, "--out", str(out)])
    [run_dir] = [p for p in out.iterdir() if (p / "manifest.json").is_file()]
    return result, json.loads((run_dir / "results" / "pinning.json").read_text())


def test_a_llama_server_with_slot_save_path_is_reset_before_every_pass(tmp_path):
    from tests.fake_engine.llamacpp import LlamaCpp  # noqa: PLC0415

    fake = LlamaCpp(slot_save_path=True)
    with fake.serve() as url:
        result, table = _check(url, tmp_path)
    assert result.exit_code == 0, result.output
    assert all(p["status"] == "OK" and p["reload_confirmed"] for p in table["passes"])
    assert table["gate"]["reloads_confirmed"] == [2, 2] and "without_reset" not in table
    erases = [r for r in fake.requests if r.url.path == "/slots/0"]
    assert len(erases) == len(table["passes"])  # one erase per pass, each before the pass's calls


def test_without_a_reset_what_needs_none_is_measured_and_the_rest_is_impossible(tmp_path):
    from tests.fake_engine.llamacpp import LlamaCpp  # noqa: PLC0415

    with LlamaCpp().serve() as url:  # no --slot-save-path: every erase answers 501
        result, table = _check(url, tmp_path)
    assert all(p["status"] == "VOID" for p in table["passes"])
    unreset = table["without_reset"]
    assert unreset["steady"]["n"] == 2 and unreset["states"]  # measured from the answers all the same
    assert {i["verdict"] for i in unreset["impossible"]} >= {"manipulation gate", "always-fresh regime"}
    assert "--slot-save-path DIR" in unreset["why"]
    assert any(line.startswith("Impossible without a reset: manipulation gate") for line in table["verdict"]["advice"])
    assert table["verdict"]["impossible"] and "Impossible without a reset" in result.output
    assert isinstance(result.exception, NoVerdict) and "every pass was VOID" in str(result.exception)  # exit 4
