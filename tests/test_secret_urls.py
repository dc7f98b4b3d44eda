"""URLs are recorded without credentials (kit.core.secret_urls), everywhere one is recorded, while the engine
clients still connect with the full URL."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import httpx
import pytest

import kit
from kit.run import runner
from kit.engines.base import CompletionRequest
from kit.engines.llamacpp import LlamaCppEngine
from kit.engines.ollama import OllamaEngine
from kit.engines.openai_compat import OpenAICompatEngine
from kit.engines.vllm import VllmEngine
from kit.core.errors import EngineError
from kit.launch.instance import ChatUrlProvider, OllamaProvider, VllmResetProvider
from kit.launch.provider import ExternalProvider
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
    saved = runner._options_json(runner.RunOptions(protocol="reset", engine_url=URL))
    assert saved["engine_url"] == SHOWN and saved[runner.CREDENTIALS_DROPPED] is True
    plain = runner._options_json(runner.RunOptions(protocol="reset", engine_url="http://127.0.0.1:8080"))
    assert plain["engine_url"] == "http://127.0.0.1:8080" and runner.CREDENTIALS_DROPPED not in plain


# `kit watch`'s proxy forwards its clients' headers (Authorization included) and reads the upstream's content
# type; it records neither (tests/watch: a bearer token sent through it appears in no file of the run folder)
READS_HEADERS = {"kit/watch/proxy.py"}


def test_no_module_reads_request_or_response_headers():
    """Records keep request bodies and response bodies, never headers (so never an Authorization header):
    no kit module reads `.headers` of a request or response, but the proxy that must forward them."""
    root = Path(kit.__file__).parent
    sources = {path.relative_to(root.parent).as_posix(): path.read_text() for path in root.rglob("*.py")}
    assert {path for path, text in sources.items() if re.search(r"\.headers\b", text)} == READS_HEADERS
