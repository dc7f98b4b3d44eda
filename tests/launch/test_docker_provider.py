"""The Docker provider, driven through the fake Docker SDK client (tests/launch/fake_docker.py).

There is no Docker daemon here: containers are the fake's, with `docker inspect` shapes. The engine
inside is either the shared fake engine (tests/fake_engine) behind the kit's real client, or (the
`engine`-marked test) the real embedded llama-server, whose port the fake container "publishes".
"""

from __future__ import annotations

import json

import pytest

from kit.engines.llamacpp import LlamaCppEngine
from kit.engines.vllm import VllmEngine
from kit.core.errors import EngineError
from kit.launch.docker.container_token import LABEL_TOKEN, token_for
from kit.launch.docker.container_spec import LABEL_RUN_ID, LLAMACPP_IMAGE, VLLM_IMAGE
from kit.launch.docker.docker_launcher import DockerLauncher
from kit.launch.docker.docker_provider import DockerProvider, container_name
from kit.launch.native import NativeServer
from tests.fake_engine.clock import Clock
from tests.fake_engine.llamacpp import engine_factory
from tests.fake_engine.vllm import VllmModel

from .fake_docker import FakeDockerClient

SECRET = "hf_SECRETtoken123456"


@pytest.fixture
def client():
    client = FakeDockerClient()
    client.add_image(LLAMACPP_IMAGE)
    client.add_image(VLLM_IMAGE)
    client.next_logs = b"main: server is listening on http://0.0.0.0:8080\n"
    return client


@pytest.fixture
def gguf(tmp_path):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF")
    return path


def launcher_for(client, http=lambda url: None):
    clock = Clock()
    return DockerLauncher(client, http_status=http, poll_s=1.0, sleep=clock.sleep, clock=clock)


def llamacpp_provider(client, gguf, made, **options):
    provider = DockerProvider.llamacpp(launcher_for(client), "run42", gguf, startup_timeout_s=30, **options)
    provider.make_engine = engine_factory(made=made)
    return provider


def test_session_runs_one_container_and_removes_it(client, gguf, tmp_path):
    client.next_states = [{"Status": "running", "Health": {"Status": "starting"}},
                          {"Status": "running", "Health": {"Status": "healthy"}}]
    made = []
    provider = llamacpp_provider(client, gguf, made, cache_ram_mib=0)
    with provider.session("s1", tmp_path / "logs") as live:
        container = client.containers_made[0]
        assert not container.removed and live.server.alive()
        assert live.engine is made[0] and live.engine.base_url == "http://127.0.0.1:49151"
        launch = live.launch
    run = client.called("containers.run")[0][1]
    assert run["name"] == "kit-run42-s1" and run["labels"][LABEL_RUN_ID] == "run42"
    assert "--cache-ram" in run["command"] and run["command"][run["command"].index("--cache-ram") + 1] == "0"
    assert launch["image_info"]["id"] == client.images_by_ref[LLAMACPP_IMAGE].id
    assert launch["container"]["image_repo_digests"] and launch["container"]["config"]["Cmd"] == run["command"]
    assert launch["build_info"] == "b1-7e4c0a9" and launch["log"] == "container-s1.log"
    assert container.removed and made[0]._http.is_closed and not live.server.alive()
    assert (tmp_path / "logs" / "container-s1.log").read_bytes() == client.next_logs


def test_each_session_gets_a_fresh_container_and_the_image_is_checked_once(client, gguf, tmp_path):
    made = []
    provider = llamacpp_provider(client, gguf, made)
    client.next_states = [{"Status": "running", "Health": {"Status": "healthy"}}]
    for label in ("a", "b"):
        with provider.session(label, tmp_path):
            pass
    assert provider.fresh_servers
    assert [c.name for c in client.containers_made] == ["kit-run42-a", "kit-run42-b"]
    assert all(c.removed for c in client.containers_made)
    assert len(client.called("images.get")) == 1


def test_vllm_session_redacts_the_token(client, tmp_path):
    client.next_states = [{"Status": "running", "Health": {"Status": "healthy"}}]
    made = []
    provider = DockerProvider.vllm(launcher_for(client), "run7", "Qwen/Qwen2.5-7B-Instruct", prefix_caching=False,
                                   hf_token=SECRET, dev_mode=True)
    provider.make_engine = lambda running: made.append(VllmEngine(running.base_url, transport=VllmModel().transport())) \
        or made[-1]
    with provider.session("s1", tmp_path) as live:
        launch = live.launch
    run = client.called("containers.run")[0][1]
    assert run["environment"]["HF_TOKEN"] == SECRET  # the container gets it ...
    assert SECRET not in json.dumps(launch) and SECRET not in json.dumps(provider.describe())  # ... the manifest not
    assert "HF_TOKEN=<redacted>" in launch["container"]["config"]["Env"]
    assert "--no-enable-prefix-caching" in run["command"] and provider.describe()["engine"] == "vllm"


def test_default_engines_are_the_real_clients(client, gguf, tmp_path):
    """Without a fake the session's engine is LlamaCppEngine or VllmEngine at the published port."""
    from kit.launch.docker import docker_provider

    running = launcher_for(client).start(DockerProvider.llamacpp(None, "r", gguf).make_spec("x"))
    llama = docker_provider._llamacpp_engine(running)
    vllm = docker_provider._vllm_engine(prefix_caching=True, dev_mode=False)(running)
    try:
        assert isinstance(llama, LlamaCppEngine) and llama.base_url == running.base_url
        assert isinstance(vllm, VllmEngine) and vllm.prefix_caching is True and vllm.capabilities.restartable
    finally:
        llama.close()
        vllm.close()


