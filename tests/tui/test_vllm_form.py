"""The setup form's vLLM choices without a screen: the vLLM container, native vLLM and a vLLM endpoint (a
server per cache arm), the RunOptions each makes, and every refusal's line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kit.app import doctor
from kit.app.doctor import DOCKER_WAY, NATIVE_VLLM_WAY, CommandResult
from kit.core.paths import protocols_dir
from kit.engines import registry as engines
from kit.run.preflight import check_engine_choice
from kit.tui import form
from kit.tui.catalog import CPU_FIGURE, EMBEDDED, Capabilities, capabilities
from tests.test_doctor import NVIDIA_SMI, make_probes

GPU = Capabilities((DOCKER_WAY, NATIVE_VLLM_WAY))
VLLM_FILES = ("grid-vllm", "grid-vllm-fresh", "flag-order-vllm", "sweep-vllm")  # protocols/ a vLLM run serves


def setup_for(name: str, out: Path, **values) -> form.Setup:
    """The form as it opens for the kit's own protocols/<name>.yaml, then the values given."""
    path = protocols_dir() / f"{name}.yaml"
    data = yaml.safe_load(path.read_text())
    setup = form.defaults(str(path), data["protocol"], data, out)
    for key, value in values.items():
        setattr(setup, key, value)
    return setup


def test_the_vllm_protocols_the_form_names_are_the_ones_vllm_runs():
    assert form.protocols_for("vllm") == "flag-order-vllm, grid-vllm, grid-vllm-fresh or sweep-vllm"
    assert all(form.serving_problem(engines.VLLM, str(protocols_dir() / f"{name}.yaml")) is None for name in VLLM_FILES)


@pytest.mark.parametrize("engine, launcher", [("vllm-container", "docker"), ("vllm-native", "native")])
def test_a_vllm_engine_the_kit_starts_runs_a_checkpoint(engine, launcher, tmp_path):
    setup = setup_for("grid-vllm", tmp_path, engine=engine)
    assert form.problems(setup, GPU, set()) == {}
    options = form.run_options(setup)
    assert (options.engine, options.launcher, options.model) == ("vllm", launcher, None)  # None: qwen2.5-7b-instruct
    assert options.engine_url is None and options.engine_urls == {} and options.server_bin is None
    check_engine_choice(options)  # what `kit run` checks agrees
    setup.model = "llama3.1-8b-instruct"
    assert form.problems(setup, GPU, set()) == {} and form.run_options(setup).model == "llama3.1-8b-instruct"
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    setup.model = str(folder)
    assert form.problems(setup, GPU, set()) == {} and form.run_options(setup).model == str(folder)


@pytest.mark.parametrize("engine", ["vllm-container", "vllm-native"])
@pytest.mark.parametrize("name, needles", [
    ("grid-cpu", ("(server: shared), but vLLM fixes prefix caching per server process", "grid-vllm", "grid-vllm-fresh")),
    ("grid", ("(server: shared)", "grid-vllm", "grid-vllm-fresh")),  # no `server:` key: the grid's default
    ("flag-order", ("sets cache_ram", "flag-order-vllm")),
    ("sweep-cpu", ("vLLM serves one checkpoint as it is", "sweep-vllm")),
    ("reset", ("reset protocols do not run on vLLM",
               ": pick a llama.cpp engine, or a vLLM protocol (flag-order-vllm, grid-vllm, grid-vllm-fresh or "
               "sweep-vllm)")),
])
def test_vllm_is_refused_for_a_protocol_it_cannot_run_with_what_to_pick(engine, name, needles, tmp_path):
    line = form.problems(setup_for(name, tmp_path, engine=engine), GPU, set())["engine"]
    assert all(needle in line for needle in needles) and "\n" not in line
    assert "--engine vllm" not in line  # the form's own advice, not the CLI's


def test_the_form_never_starts_on_vllm_for_a_protocol_it_cannot_run():
    only_vllm = Capabilities((NATIVE_VLLM_WAY,))
    assert form.usable_engine("grid", only_vllm, str(protocols_dir() / "grid-cpu.yaml")) == "endpoint"
    assert form.usable_engine("grid", only_vllm, str(protocols_dir() / "grid-vllm.yaml")) == "vllm-native"


