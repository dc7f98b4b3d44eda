"""Which engine answers at a URL (kit.engines.identify): each engine from the answer only it gives, through
the shared fake engines (recorded shapes: llama-server 7e4c0a9, vLLM 0.11.0, SGLang, Ollama 0.12.11), the
OpenAI-compatible fallback, and answers that are not to be believed."""

from __future__ import annotations

import httpx
import pytest
from click.testing import CliRunner

from kit.app.check import resolve
from kit.cli import cli
from kit.core.limits import WATCH_PROBE_BYTES
from kit.engines.identify import identify
from tests.fake_engine.llamacpp import LlamaCpp
from tests.fake_engine.ollama import Ollama
from tests.fake_engine.openai import OpenAIChat
from tests.fake_engine.sglang import Sglang
from tests.fake_engine.vllm import VllmModel


@pytest.mark.parametrize("fake, kind, build, evidence", [
    (LlamaCpp(), "llamacpp", "b1-7e4c0a9", "engine: llama.cpp (GET /props: build_info b1-7e4c0a9)"),
    (VllmModel(), "vllm", "0.11.0", "engine: vLLM (GET /metrics: vllm: metric names; GET /version: 0.11.0)"),
    (Sglang(), "sglang", "0.4.10", "engine: SGLang (GET /get_server_info: version 0.4.10)"),
    (Ollama(), "ollama", "0.12.11", "engine: Ollama (GET /api/version: version 0.12.11)"),
    (OpenAIChat(), "openai", None, "engine: OpenAI-compatible (GET /v1/models answered: taken for OpenAI-compatible)"),
])
def test_each_engine_is_known_by_what_only_it_answers(fake, kind, build, evidence):
    found = identify("http://engine.test:8080/v1", transport=fake.transport())
    assert (found.kind, found.build, found.line(), found.reached) == (kind, build, evidence, True)
    assert all(r.method == "GET" for r in fake.requests)  # probing changes nothing on the server


def test_kit_check_and_kit_watch_share_the_probe_and_print_what_was_found_first(tmp_path):
    with LlamaCpp(slot_save_path=True).serve() as url:
        found = identify(url, "auto")
        assert (found.kind, found.build, found.reached) == ("llamacpp", "b1-7e4c0a9", True)
        assert resolve(url, "auto") == ("llamacpp", "engine: llama.cpp (GET /props: build_info b1-7e4c0a9)")
        result = CliRunner().invoke(cli, ["check", url, "--cycles", "1", "--per-arm", "1", "--max-tokens", "3",
                                          "--calibration-rounds", "1", "--always-fresh", "0", "--steady", "0",
                                          "--out", str(tmp_path)])
    assert result.output.splitlines()[0] == "engine: llama.cpp (GET /props: build_info b1-7e4c0a9)", result.output


def test_nothing_listening_is_not_reached_and_a_named_kind_is_kept():
    def refuse(request):
        raise httpx.ConnectError("refused", request=request)

    gone = httpx.MockTransport(refuse)
    assert identify("http://engine.test:8000", transport=gone).reached is False
    assert resolve("http://engine.test:11434", "auto", transport=gone)[0] == "ollama"  # Ollama's own port
    named = identify("http://engine.test:8000", "vllm", transport=OpenAIChat().transport())
    assert named.kind == "vllm" and "its own endpoints did not answer" in named.line()


def _answering(path: str, response: httpx.Response) -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: response if request.url.path == path else httpx.Response(404))


@pytest.mark.parametrize("path, response", [
    ("/props", httpx.Response(200, json={"build_info": 7})),  # a number is not llama.cpp's build string
    ("/props", httpx.Response(200, json={"total_slots": True})),
    ("/props", httpx.Response(200, json=["build_info"])),
    ("/props", httpx.Response(200, content=b'{"build_info": "b1' + b"x" * WATCH_PROBE_BYTES + b'"}')),
    ("/metrics", httpx.Response(200, text="# HELP vllm_like_but_not counter\nprocess_cpu 1\n")),
    ("/get_server_info", httpx.Response(200, json={"version": "1.0"})),  # no server arguments
    ("/api/version", httpx.Response(200, json={"version": {"major": 0}})),
])
def test_an_answer_without_the_proving_field_of_the_right_type_proves_nothing(path, response):
    found = identify("http://engine.test:8080", transport=_answering(path, response))
    assert found.kind == "openai" and found.build is None


def test_an_engines_own_string_is_shown_printable_and_short():
    hostile = "b1\x1b[2J\u009b31m" + "y" * 500
    found = identify("http://engine.test:8080", transport=_answering(
        "/props", httpx.Response(200, json={"build_info": hostile})))
    assert found.build == hostile  # kept as given (recorded), but the line shows neither escapes nor all of it
    assert "\x1b" not in found.line() and "\u009b" not in found.line() and len(found.line()) < 120


def test_a_kind_without_a_proof_of_its_own_asks_v1_models_whether_anything_answers():
    """`--kind openai` has no engine-specific endpoint: GET /v1/models is then the one request, and it alone
    says whether the server answers (`kit watch --kind openai` refused a live server before it was asked)."""
    asked: list[str] = []

    def models_only(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "m", "object": "model"}]})
        return httpx.Response(404)

    found = identify("http://engine.test:8000/v1", "openai", transport=httpx.MockTransport(models_only))
    assert (found.kind, found.build, found.reached, asked) == ("openai", None, True, ["/v1/models"])
    assert found.line() == "engine: OpenAI-compatible (--kind openai; GET /v1/models answered)"
    assert resolve("http://engine.test:8000", "openai", transport=httpx.MockTransport(models_only))[1] == found.line()
    status_only = identify("http://engine.test:8000", "openai", transport=httpx.MockTransport(
        lambda request: httpx.Response(401)))
    assert status_only.reached and status_only.line().endswith("(--kind openai; the server answered)")


def test_a_kind_without_a_proof_of_its_own_is_not_reached_where_nothing_listens():
    def refuse(request):
        raise httpx.ConnectError("refused", request=request)

    found = identify("http://engine.test:8000", "openai", transport=httpx.MockTransport(refuse))
    assert (found.kind, found.reached, found.evidence) == ("openai", False, "nothing answered")
