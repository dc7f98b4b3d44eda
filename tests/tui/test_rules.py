"""The launcher's rules without a screen: catalog, form checks, live state."""

from __future__ import annotations

from pathlib import Path

from kit.core.events import (
    EpisodeDone,
    EpisodeVerdict,
    ItemVerdict,
    RequestDone,
    RunEnded,
    RunStarted,
    SessionEnded,
    SessionStarted,
)
import pytest

from kit.app import doctor
from kit.app.doctor import CommandResult
from kit.core.errors import IllegalInstruction
from kit.launch.cpu.cpu_backend import CHOICES
from kit.protocols.kinds import KINDS
from kit.tui import form
from kit.tui.catalog import EMBEDDED, NOT_PROVEN, Capabilities, capabilities, catalog
from kit.tui.live_state import LiveState
from kit.tui.screens.picker import machine_line
from tests.test_doctor import NVIDIA_SMI, FakeEngine, make_probes
from tests.tui.conftest import PROTOCOLS, SetClock

# the kinds a protocol file can ask for, and those of them that need an engine the kit starts (no endpoint URL),
# as each kind declares on its registration
FILE_KINDS = {name for name, kind in KINDS.items() if kind.from_files}
STARTED_ONLY = {name for name in FILE_KINDS if KINDS[name].launcher.started_engine_only}
SIGILL = IllegalInstruction("llama-server died of SIGILL computing its first tokens on the wheel CPU backend",
                            "run `kit doctor --cpu-backend portable`")


def test_catalog_lists_every_file_and_refuses_kinds_the_kit_cannot_run(cpu_caps):
    entries = {e.name: e for e in catalog(cpu_caps, PROTOCOLS)}
    assert set(entries) == {"reset", "grid-cpu", "batch"}
    assert entries["reset"].runnable and entries["grid-cpu"].runnable
    assert not entries["batch"].runnable and "not available yet" in entries["batch"].why_not
    assert "16 requests" in entries["reset"].explanation()
    assert [e.name for e in catalog(cpu_caps, PROTOCOLS)][-1] == "batch"  # runnable ones first


def test_catalog_waits_for_the_doctor_before_anything_can_start():
    entries = catalog(Capabilities((), checked=False), PROTOCOLS)
    assert not any(e.runnable for e in entries)


def _caps(tmp_path, engine, start=True, **probes):
    return capabilities(doctor.run_checks(make_probes(tmp_path, engine=engine, **probes), start_engine=start))


def _by_kind(caps):
    entries = {}
    for entry in catalog(caps):  # the kit's own protocols/
        entries.setdefault(entry.kind, []).append(entry)
    assert set(entries) == FILE_KINDS and {"reset", "grid", "sweep"} <= FILE_KINDS
    assert {"sweep", "flag_order"} <= STARTED_ONLY and not {"reset", "grid"} & STARTED_ONLY
    return entries


def _llamacpp(caps):
    """The catalog's entries for the files written for llama.cpp (the vLLM files are tested on their own)."""
    return [e for e in catalog(caps) if e.engine == "llamacpp"]


def test_a_proven_embedded_engine_makes_every_kind_ready(tmp_path):
    caps = _caps(tmp_path, FakeEngine())
    assert caps.ways == (EMBEDDED,) and EMBEDDED not in caps.why_not
    assert caps.why_not[doctor.DOCKER_WAY].startswith("docker daemon: not reachable")  # what each closed way lacks
    assert caps.why_not[doctor.NATIVE_VLLM_WAY].startswith("gpu: nvidia-smi not found")
    assert all(e.ready and e.runnable and e.why_not is None for e in _llamacpp(caps))
    assert {e.kind for e in _llamacpp(caps)} == FILE_KINDS


VLLM_FILES = {"grid-vllm", "grid-vllm-fresh", "flag-order-vllm", "sweep-vllm"}


def test_a_cpu_only_machine_is_not_ready_for_the_vllm_files_as_kit_doctor_says(tmp_path):
    """The launcher's readiness and `kit doctor` agree: no vLLM way open, no vLLM file ready (issue #22.6)."""
    probes = make_probes(tmp_path, engine=FakeEngine())
    checks = doctor.run_checks(probes)
    assert not {doctor.DOCKER_WAY, doctor.NATIVE_VLLM_WAY} & set(doctor.runnable(checks))
    entries = {e.name: e for e in catalog(capabilities(checks))}
    assert {name for name, e in entries.items() if e.engine == "vllm"} == VLLM_FILES
    for name in VLLM_FILES:
        entry = entries[name]
        assert not entry.ready
        assert entry.runnable is (entry.kind not in STARTED_ONLY)  # a grid: your own vLLM servers by URL still work
        assert entry.why_not == ("written for vLLM, which `kit doctor` does not find here (native vLLM: gpu: nvidia-smi "
                                 "not found: no NVIDIA GPU visible; `d` shows every check and its fix)")
    ready = [e.ready for e in catalog(capabilities(checks))]
    assert ready == sorted(ready, reverse=True) and sum(ready) == len(entries) - len(VLLM_FILES)  # ready ones first