def test_a_machine_without_the_way_says_what_is_missing(tmp_path):
    gpu_only = capabilities(doctor.run_checks(make_probes(tmp_path, commands={"nvidia-smi": CommandResult(0, NVIDIA_SMI)}),
                                              start_engine=False))
    native = form.problems(setup_for("grid-vllm", tmp_path, engine="vllm-native"), gpu_only, set())["engine"]
    assert native.startswith("vllm executable: not installed (no ")
    assert native.endswith("; install it with `kit engines install vllm` (needs a GPU and network)")
    container = form.problems(setup_for("grid-vllm", tmp_path, engine="vllm-container"), gpu_only, set())["engine"]
    assert container.startswith("docker daemon: not reachable") and "install Docker" in container
    cpu_only = capabilities(doctor.run_checks(make_probes(tmp_path), start_engine=False))
    line = form.problems(setup_for("grid-vllm", tmp_path, engine="vllm-native"), cpu_only, set())["engine"]
    assert line.startswith("gpu: nvidia-smi not found: no NVIDIA GPU visible; install the NVIDIA driver")


def test_the_vllm_model_field_takes_checkpoints_not_gguf_files(tmp_path):
    known = form.registry_names().checkpoints
    assert known == {"qwen2.5-7b-instruct", "llama3.1-8b-instruct"}
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF\x03\x00\x00\x00")
    assert form.check_checkpoint("", known) is None
    assert form.check_checkpoint("qwen2.5-7b-instruct", known) is None
    assert form.check_checkpoint("Qwen/Qwen2.5-7B-Instruct", known) is None
    assert form.check_checkpoint("my-org/my.model_v2", known) is None
    assert form.check_checkpoint(str(tmp_path), known) is None  # a checkpoint folder
    give = ("give a checkpoint from the registry (llama3.1-8b-instruct, qwen2.5-7b-instruct), a Hugging Face id "
            "(Org/Name) or a checkpoint folder")
    assert form.check_checkpoint(str(gguf), known) == f"m.gguf is a GGUF file, which runs on llama.cpp, not vLLM: {give}"
    assert form.check_checkpoint("smollm2-135m-instruct-q4_1", known) == f"'smollm2-135m-instruct-q4_1' is not a vLLM checkpoint: {give}"
    assert form.check_checkpoint(str(tmp_path / "nowhere"), known) == f"no checkpoint folder at {tmp_path / 'nowhere'}: {give}"
    assert form.check_checkpoint("a/b/c", known).startswith("'a/b/c' is not a vLLM checkpoint")
    setup = setup_for("grid-vllm", tmp_path, engine="vllm-container", model=str(gguf))
    assert "is a GGUF file" in form.problems(setup, GPU, set())["model"]  # the GGUF check does not apply


def test_a_vllm_endpoint_takes_one_url_per_cache_arm(tmp_path):
    setup = setup_for("grid-vllm", tmp_path, engine="endpoint", endpoint_kind="vllm",
                      url_on="http://127.0.0.1:8001/", url_off=" http://127.0.0.1:8002")
    assert form.problems(setup, Capabilities((EMBEDDED,)), set()) == {}
    options = form.run_options(setup)
    assert options.engine == "vllm" and options.engine_url is None and options.model is None
    assert options.engine_urls == {"on": "http://127.0.0.1:8001", "off": "http://127.0.0.1:8002"}
    check_engine_choice(options)


@pytest.mark.parametrize("on, off, field, line", [
    ("", "http://127.0.0.1:8002", "url_on", "give the base URL of the vLLM server started with --enable-prefix-caching"),
    ("http://127.0.0.1:8001", "", "url_off",
     "give the base URL of the vLLM server started with --no-enable-prefix-caching"),
    ("http://127.0.0.1:8001", "http://127.0.0.1:8001/", "url_off",
     "this is the cache-on server again, but vLLM fixes prefix caching per server process: start one server per "
     "arm and give each its URL"),
    ("localhost:8001", "http://127.0.0.1:8002", "url_on",
     "'localhost:8001' is not an http(s) URL; write it like http://127.0.0.1:8080"),
    ("http://127.0.0.1:8001", "http://127.0.0.1:8002/v1", "url_off",
     "give the server's base URL without a path (the kit adds the API path itself)"),
])
def test_each_vllm_endpoint_url_is_checked_with_a_reason(on, off, field, line, tmp_path):
    setup = setup_for("grid-vllm", tmp_path, engine="endpoint", endpoint_kind="vllm", url_on=on, url_off=off)
    assert form.problems(setup, Capabilities((EMBEDDED,)), set()) == {field: line}


