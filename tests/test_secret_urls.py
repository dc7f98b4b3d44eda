"""URLs are recorded without credentials (kit.core.secret_urls), everywhere one is recorded, while the engine
clients still connect with the full URL."""

from __future__ import annotations

import base64
import dataclasses
import re
import types
import typing
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from kit.run import runner
from kit.engines.base import CompletionRequest
from kit.engines.llamacpp import LlamaCppEngine
from kit.engines.ollama import OllamaEngine
from kit.engines.openai_compat import OpenAICompatEngine
from kit.engines.vllm import VllmEngine
from kit.core.errors import EngineError
from kit.launch.instance import ChatUrlProvider, OllamaProvider, VllmResetProvider
from kit.launch.provider import ExternalProvider
from kit.record.manifest import RunManifest
from kit.record.model import EpisodeSummary, RequestRecord
from kit.protocols.kinds import record_classes
from kit.core.secret_urls import SECRET_QUERY_PARAMS, connection_parts, redact_url, redact_urls_in, secret_param

URL = "http://alice:pw-Zq81@127.0.0.1:8000/v1?api_key=ak-7Hc2&model=x&Token=t-99"
SHOWN = "http://127.0.0.1:8000/v1?api_key=[REDACTED]&model=x&Token=[REDACTED]"


def test_userinfo_goes_and_secret_parameters_are_redacted_by_name_in_any_case():
    assert redact_url(URL) == SHOWN
    assert redact_url("https://h/p?ACCESS_TOKEN=a&x-api-key=b&client_secret=c&sig=d&Signature=e&auth=f&page=2") == (
        "https://h/p?ACCESS_TOKEN=[REDACTED]&x-api-key=[REDACTED]&client_secret=[REDACTED]&sig=[REDACTED]"
        "&Signature=[REDACTED]&auth=[REDACTED]&page=2")
    assert redact_url("http://h/?api%5Fkey=a#access_token=b&x=1") == (
        "http://h/?api%5Fkey=[REDACTED]#access_token=[REDACTED]&x=1")
    assert redact_url("http://127.0.0.1:8080") == "http://127.0.0.1:8080"  # nothing secret: unchanged
    assert redact_url("not a url") == "not a url"
    assert {"api_key", "key", "token", "access_token", "secret", "password", "sig", "signature", "auth"} <= (
        SECRET_QUERY_PARAMS)
    assert secret_param("HF_TOKEN") and secret_param("X-Amz-Signature") and not secret_param("model")
    assert not secret_param("max_tokens") and not secret_param("monkey")


def test_urls_inside_text_are_redacted():
    assert redact_urls_in(f"vLLM at {URL} did not answer (boom)") == f"vLLM at {SHOWN} did not answer (boom)"
    error = EngineError(f"cannot reach {URL}", f"check {URL}")
    assert "pw-Zq81" not in error.line() and "ak-7Hc2" not in str(error) and SHOWN in error.message


def test_the_connection_keeps_everything():
    base, params, shown = connection_parts(URL, strip_suffix="/v1")
    assert base == "http://alice:pw-Zq81@127.0.0.1:8000"
    assert params == [("api_key", "ak-7Hc2"), ("model", "x"), ("Token", "t-99")]
    assert shown == "http://127.0.0.1:8000?api_key=[REDACTED]&model=x&Token=[REDACTED]"


def _answering(seen: list[httpx.Request], status: int = 200) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, json={"data": [{"id": "m"}]})

    return httpx.MockTransport(handler)


def test_engines_connect_with_credentials_but_show_none():
    seen: list[httpx.Request] = []
    engine = OpenAICompatEngine(URL, transport=_answering(seen))
    assert engine.model == "m"
    request = seen[0]
    assert request.url.path == "/v1/models" and request.url.params["api_key"] == "ak-7Hc2"
    assert request.headers["authorization"] == "Basic " + base64.b64encode(b"alice:pw-Zq81").decode()
    info = engine.info()
    assert info["url"] == "http://127.0.0.1:8000?api_key=[REDACTED]&model=x&Token=[REDACTED]"
    for made in (LlamaCppEngine(URL), OllamaEngine(URL, "m"), VllmEngine(URL)):
        assert "pw-Zq81" not in made.base_url and "ak-7Hc2" not in made.base_url
        made.close()


def test_an_engine_error_never_echoes_the_credentials():
    engine = OpenAICompatEngine(URL, model="m", transport=_answering([], status=500))
    with pytest.raises(EngineError) as raised:
        engine.complete(CompletionRequest(messages=({"role": "user", "content": "hi"},), max_tokens=1, seed=42))
    assert "pw-Zq81" not in raised.value.line() and "ak-7Hc2" not in raised.value.line()


@pytest.mark.parametrize("provider", [ExternalProvider(URL), ChatUrlProvider(URL, "m"), VllmResetProvider(URL),
                                      OllamaProvider(URL, "m")])
def test_providers_describe_the_url_without_secrets(provider):
    assert provider.describe()["url"] == SHOWN
    assert provider.url == URL  # what the sessions connect with


def test_engine_url_option_is_stored_without_credentials_and_such_a_run_cannot_resume(tmp_path):
    saved = runner.options_json(runner.RunOptions(protocol="reset", engine_url=URL))
    assert saved["engine_url"] == SHOWN and saved[runner.CREDENTIALS_DROPPED] is True
    plain = runner.options_json(runner.RunOptions(protocol="reset", engine_url="http://127.0.0.1:8080"))
    assert plain["engine_url"] == "http://127.0.0.1:8080" and runner.CREDENTIALS_DROPPED not in plain