def test_a_gpu_machine_with_vllm_installed_is_ready_for_the_vllm_files(tmp_path):
    vllm = tmp_path / "venv" / "bin" / "vllm"
    vllm.parent.mkdir(parents=True)
    vllm.write_text("#!/bin/sh\n")
    vllm.chmod(0o755)
    checks = doctor.run_checks(make_probes(tmp_path, engine=FakeEngine(), vllm=vllm,
                                           commands={"nvidia-smi": CommandResult(0, NVIDIA_SMI)}))
    assert doctor.NATIVE_VLLM_WAY in doctor.runnable(checks)
    entries = {e.name: e for e in catalog(capabilities(checks))}
    assert all(entries[name].ready and entries[name].why_not is None for name in VLLM_FILES)


def test_the_pickers_machine_line_names_the_embedded_engines_reason_only(tmp_path):
    caps = _caps(tmp_path, FakeEngine(), start=False)
    assert doctor.DOCKER_WAY in caps.why_not  # said in the setup form, where a GPU way is chosen
    assert machine_line(caps) == f"this machine: no proven local engine (an endpoint URL still works); {NOT_PROVEN}"


def test_an_unproven_embedded_engine_makes_nothing_ready_and_says_run_kit_doctor(tmp_path):
    engine = FakeEngine()
    caps = _caps(tmp_path, engine, start=False)
    assert engine.proofs == 0 and caps.ways == () and caps.why_not[EMBEDDED] == NOT_PROVEN
    for kind, entries in _by_kind(caps).items():
        for entry in entries:
            assert not entry.ready and (entry.why_not == NOT_PROVEN) is (entry.engine == "llamacpp")
            assert entry.runnable is (kind not in STARTED_ONLY)  # an endpoint URL still works for the others


def test_a_failed_proof_makes_nothing_ready_and_shows_the_doctors_line(tmp_path):
    caps = _caps(tmp_path, FakeEngine([SIGILL]))
    line = caps.why_not[EMBEDDED]
    assert line.startswith("embedded engine: its proof failed: llama-server died of SIGILL")
    assert line.endswith("; run `kit doctor --cpu-backend portable`") and "\n" not in line
    assert not any(e.ready for e in catalog(caps))
    assert all(e.why_not == line for e in _llamacpp(caps))


def test_a_kept_proof_counts_without_starting_anything(tmp_path):
    engine = FakeEngine()
    _caps(tmp_path, engine)
    caps = _caps(tmp_path, engine, start=False)
    assert engine.proofs == 1 and caps.ways == (EMBEDDED,)


def test_a_gpu_machine_without_the_embedded_engine_is_ready_through_its_gpu_engines(tmp_path):
    info = {"ServerVersion": "27.3.1", "Runtimes": {"nvidia": {}}}
    caps = _caps(tmp_path, FakeEngine(installed=False), docker=lambda: info,
                 commands={"nvidia-smi": CommandResult(0, NVIDIA_SMI)})
    assert caps.gpu and not caps.embedded and "not installed" in caps.why_not[EMBEDDED]
    assert all(e.ready for e in catalog(caps))


@pytest.mark.parametrize("kind, engine, needle", [
    ("sweep", "endpoint", "sweep protocols cannot use my own endpoint"),
    ("flag_order", "endpoint", "flag_order protocols cannot use my own endpoint"),
    ("reset", "endpoint", None),
    ("sweep", "embedded", None),
])
def test_each_kind_names_the_engines_it_can_use(kind, engine, needle, cpu_caps):
    choice = next(c for c in form.ENGINES if c.key == engine)
    problem = form.engine_problem(choice, cpu_caps, kind)
    assert problem is None if needle is None else needle in problem


def test_the_form_names_why_the_embedded_engine_is_not_usable():
    caps = Capabilities((), why_not={EMBEDDED: NOT_PROVEN})
    assert form.engine_problem(form.ENGINES[0], caps, "reset") == NOT_PROVEN
    assert form.usable_engine("reset", caps) == "endpoint"
    assert form.usable_engine("reset", Capabilities((EMBEDDED,))) == "embedded"


def test_the_cpu_backend_choice_reaches_the_runner(tmp_path, cpu_caps):
    assert tuple(form.CPU_BACKENDS) == CHOICES
    setup = form.defaults("reset.yaml", "reset", {}, tmp_path)
    assert setup.cpu_backend == "auto" and form.run_options(setup).cpu_backend == "auto"
    setup.cpu_backend = "portable"
    assert form.problems(setup, cpu_caps, set()) == {}
    assert form.run_options(setup).cpu_backend == "portable"
    setup.engine, setup.url = "endpoint", "http://127.0.0.1:8080"
    assert form.run_options(setup).cpu_backend == "auto"  # only the embedded engine has a CPU backend


def test_url_check_explains_what_is_wrong():
    assert form.check_url("http://127.0.0.1:8080") is None
    assert "not an http(s) URL" in form.check_url("localhost:8080")
    assert "no host" in form.check_url("http://")
    assert "port" in form.check_url("http://host:99999")
    assert "without a path" in form.check_url("http://host:8080/v1/completions")


