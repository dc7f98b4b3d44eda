"""`EngineSession` over the `ServerHandle` protocol with a native server process: the exit wait, the log
location, and how engine errors inside `engine_calls` are named. The "server" is a stand-in process
(a sleeping Python), since only its exit matters here; real engine deaths are in tests/test_cli_errors.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kit.core.errors import EngineError
from kit.launch.native import NativeServer, ServerSpec
from kit.launch.provider import NO_SERVER_LOG, EngineSession


@pytest.fixture
def server(tmp_path):
    server = NativeServer(ServerSpec(binary=tmp_path / "llama-server", model=tmp_path / "m.gguf"),
                          tmp_path / "server-s1.log")
    server.process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield server
    server.stop(grace=1)


def fail(message="llama-server answered HTTP 500: boom", fix="check the engine log"):
    raise EngineError(message, fix)


def test_a_running_server_is_alive_and_a_killed_one_is_not(server):
    live = EngineSession(engine=None, server=server)
    assert live.alive(settle=0.1)
    server.process.kill()
    assert not live.alive(settle=5.0)
    assert live.log_location() == str(server.log_path)


def test_engine_errors_name_where_and_the_log(server):
    live = EngineSession(engine=None, server=server)
    with pytest.raises(EngineError) as raised:
        with live.engine_calls("session s1 (item 3, warm)"):
            fail()
    assert raised.value.line() == ("during session s1 (item 3, warm): llama-server answered HTTP 500: boom; "
                                   f"check the engine log; its log: {server.log_path}")
    server.process.kill()
    with pytest.raises(EngineError) as raised:
        with live.engine_calls("session s1 (item 4, cold)"):
            fail("llama-server stopped answering")
    assert raised.value.line() == (f"the engine died during session s1 (item 4, cold); see its log: {server.log_path}; "
                                   "records so far are kept")


def test_an_engine_the_kit_did_not_start_has_no_server_log():
    live = EngineSession(engine=None)
    assert live.alive() and live.log_location() == NO_SERVER_LOG
    with pytest.raises(EngineError) as raised:
        with live.engine_calls("pass c1 (pure)"):
            fail()
    assert raised.value.line() == "during pass c1 (pure): llama-server answered HTTP 500: boom; check the engine log"