# The record model (every record class, the BFCL episode line) and the manifest model, walked field by field
# into every nested model: no field is named for a header or a credential where its type can hold text. The
# proxy, the one module that reads headers (it forwards them), is checked where it records: tests/watch
# (a client's Authorization reaches the upstream, and no record, no file of the run folder, no console line).
RECORDED_MODELS = (*sorted(set(record_classes().values()), key=lambda cls: cls.__name__), RequestRecord,
                   EpisodeSummary, RunManifest)
HEADERISH = re.compile(r"header|cookie|bearer|authori[sz]ation", re.IGNORECASE)
NOT_A_CREDENTIAL = {"arm_key": "the key of a harness cell's `key=value` suffix (`prefill`, `timing`), a word"}
# the fields whose keys the model does not name (the kit fills them with bodies, settings and telemetry it
# reads by key; none from a header): a new one is reviewed here before it is recorded. (A manifest part also
# keeps keys it does not type, as written: the launchers' descriptions, checked by test_providers_describe...)
OPEN_FIELDS = {
    "request.body": "the JSON body sent", "raw": "the engine's answer body", "legacy": "kit.record/1 values",
    "tool_refused": "the call policy's refusals", "state": "the cache state's evidence",
    "gen_ai": "GenAI attributes from the bodies", "imported.done": "the harness's done marker",
    "imported.runs": "each imported calls file: its name, run name, boxes, sha256 and done marker", "usage": "the harness's usage", "logprob_margins": "the harness's",
    "score": "BFCL's verdict", "calibration": "timing classes", "cells": "cells' passes and settings",
    "cpu_backend_switches": "backend names", "engine.cache_ram": "a number or null",
    "engine.image_identity": "image digests", "estimate": "seconds", "formats": "weight formats",
    "options": "the command's options (URLs redacted: test_engine_url_option_is_stored_without_credentials)",
    "passes.*.launch": "launch settings", "passes.*.order": "unit names", "passes.*.reload": "reload settings",
    "protocol.overrides": "--set values", "protocol.resolved": "the protocol as validated",
    "provenance.cpu_backend": "the CPU backend", "provenance.host": "OS, CPU, memory", "provenance.kit": "version",
    "provenance.packages": "versions", "replay_of": "the replayed run", "results": "results files",
    "resumed": "each resume's time and options", "seeds": "seeds", "sweep": "a cell's format and history"}


def _fields(model: type) -> dict[str, Any]:
    if issubclass(model, BaseModel):
        return {field.alias or name: field.annotation for name, field in model.model_fields.items()}
    hints = typing.get_type_hints(model)
    return {field.name: hints[field.name] for field in dataclasses.fields(model)}


def _walk(model: type, prefix: str = "") -> Iterator[tuple[str, str, set[Any]]]:
    """For every field of `model` and of the models in it: its path, its name and the leaf types it can hold
    (`Any` among them where it holds keys and values the model does not name)."""
    for name, annotation in _fields(model).items():
        leaves: set[Any] = set()
        todo = [(prefix + name, annotation)]
        while todo:
            path, kind = todo.pop()
            args = [arg for arg in typing.get_args(kind) if arg is not Ellipsis]
            if isinstance(kind, type) and (dataclasses.is_dataclass(kind) or issubclass(kind, BaseModel)):
                yield from _walk(kind, path + ".")
            elif typing.get_origin(kind) is dict:
                todo.append((path + ".*", args[1]))
            elif typing.get_origin(kind) in (list, tuple):
                todo += [(path + "[]", arg) for arg in args]
            elif typing.get_origin(kind) in (typing.Union, types.UnionType):
                todo += [(path, arg) for arg in args]
            elif typing.get_origin(kind) is typing.Literal:
                leaves.add(str)
            else:
                leaves.add(kind)
        yield prefix + name, name, leaves


def _secret_holders(*models: type) -> set[str]:
    """The fields, at any depth, named for a header or a credential whose type can hold text."""
    return {path for model in models for path, name, leaves in _walk(model)
            if (secret_param(name) or HEADERISH.search(name)) and leaves & {str, bytes, Any}
            and name not in NOT_A_CREDENTIAL}


def test_no_record_or_manifest_field_can_hold_a_header_or_a_credential():
    assert _secret_holders(*RECORDED_MODELS) == set()
    walked = {path for model in RECORDED_MODELS for path, _, _ in _walk(model)}
    assert {"completion.token_ids", "passes.*.session", "arm_key", "engine.url"} <= walked  # the walk went deep


@dataclasses.dataclass
class _Sent:
    headers: dict[str, str]
    body: dict[str, Any]


class _Upstream(BaseModel):
    api_key: str | None = None
    authorization: Any = None
    session: int | None = None  # holds no text


@dataclasses.dataclass
class _Record:
    sent: list[_Sent]
    upstream: dict[str, _Upstream]
    x_auth_token: tuple[str, ...]
    token_ids: tuple[int, ...]


def test_the_walk_finds_a_header_or_a_key_at_any_depth():
    assert _secret_holders(_Record) == {"sent[].headers", "upstream.*.api_key", "upstream.*.authorization",
                                        "x_auth_token"}


def test_every_field_whose_keys_the_model_does_not_name_is_one_reviewed_here():
    open_fields = {path for model in RECORDED_MODELS for path, _, leaves in _walk(model) if Any in leaves}
    assert open_fields == set(OPEN_FIELDS)