def test_a_vllm_endpoint_is_refused_where_vllm_or_a_server_reached_by_url_cannot_run_it(tmp_path):
    urls = {"engine": "endpoint", "url_on": "http://127.0.0.1:8001", "url_off": "http://127.0.0.1:8002"}
    cpu = Capabilities((EMBEDDED,))
    shared = form.problems(setup_for("grid-cpu", tmp_path, endpoint_kind="vllm", **urls), cpu, set())
    assert set(shared) == {"endpoint_kind"} and "(server: shared)" in shared["endpoint_kind"]
    fresh = form.problems(setup_for("grid-vllm-fresh", tmp_path, endpoint_kind="vllm", **urls), cpu, set())
    assert fresh == {"engine": "the protocol asks for a fresh server per pass (server: per_pass), but the kit cannot "
                               "restart a server it reaches by --engine-url: pick grid-vllm (a server per cache arm), "
                               "or an engine the kit starts"}
    llamacpp = form.problems(setup_for("grid-vllm-fresh", tmp_path, url="http://127.0.0.1:8080", endpoint_kind="llamacpp",
                                   **urls), cpu, set())
    assert llamacpp["engine"].endswith("pick a protocol with server: shared or per_arm, or an engine the kit starts")
    assert "reset protocols do not run on vLLM" in form.problems(
        setup_for("reset", tmp_path, endpoint_kind="vllm", **urls), cpu, set())["endpoint_kind"]


@pytest.mark.parametrize("name", VLLM_FILES)
def test_a_file_written_for_vllm_is_never_set_up_on_llama_cpp(name, tmp_path):
    """On a CPU-only machine the form opens a vLLM file on vLLM servers by URL (not the embedded engine for
    hours), and every llama.cpp engine says the file is written for vLLM (issue #22.6)."""
    path = str(protocols_dir() / f"{name}.yaml")
    kind = yaml.safe_load(Path(path).read_text())["protocol"]
    cpu = Capabilities((EMBEDDED,))
    started_only = kind in ("sweep", "flag_order")
    assert form.usable_engine(kind, cpu, path) == ("embedded" if started_only else "endpoint")  # none: the first
    for engine in ("embedded", "native", "llamacpp-container"):
        line = form.problems(setup_for(name, tmp_path, engine=engine), GPU, set())["engine"]
        assert line.startswith(f"{name} is written for vLLM (engine.kind: vllm): pick ")
    setup = setup_for(name, tmp_path, engine="endpoint", url="http://127.0.0.1:8080", endpoint_kind="llamacpp")
    assert "written for vLLM" in form.problems(setup, cpu, set())["endpoint_kind"]
    assert setup_for(name, tmp_path).endpoint_kind == "vllm"  # the form opens with a vLLM endpoint


def test_a_vllm_setup_says_its_estimate_is_a_cpu_figure(tmp_path):
    on_vllm = form.estimate_line(setup_for("grid-vllm", tmp_path, engine="vllm-native"))
    assert on_vllm.startswith("this setup: 80 episodes x 4 passes") and on_vllm.endswith("on a CPU" + CPU_FIGURE)
    by_url = form.estimate_line(setup_for("grid-vllm", tmp_path, engine="endpoint"))  # opens on vLLM servers
    assert by_url.endswith(CPU_FIGURE)
    assert not form.estimate_line(setup_for("grid-cpu", tmp_path, engine="embedded")).endswith(CPU_FIGURE)


@pytest.mark.parametrize("name", VLLM_FILES)
def test_kit_run_refuses_a_vllm_file_on_llama_cpp_as_the_launcher_does(name, tmp_path):
    """The CLI agrees with the launcher: a file written for vLLM does not start on the embedded engine for
    hours; one line says so and how to run it, and nothing is written."""
    result = subprocess.run([sys.executable, "-m", "kit.cli", "run", name, "--out", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "300"})
    assert result.returncode != 0 and result.stdout == ""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert lines == [f"kit: error: {name}.yaml is written for vLLM (engine.kind: vllm), not for llamacpp; add "
                     "--engine vllm (--launcher docker, native vllm, or --engine-url on=URL --engine-url off=URL), "
                     "or run a llama.cpp protocol (grid, grid-cpu)"]
    assert not (tmp_path / "out").exists()
