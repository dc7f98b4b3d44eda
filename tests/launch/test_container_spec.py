"""Container specs: GPU request, loopback-only ports, read-only models, no secrets in the environment.

These are pure data, so they run here without Docker. The `docker` SDK's own argument converter
(`_create_container_args`, what `containers.run` calls before talking to the daemon) is used to show
the daemon would receive loopback port bindings, read-only mounts and a GPU device request.
"""

from __future__ import annotations

import json

import pytest

from kit.core.errors import ConfigError
from kit.launch.docker.container_spec import (
    LABEL_MANAGED,
    LABEL_RUN_ID,
    LLAMACPP_COMMIT,
    ContainerSpec,
    GpuRequest,
    Mount,
    llamacpp_spec,
    vllm_spec,
)

SECRETS = {
    "HF_TOKEN": "hf_secret_from_environment_123",
    "OPENAI_API_KEY": "sk-secret-openai-456",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-789",
    "HUGGING_FACE_HUB_TOKEN": "hf_other_secret_000",
}


@pytest.fixture
def secret_env(monkeypatch):
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)
    return SECRETS


@pytest.fixture
def gguf(tmp_path):
    path = tmp_path / "models" / "Qwen2.5-7B-Instruct-Q8_0.gguf"
    path.parent.mkdir()
    path.write_bytes(b"GGUF")
    return path


def _daemon_args(spec: ContainerSpec) -> dict:
    from docker.models.containers import _create_container_args

    return _create_container_args({**spec.run_kwargs(), "version": "1.44"})


def test_llamacpp_spec_carries_paper_flags_and_gpu(gguf):
    spec = llamacpp_spec(run_id="run-1", model_file=gguf, host_port=18080, cache_ram_mib=0)
    cmd = list(spec.command)
    assert spec.entrypoint == ("llama-server",)
    assert cmd[cmd.index("--model") + 1] == "/models/Qwen2.5-7B-Instruct-Q8_0.gguf"
    for flag, value in [("--parallel", "1"), ("--ctx-size", "16384"), ("--n-gpu-layers", "99"), ("--seed", "42")]:
        assert cmd[cmd.index(flag) + 1] == value
    assert cmd[cmd.index("--cache-ram") + 1] == "0"
    assert "--slots" in cmd
    assert spec.labels["kit.llamacpp.commit"] == LLAMACPP_COMMIT
    assert spec.ipc_mode is None


def test_llamacpp_default_keeps_cache_ram_unset(gguf):
    assert "--cache-ram" not in llamacpp_spec(run_id="r", model_file=gguf).command


def test_vllm_spec_flags_follow_prefix_caching_arm():
    on = vllm_spec(run_id="r", model="Qwen/Qwen2.5-7B-Instruct", prefix_caching=True, host_port=18000)
    off = vllm_spec(run_id="r", model="Qwen/Qwen2.5-7B-Instruct", prefix_caching=False, host_port=18000)
    assert on.entrypoint == ("vllm", "serve")
    assert on.command[0] == "Qwen/Qwen2.5-7B-Instruct"
    for flag, value in [("--max-num-seqs", "1"), ("--seed", "42"), ("--max-model-len", "16384")]:
        assert on.command[on.command.index(flag) + 1] == value
    assert "--enable-prompt-tokens-details" in on.command
    assert "--enable-prefix-caching" in on.command and "--no-enable-prefix-caching" not in on.command
    assert "--no-enable-prefix-caching" in off.command and "--enable-prefix-caching" not in off.command
    assert on.ipc_mode == "host" and on.run_kwargs()["ipc_mode"] == "host"
    assert on.labels["kit.vllm.prefix_caching"] == "on" and off.labels["kit.vllm.prefix_caching"] == "off"


def test_vllm_local_model_folder_is_served_from_read_only_mount(tmp_path):
    (tmp_path / "qwen7b").mkdir()
    spec = vllm_spec(run_id="r", model="qwen7b", prefix_caching=True, models_dir=tmp_path)
    assert spec.command[0] == "/models/qwen7b"
    models = [m for m in spec.mounts if m.target == "/models"]
    assert models == [Mount(source=str(tmp_path.resolve()), target="/models", read_only=True)]


@pytest.mark.parametrize("gpus, expected", [("all", -1), (2, 2)])
def test_gpu_request_reaches_the_daemon(gguf, gpus, expected):
    spec = llamacpp_spec(run_id="r", model_file=gguf, gpus=gpus)
    requests = _daemon_args(spec)["host_config"]["DeviceRequests"]
    assert len(requests) == 1
    assert requests[0]["Driver"] == "nvidia"
    assert requests[0]["Count"] == expected
    assert requests[0]["Capabilities"] == [["gpu"]]


def test_gpu_ids_select_devices(gguf):
    spec = llamacpp_spec(run_id="r", model_file=gguf, gpus=[0, "GPU-abc"])
    request = _daemon_args(spec)["host_config"]["DeviceRequests"][0]
    assert request["DeviceIDs"] == ["0", "GPU-abc"]


@pytest.mark.parametrize("bad", [0, -3, [], "some"])
def test_bad_gpu_selection_is_refused(gguf, bad):
    with pytest.raises(ConfigError):
        llamacpp_spec(run_id="r", model_file=gguf, gpus=bad)


@pytest.mark.parametrize("port", [18080, 0])
def test_ports_are_published_on_loopback_only(gguf, port):
    for spec in (
        llamacpp_spec(run_id="r", model_file=gguf, host_port=port),
        vllm_spec(run_id="r", model="m", prefix_caching=True, host_port=port),
    ):
        bindings = _daemon_args(spec)["host_config"]["PortBindings"]
        assert list(bindings) == [f"{spec.container_port}/tcp"]
        for binding in bindings[f"{spec.container_port}/tcp"]:
            assert binding["HostIp"] == "127.0.0.1"
            assert binding["HostPort"] == (str(port) if port else "")