def test_model_check_accepts_registry_names_and_gguf_files_only(tmp_path):
    gguf, text = tmp_path / "m.gguf", tmp_path / "notes.gguf"
    gguf.write_bytes(b"GGUF\x03\x00\x00\x00")
    text.write_text("hello")
    known = {"smollm2-135m-instruct-q4_1"}
    assert form.check_model("", known) is None
    assert form.check_model("smollm2-135m-instruct-q4_1", known) is None
    assert form.check_model(str(gguf), known) is None
    assert "not a GGUF file" in form.check_model(str(text), known)
    assert "no file at" in form.check_model(str(tmp_path / "missing.gguf"), known)
    assert "not a model in the registry" in form.check_model("llama-9000", known)


def test_defaults_run_and_become_overrides(tmp_path, cpu_caps):
    setup = form.defaults(str(PROTOCOLS / "reset.yaml"), "reset", {"workload": {"items": 2}, "sessions": 2,
                                                                 "max_tokens": 8}, tmp_path)
    assert form.problems(setup, cpu_caps, set()) == {}
    options = form.run_options(setup)
    assert options.overrides == {}  # the file's own numbers are no overrides (as `kit run` records `{}`)
    assert options.engine_url is None and options.out == tmp_path
    setup.size, setup.max_tokens = "3", "8"  # a changed number is one; an unchanged one still is not
    assert form.run_options(setup).overrides == {"workload": {"items": 3}}
    setup.size = "2"
    setup.engine, setup.url = "endpoint", "http://127.0.0.1:8080/"
    assert form.run_options(setup).engine_url == "http://127.0.0.1:8080"
    setup.engine = "vllm-container"  # wired, but vLLM serves grids only
    assert "reset protocols do not run on vLLM" in form.problems(setup, cpu_caps, set())["engine"]
    setup.engine = "llamacpp-container"  # wired to the runner's Docker launcher, but this machine has no daemon
    assert "cannot run it" in form.problems(setup, cpu_caps, set())["engine"]
    assert form.run_options(setup).launcher == "docker"


def test_live_state_counts_verdicts_gates_and_eta():
    clock = SetClock()
    state = LiveState(clock=clock)
    state.apply(RunStarted(Path("/runs/r"), "reset", {"requests": 8, "sessions": 2}))
    state.apply(SessionStarted("s1", 1, 2, {}))
    for seq, cached in enumerate((0, 40, 0, None), start=1):
        state.apply(RequestDone("s1", "a", "p", seq, cached, 5.0, cached != 0 or seq != 2))
    clock.now += 40
    state.apply(ItemVerdict("s1", "a", 1, 1, True, True, True, 3))
    state.apply(EpisodeVerdict("path", ("on1", "off1"), "ep", False, None, None, None))
    state.apply(SessionEnded("s1", "VOID", "1 of 4 requests violated the gate"))
    assert state.cache_counts() == {"cold": 2, "hit": 1, "checkpoint": 0, "unknown": 1}
    assert state.eta_seconds() == 40  # 4 of 8 requests in 40 s
    assert state.diverged_count() == (1, 2)
    assert "paths differ at token 3" in state.verdicts[0].verdict
    assert state.gates["s1"].status == "VOID"
    state.apply(SessionStarted("s2", 2, 2, {}))
    state.apply(RunEnded(Path("/runs/r"), "interrupted", "stopped"))
    assert state.gates["s2"].status == "interrupted"


def test_grid_gates_are_per_pass_not_per_server():
    state = LiveState(clock=SetClock())
    state.apply(RunStarted(Path("/runs/g"), "grid", {"passes": ["on1", "off1"], "episodes": 2}))
    state.apply(SessionStarted("grid", 1, 1, {}))
    state.apply(RequestDone("on1", "ep0", "on", 1, 0, 900.0, True))
    assert state.done == 0 and state.total == 4  # the grid counts episodes, not requests
    state.apply(EpisodeDone("on1", "ep0", 1, 2, 3, "finished", True))
    state.apply(SessionEnded("on1", "OK", None))
    assert state.done == 1
    assert set(state.gates) == {"on1"} and state.gates["on1"].status == "OK"


def test_bfcl_kinds_take_their_size_as_episodes(tmp_path):
    for kind, data in (("flag_order", {"workload": {"ids": ["a", "b"]}}), ("sweep", {"workload": {"episodes": 5}})):
        setup = form.defaults("p.yaml", kind, data, tmp_path)
        histories = {"histories": 11} if kind == "sweep" else {}  # a sweep's repeats are its histories
        assert form.overrides(setup) == {}
        assert form.overrides(setup, every=True) == {"workload": {"episodes": int(setup.size)}, **histories}
        assert "episodes x" in form.estimate_line(setup)
    assert form.defaults("p.yaml", "flag_order", {"workload": {"ids": ["a", "b"]}}, tmp_path).size == "2"