def test_container_that_exits_at_start_up_is_logged_and_removed(client, gguf, tmp_path):
    client.next_states = [{"Status": "exited", "ExitCode": 1}]
    client.next_logs = b"ggml_cuda_init: failed to initialize CUDA: no CUDA-capable device is detected\n"
    made = []
    with pytest.raises(EngineError, match="exited during start-up"):
        with llamacpp_provider(client, gguf, made).session("s1", tmp_path):
            pytest.fail("the session must not start")
    assert made == [] and client.containers_made[0].removed
    assert b"no CUDA-capable device" in (tmp_path / "container-s1.log").read_bytes()


def test_container_is_removed_when_the_session_body_fails(client, gguf, tmp_path):
    client.next_states = [{"Status": "running", "Health": {"Status": "healthy"}}]
    made = []
    with pytest.raises(RuntimeError, match="boom"):
        with llamacpp_provider(client, gguf, made).session("s1", tmp_path):
            raise RuntimeError("boom")
    assert client.containers_made[0].removed and made[0]._http.is_closed


def test_failed_start_cleans_up_by_run_label(client, gguf, tmp_path, fresh_kit_cache):
    made = []
    provider = llamacpp_provider(client, gguf, made)
    client.next_states = [{"Status": "running", "Health": {"Status": "healthy"}}]
    kwargs = DockerProvider.llamacpp(None, "run42", gguf).make_spec("old").run_kwargs()
    leftover = client.containers.run(**{**kwargs, "labels": {**kwargs["labels"], LABEL_TOKEN: token_for("run42")}})
    labelled_only = client.containers.run(**kwargs)  # the run's labels without this kit's token: not ours
    other = client.containers.run(**DockerProvider.llamacpp(None, "other", gguf).make_spec("x").run_kwargs())
    client.run_error = RuntimeError("could not select device driver \"nvidia\"")
    with pytest.raises(EngineError, match="could not start"):
        with provider.session("s1", tmp_path):
            pass
    assert leftover.removed and not other.removed and not labelled_only.removed
    assert provider.cleanup() == []


def test_container_names_are_docker_legal():
    assert container_name("2026-11-30T05:40 run", "cold/1") == "kit-2026-11-30T05-40-run-cold-1"


@pytest.mark.engine
def test_session_against_a_real_llama_server(client, server_spec, smollm2, tmp_path):
    """The fake container 'publishes' the port of a real embedded llama-server; health and /props are real."""
    with NativeServer(server_spec(ctx_size=512), tmp_path / "server.log") as server:
        launcher = DockerLauncher(client, poll_s=0.1)
        provider = DockerProvider.llamacpp(launcher, "real", smollm2, host_port=server.port, startup_timeout_s=30)
        with provider.session("s1", tmp_path / "logs") as live:
            assert isinstance(live.engine, LlamaCppEngine)
            assert live.launch["build_info"] == "b1-7e4c0a9"
            assert live.launch["container"]["base_url"] == server.url
        assert client.containers_made[0].removed


def test_a_variant_serves_another_file_and_cache_setting_from_the_same_image(client, gguf, tmp_path):
    other = tmp_path / "model-deq-F16.gguf"
    other.write_bytes(b"GGUF")
    provider = DockerProvider.llamacpp(launcher_for(client), "run42", gguf, cache_ram_mib=0,
                                       details={"model_name": "model"})
    variant = provider.variant(model=other, details={"format": "F16"})
    command = variant.make_spec("x").run_kwargs()["command"]
    assert "/models/model-deq-F16.gguf" in " ".join(command) and command[command.index("--cache-ram") + 1] == "0"
    assert variant.describe()["format"] == "F16" and variant.describe()["model_name"] == "model"
    default_cache = provider.variant(cache_ram=None).make_spec("y").run_kwargs()["command"]
    assert "--cache-ram" not in default_cache and "/models/model.gguf" in " ".join(default_cache)
    with pytest.raises(Exception, match="vLLM container provider"):
        DockerProvider.vllm(launcher_for(client), "run42", "Qwen/Qwen2.5-7B-Instruct", prefix_caching=True).variant()


def test_session_waits_for_a_dying_container_and_names_its_log(client, gguf, tmp_path):
    """`EngineSession.alive(settle)` polls the container's status (on the launcher's clock) through the
    ServerHandle protocol; `log_location()` is the file the provider writes the container log to."""
    client.next_states = [{"Status": "running", "Health": {"Status": "healthy"}}]
    provider = llamacpp_provider(client, gguf, [])
    with provider.session("s1", tmp_path / "logs") as live:
        clock = provider.launcher.clock
        started = clock()
        assert live.alive(settle=2.0) and clock() - started >= 2.0  # still running after the whole settle
        container = client.containers_made[0]
        container.states = [{"Status": "running"}, {"Status": "exited", "ExitCode": 139}]
        started = clock()
        assert not live.alive(settle=2.0) and clock() - started < 2.0  # seen exiting within the settle
        assert live.log_location() == str(tmp_path / "logs" / "container-s1.log")
    assert (tmp_path / "logs" / "container-s1.log").is_file()