@pytest.mark.parametrize("host_ip", ["0.0.0.0", "192.168.1.5", "::", "", "localhost"])
def test_non_loopback_publication_is_refused(host_ip):
    with pytest.raises(ConfigError, match="127.0.0.1"):
        ContainerSpec(
            engine="x", run_id="r", image="i", entrypoint=(), command=(), container_port=1, host_port=2, host_ip=host_ip
        )


def test_ipv6_loopback_is_allowed():
    spec = ContainerSpec(
        engine="x", run_id="r", image="i", entrypoint=(), command=(), container_port=1, host_port=2, host_ip="::1"
    )
    assert spec.run_kwargs()["ports"] == {"1/tcp": ("::1", 2)}


def test_model_mounts_are_read_only_at_the_daemon(gguf, tmp_path):
    specs = [
        llamacpp_spec(run_id="r", model_file=gguf),
        vllm_spec(run_id="r", model="m", prefix_caching=False, models_dir=tmp_path),
    ]
    for spec in specs:
        mounts = _daemon_args(spec)["host_config"]["Mounts"]
        models = [m for m in mounts if m["Target"].startswith("/models")]
        assert models, spec.engine
        assert all(m["ReadOnly"] is True for m in models)
    llama_mount = _daemon_args(specs[0])["host_config"]["Mounts"][0]
    assert llama_mount["Source"] == str(gguf.resolve())  # only the model file, not its folder


def test_writable_models_mount_is_refused():
    with pytest.raises(ConfigError, match="read-only"):
        ContainerSpec(
            engine="x",
            run_id="r",
            image="i",
            entrypoint=(),
            command=(),
            container_port=1,
            host_port=2,
            mounts=(Mount(source="/data", target="/models", read_only=False),),
        )


def test_no_secret_from_os_environ_reaches_any_spec(secret_env, gguf, tmp_path):
    specs = [
        llamacpp_spec(run_id="r", model_file=gguf),
        vllm_spec(run_id="r", model="m", prefix_caching=True),
        vllm_spec(run_id="r", model="m", prefix_caching=False, dev_mode=True, models_dir=tmp_path),
    ]
    for spec in specs:
        dumped = json.dumps(spec.run_kwargs()) + json.dumps(spec.to_manifest())
        for value in secret_env.values():
            assert value not in dumped
        assert "HF_TOKEN" not in spec.environment


def test_explicit_hf_token_reaches_container_but_not_manifest(secret_env):
    spec = vllm_spec(run_id="r", model="m", prefix_caching=True, hf_token="hf_passed_explicitly")
    assert spec.run_kwargs()["environment"] == {"HF_TOKEN": "hf_passed_explicitly"}
    manifest = spec.to_manifest()
    assert manifest["environment"] == {"HF_TOKEN": "<redacted>"}
    assert "hf_passed_explicitly" not in json.dumps(manifest)
    assert secret_env["OPENAI_API_KEY"] not in json.dumps(spec.run_kwargs())


def test_dev_mode_sets_only_the_dev_flag():
    spec = vllm_spec(run_id="r", model="m", prefix_caching=True, dev_mode=True)
    assert dict(spec.environment) == {"VLLM_SERVER_DEV_MODE": "1"}


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "GITHUB_TOKEN", "DB_PASSWORD", "AWS_SECRET_ACCESS_KEY"])
def test_credential_like_environment_is_refused(name):
    with pytest.raises(ConfigError, match=name):
        ContainerSpec(
            engine="x",
            run_id="r",
            image="i",
            entrypoint=(),
            command=(),
            container_port=1,
            host_port=2,
            environment={name: "v"},
        )


def test_labels_find_the_run_and_cannot_be_overridden_by_accident(gguf):
    spec = llamacpp_spec(run_id="run-42", model_file=gguf)
    labels = _daemon_args(spec)["labels"]
    assert labels[LABEL_RUN_ID] == "run-42"
    assert labels[LABEL_MANAGED] == "true"
    assert labels["kit.engine"] == "llamacpp"


def test_healthcheck_in_nanoseconds(gguf):
    check = llamacpp_spec(run_id="r", model_file=gguf).run_kwargs()["healthcheck"]
    assert check["test"][0] == "CMD"
    assert check["test"][-1] == "http://127.0.0.1:8080/health"
    assert check["interval"] == 10 * 10**9
    assert check["start_period"] == 600 * 10**9
    from docker.types import Healthcheck

    daemon = Healthcheck(**check)  # what the SDK sends to the daemon
    assert daemon["Test"] == check["test"] and daemon["StartPeriod"] == 600 * 10**9


def test_not_a_gguf_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="gguf"):
        llamacpp_spec(run_id="r", model_file=tmp_path / "model.bin")


def test_extra_args_must_be_a_list(gguf):
    with pytest.raises(ConfigError, match="list"):
        llamacpp_spec(run_id="r", model_file=gguf, extra_args="--foo 1")
    spec = llamacpp_spec(run_id="r", model_file=gguf, extra_args=["-ctk", "f16"])
    assert spec.command[-2:] == ("-ctk", "f16")


def test_gpu_request_plain_data_matches_sdk_type():
    from docker.types import DeviceRequest

    request = DeviceRequest(**GpuRequest().to_docker())
    assert request.driver == "nvidia" and request.count == -1 and request.capabilities == [["gpu"]]


def test_module_does_not_import_docker():
    import ast
    import inspect

    import kit.launch.docker.container_spec as module

    tree = ast.parse(inspect.getsource(module))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert not any(name == "docker" or name.startswith("docker.") for name in imported)
