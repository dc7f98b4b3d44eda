"""`kit doctor`: each check against injected probes, then the real doctor on this machine.

The probe-driven tests fake only what cannot exist here (a Docker daemon, nvidia-smi on a GPU
machine) or what another test proves for real (the embedded engine's completion); the `docker info`
and nvidia-smi texts are the shapes those tools print.
"""

from __future__ import annotations

import dataclasses

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kit.app import doctor
from kit.launch.llamacpp import embedded_proof
from kit.app.doctor import MISSING, OK, WARN, CommandResult, Probes
from kit.core.errors import EngineError, IllegalInstruction
from kit.launch.docker.container_spec import VLLM_IMAGE
from kit.launch.cpu.cpu_backend import CpuBackend
from kit.launch.llamacpp.embedded import EmbeddedBinary

NVIDIA_SMI = "NVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB\nNVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB\n"
NVCC_12 = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.6, V12.6.77\n"
NVCC_13 = "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 13.0, V13.0.88\n"


def no_daemon():
    raise ConnectionError("Error while fetching server API version: No such file or directory")


WHEEL_BACKEND = {"name": "wheel", "chosen_by": "auto", "rebuilt_here": False, "library_sha256": "e9" * 32}
IDENTITY = {"key": "8b55" * 16, "key_inputs": {"cpu_backend_choice": "auto"}, "cpu_backend": WHEEL_BACKEND}
COMPLETION = {"build_info": "b1-7e4c0a9", "startup_seconds": 1.0, "completion_seconds": 0.1, "tokens": 4,
              "text": " Paris.\n\n"}


class FakeEngine:
    """The embedded engine as the doctor sees it: located (or not), and each proof's outcome in turn."""

    def __init__(self, outcomes=(COMPLETION,), installed=True):
        self.outcomes, self.installed, self.proofs = list(outcomes), installed, 0

    def identity(self):
        if not self.installed:
            raise EngineError("the embedded llama-server is not installed", "use --server-bin")
        return IDENTITY

    def prove(self):
        outcome = self.outcomes[min(self.proofs, len(self.outcomes) - 1)]
        self.proofs += 1
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def make_probes(tmp_path: Path, *, commands=None, tools=("cmake", "make", "c++"), docker=no_daemon, free=50 * 2**30,
                engine=None, needs=None, environ=None, images=None, vllm=None) -> Probes:
    """`images`: tag -> what the docker SDK's image lookup gives (none: no image is built); `vllm`: where the
    vLLM venv's executable is (none: a path with nothing there)."""
    commands, images = commands or {}, images or {}
    engine = engine or FakeEngine(installed=False)

    def run(argv):
        return commands.get(argv[0])

    def image(tag):
        found = images.get(tag)
        if isinstance(found, Exception):
            raise found
        return found

    return Probes(docker_info=docker, docker_image=image, run=run,
                  which=lambda name: f"/usr/bin/{name}" if name in tools else None,
                  disk_free=lambda path: free, free_port=lambda: 43210, embedded_identity=engine.identity,
                  prove_embedded=engine.prove,
                  model_needs=lambda names: needs if needs is not None else [(n, 98362432, False) for n in names],
                  cache_dir=tmp_path, environ=environ or {}, hf_token_file=tmp_path / "token",
                  vllm_executable=lambda: vllm or tmp_path / "vllm-venv" / "bin" / "vllm")


def by_name(checks):
    return {c.name: c for c in checks}


GPU_DOCKER = {"ServerVersion": "27.3.1", "Runtimes": {"runc": {}, "nvidia": {"path": "nvidia-container-runtime"}}}
VLLM_IMAGE_FOUND = {"id": "sha256:" + "3f" * 32, "tags": [VLLM_IMAGE]}


def installed_vllm(tmp_path: Path) -> Path:
    """A stand-in for the venv's `vllm` executable (the doctor only looks whether it is there)."""
    path = tmp_path / "vllm-venv" / "bin" / "vllm"
    path.parent.mkdir(parents=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_gpu_machine_with_docker_can_run_everything(tmp_path):
    probes = make_probes(tmp_path, docker=lambda: GPU_DOCKER,
                         commands={"nvidia-smi": CommandResult(0, NVIDIA_SMI), "nvcc": CommandResult(0, NVCC_12)},
                         engine=FakeEngine(), images={VLLM_IMAGE: VLLM_IMAGE_FOUND}, vllm=installed_vllm(tmp_path))
    cuda = {"reference": "kit/llamacpp:7e4c0a9-cuda12.6", "id": "sha256:" + "5e" * 32, "target": "cuda",
            "base": "nvidia/cuda:12.6.3-runtime-ubuntu24.04", "llamacpp_commit": "7e4c0a9", "wheel_sha256": None,
            "cpu_backend": None, "cpu_backend_sha256": None}
    cpu = {**cuda, "reference": "kit/llamacpp:7e4c0a9-cpu", "target": "cpu", "base": "debian:bookworm-slim"}
    probes = dataclasses.replace(probes, docker_llamacpp_images=lambda: [cuda, cpu])
    checks = doctor.run_checks(probes)
    found = by_name(checks)
    assert all(c.status == OK for c in checks if c.name != "hf token")
    assert found["vllm image"].detail == f"{VLLM_IMAGE} present (3f3f3f3f3f3f)"
    assert "2 GPU(s)" in found["gpu"].detail and "550.54.15" in found["gpu"].detail
    assert found["nvcc"].data["release"] == "12.6"
    assert "proven now: 4 tokens" in found["embedded engine"].detail
    assert "wheel CPU backend" in found["embedded engine"].detail
    assert doctor.runnable(checks) == list(doctor.PATHS)
    assert doctor.unproven_ways(checks) == []


def test_docker_without_nvidia_runtime_is_missing_with_the_fix(tmp_path):
    probes = make_probes(tmp_path, docker=lambda: {"ServerVersion": "27.3.1", "Runtimes": {"runc": {}}})
    daemon = doctor.check_docker_daemon(probes)
    runtime = doctor.check_nvidia_runtime(probes, daemon)
    assert daemon.status == OK
    assert runtime.status == MISSING and "nvidia-ctk" in runtime.fix


def test_no_daemon_reports_the_reason(tmp_path):
    check = doctor.check_docker_daemon(make_probes(tmp_path))
    assert check.status == MISSING and "No such file" in check.detail and "DOCKER_HOST" in check.fix


def test_a_missing_vllm_image_is_a_warning_with_the_build_line_and_blocks_nothing(tmp_path):
    probes = make_probes(tmp_path, docker=lambda: GPU_DOCKER, commands={"nvidia-smi": CommandResult(0, NVIDIA_SMI)})
    checks = doctor.run_checks(probes)
    image = by_name(checks)["vllm image"]
    assert image.status == WARN and image.detail == "kit/vllm:0.11.0 not built yet"
    assert image.fix == ("`docker build -f Dockerfile.vllm -t kit/vllm:0.11.0 .` (needs network), or the kit builds it "
                         "on the first vLLM container run")
    assert image.data == {"image": VLLM_IMAGE, "present": False}
    assert doctor.DOCKER_WAY in doctor.runnable(checks)  # the kit builds it on first run, as the llama.cpp image


@pytest.mark.parametrize("images, needle", [
    ({VLLM_IMAGE: ConnectionError("read timed out")}, "cannot look up kit/vllm:0.11.0 (read timed out)"),
    (None, "cannot tell without a Docker daemon"),
])
def test_the_vllm_image_is_not_looked_up_without_a_daemon_that_answers(tmp_path, images, needle):
    docker = (lambda: GPU_DOCKER) if images else no_daemon
    check = by_name(doctor.run_checks(make_probes(tmp_path, docker=docker, images=images)))["vllm image"]
    assert check.status == WARN and check.detail == needle


def test_native_vllm_needs_the_venvs_executable_and_says_how_to_install_it(tmp_path):
    gpu = {"nvidia-smi": CommandResult(0, NVIDIA_SMI)}
    checks = doctor.run_checks(make_probes(tmp_path, commands=gpu))
    missing = doctor.blocking(checks, doctor.NATIVE_VLLM_WAY)
    assert missing is by_name(checks)["vllm executable"] and missing.status == MISSING
    assert missing.detail == f"not installed (no {tmp_path / 'vllm-venv' / 'bin' / 'vllm'})"
    assert missing.fix.startswith("install it with `kit engines install vllm`")
    assert doctor.NATIVE_VLLM_WAY not in doctor.runnable(checks)
    installed = doctor.run_checks(make_probes(tmp_path, commands=gpu, vllm=installed_vllm(tmp_path)))
    assert by_name(installed)["vllm executable"].status == OK
    assert doctor.NATIVE_VLLM_WAY in doctor.runnable(installed) and doctor.blocking(installed, doctor.NATIVE_VLLM_WAY) is None
    no_gpu = doctor.run_checks(make_probes(tmp_path, vllm=installed_vllm(tmp_path / "other")))
    assert doctor.blocking(no_gpu, doctor.NATIVE_VLLM_WAY).name == "gpu"  # the first missing need is named


def test_the_vllm_executable_must_be_executable(tmp_path):
    path = installed_vllm(tmp_path)
    path.chmod(0o644)
    check = doctor.check_vllm_executable(make_probes(tmp_path, vllm=path))
    assert check.status == MISSING and check.detail == f"{path} is not executable"


def test_the_docker_way_names_its_first_missing_need(tmp_path):
    no_runtime = doctor.run_checks(make_probes(tmp_path, docker=lambda: {"ServerVersion": "27.3.1", "Runtimes": {}},
                                               commands={"nvidia-smi": CommandResult(0, NVIDIA_SMI)}))
    assert doctor.blocking(no_runtime, doctor.DOCKER_WAY).name == "nvidia runtime"
    assert doctor.blocking(doctor.run_checks(make_probes(tmp_path)), doctor.DOCKER_WAY).name == "docker daemon"


@pytest.mark.parametrize("result, status, needle", [
    (None, MISSING, "not found"),
    (CommandResult(9, "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver"), MISSING,
     "couldn't communicate"),
    (CommandResult(0, ""), MISSING, "no GPU"),
])
def test_gpu_absent_or_broken(tmp_path, result, status, needle):
    check = doctor.check_gpu(make_probes(tmp_path, commands={"nvidia-smi": result} if result else {}))
    assert check.status == status and needle in check.detail and check.fix


def test_nvcc_versions(tmp_path):
    assert doctor.check_nvcc(make_probes(tmp_path)).status == MISSING
    warn = doctor.check_nvcc(make_probes(tmp_path, commands={"nvcc": CommandResult(0, NVCC_13)}))
    assert warn.status == WARN and "13.0" in warn.detail and "CUDA 12" in warn.fix


def test_nvcc_13_is_no_warning_on_a_machine_without_a_gpu(tmp_path):
    """A CPU-only machine makes no CUDA build, so its nvcc's release does not matter (issue #22.7)."""
    cpu_only = by_name(doctor.run_checks(make_probes(tmp_path, commands={"nvcc": CommandResult(0, NVCC_13)})))
    assert cpu_only["gpu"].status == MISSING
    assert cpu_only["nvcc"].status == OK and "CUDA 13.0 (no GPU here" in cpu_only["nvcc"].detail
    with_gpu = by_name(doctor.run_checks(make_probes(tmp_path, commands={
        "nvcc": CommandResult(0, NVCC_13), "nvidia-smi": CommandResult(0, NVIDIA_SMI)})))
    assert with_gpu["nvcc"].status == WARN and "CUDA 12" in with_gpu["nvcc"].fix
    assert doctor.nvcc_release(NVCC_12) == (12, 6)
    assert doctor.nvcc_release("garbage") is None


def test_build_tools_names_what_is_missing(tmp_path):
    check = doctor.check_build_tools(make_probes(tmp_path, tools=("cmake",)))
    assert check.status == MISSING and check.detail == "not found: make, c++"
    # the same install line as every build says (kit.launch.build_tools)
    assert check.fix == "install make and c++ (apt-get install -y cmake build-essential), then retry"


def test_disk_compares_free_space_with_models_to_fetch(tmp_path):
    needs = [("big", 40 * 2**30, False), ("cached", 90 * 2**30, True)]
    ok = doctor.check_disk(make_probes(tmp_path, needs=needs, free=50 * 2**30), ["big", "cached"])
    short = doctor.check_disk(make_probes(tmp_path, needs=needs, free=10 * 2**30), ["big", "cached"])
    unknown = doctor.check_disk(make_probes(tmp_path, needs=[("x", None, False)]), ["x"])
    assert ok.status == OK and ok.data["needed_bytes"] == 40 * 2**30  # the cached model needs no room
    assert short.status == MISSING and "KIT_CACHE_DIR" in short.fix
    assert unknown.status == WARN and "x" in unknown.detail


def test_hf_token_is_yes_or_no_and_never_printed(tmp_path):
    secret = "hf_abcdefSECRET123"
    check = doctor.check_hf_token(make_probes(tmp_path, environ={"HF_TOKEN": secret}))
    assert check.status == OK and secret not in json.dumps(doctor.report([check]))
    assert doctor.check_hf_token(make_probes(tmp_path)).status == WARN
    (tmp_path / "token").write_text(secret)
    assert doctor.check_hf_token(make_probes(tmp_path)).status == OK


def test_nothing_runnable_when_every_engine_path_is_missing(tmp_path):
    checks = doctor.run_checks(make_probes(tmp_path, tools=()))
    found = by_name(checks)
    assert found["embedded engine"].status == MISSING and found["embedded engine"].fix == "use --server-bin"
    assert doctor.runnable(checks) == []
    assert doctor.report(checks)["can_run"] == []


def test_a_cpu_machine_names_what_only_a_gpu_needs_on_one_line_and_keeps_its_exit_status(tmp_path):
    checks = doctor.run_checks(make_probes(tmp_path, engine=FakeEngine(), commands={"nvcc": CommandResult(0, NVCC_13)}))
    assert set(doctor.GPU_ONLY) <= {c.name for c in checks}  # every name the list holds is a check the doctor makes
    lines = doctor.lines(checks)
    aside = [line for line in lines if doctor.NOT_NEEDED in line]
    assert aside == [f"-       {doctor.NOT_NEEDED}: {', '.join(doctor.GPU_ONLY)} (each with its fix: kit doctor --json)"]
    shown = [line.split(":")[0].split(None, 1)[1] for line in lines if line[:8].strip() in (OK, MISSING, WARN)]
    assert set(shown).isdisjoint(doctor.GPU_ONLY) and "docker daemon" in shown and "embedded engine" in shown
    assert sorted(shown + list(doctor.GPU_ONLY)) == sorted(c.name for c in checks)  # each check, once
    assert lines[-1] == doctor.can_run_line(checks) == "can run: embedded CPU engine"
    assert [c["name"] for c in doctor.report(checks)["checks"]] == [c.name for c in checks]  # --json keeps all
    nothing = doctor.run_checks(make_probes(tmp_path / "bare", tools=()))
    assert doctor.report(nothing)["can_run"] == [] and doctor.NOT_NEEDED in doctor.lines(nothing)[-2]


def test_a_gpu_machine_shows_every_check_on_its_own_line(tmp_path):
    probes = make_probes(tmp_path, docker=lambda: GPU_DOCKER, commands={"nvidia-smi": CommandResult(0, NVIDIA_SMI)})
    checks = doctor.run_checks(probes)
    assert doctor.not_needed(checks) == [] and len(doctor.lines(checks)) == len(checks) + 1


def test_check_line_shows_fix_only_when_not_ok():
    assert "->" in doctor.Check("gpu", MISSING, "none", "install it").line()
    assert "->" not in doctor.Check("gpu", OK, "one", "unused").line()


def embedded_check(checks):
    return by_name(checks)["embedded engine"]


def test_a_proof_is_kept_reused_until_recheck(tmp_path):
    engine = FakeEngine()
    probes = make_probes(tmp_path, engine=engine)
    first = embedded_check(doctor.run_checks(probes))
    kept = embedded_proof.path(tmp_path, IDENTITY["key"])
    assert first.status == OK and first.data["cached"] is False and engine.proofs == 1
    assert kept == tmp_path / "doctor" / "embedded-proof-8b558b558b558b55.json"
    stored = json.loads(kept.read_text())
    assert stored["ok"] and stored["tokens"] == 4 and stored["cpu_backend"] == WHEEL_BACKEND
    assert stored["key_inputs"] == IDENTITY["key_inputs"]

    again = embedded_check(doctor.run_checks(probes))
    assert engine.proofs == 1  # nothing started
    assert again.status == OK and again.data["cached"] is True
    assert again.detail.startswith(f"proven {embedded_proof.when(stored)} (cached")

    rechecked = embedded_check(doctor.run_checks(probes, recheck=True))
    assert engine.proofs == 2 and rechecked.status == OK and rechecked.data["cached"] is False


def test_no_start_uses_a_kept_proof(tmp_path):
    engine = FakeEngine()
    doctor.run_checks(make_probes(tmp_path, engine=engine))
    checks = doctor.run_checks(make_probes(tmp_path, engine=engine), start_engine=False)
    assert engine.proofs == 1
    assert embedded_check(checks).status == OK and "proven " in embedded_check(checks).detail
    assert doctor.can_run_line(checks) == "can run: embedded CPU engine"
    assert doctor.report(checks)["unproven"] == []


def test_no_start_without_a_proof_is_installed_but_unproven_and_still_a_way_to_run(tmp_path):
    engine = FakeEngine()
    checks = doctor.run_checks(make_probes(tmp_path, engine=engine), start_engine=False)
    check = embedded_check(checks)
    assert engine.proofs == 0 and not (tmp_path / "doctor").exists()
    assert check.status == WARN and "not proven" in check.detail and "`kit doctor`" in check.fix
    assert doctor.can_run_line(checks) == "can run: embedded CPU engine (not proven yet: run `kit doctor`)"
    result = doctor.report(checks)
    assert result["can_run"] == ["embedded CPU engine"] and result["unproven"] == ["embedded CPU engine"]
    assert result["checks"][-2]["data"]["proven"] is False
    assert {c["name"] for c in result["checks"]} >= {"vllm image", "vllm executable"}
    assert set(result) == {"checks", "can_run", "unproven"}
    assert all(set(c) == {"name", "status", "detail", "fix", "data"} for c in result["checks"])


def test_a_failed_proof_is_kept_as_a_failure_never_as_a_success(tmp_path):
    sigill = IllegalInstruction("llama-server died of SIGILL computing its first tokens on the wheel CPU backend",
                                "run `kit doctor --cpu-backend portable`")
    engine = FakeEngine([sigill, COMPLETION])
    probes = make_probes(tmp_path, engine=engine)
    failed = embedded_check(doctor.run_checks(probes))
    assert failed.status == MISSING and "SIGILL" in failed.detail and "--cpu-backend portable" in failed.fix
    assert json.loads(embedded_proof.path(tmp_path, IDENTITY["key"]).read_text())["ok"] is False
    assert doctor.runnable(doctor.run_checks(probes, start_engine=False)) == []  # the last proof failed
    no_start = embedded_check(doctor.run_checks(probes, start_engine=False))
    assert no_start.status == MISSING and "its last proof" in no_start.detail and engine.proofs == 1
    proven = embedded_check(doctor.run_checks(probes))  # a failure is not reused: it proves again
    assert engine.proofs == 2 and proven.status == OK and proven.data["cached"] is False


def test_an_unexpected_proof_error_is_reported_not_raised(tmp_path):
    check = embedded_check(doctor.run_checks(make_probes(tmp_path, engine=FakeEngine([RuntimeError("boom")]))))
    assert check.status == MISSING and "boom" in check.detail and "kit demo" in check.fix


def test_the_proof_key_changes_with_everything_it_depends_on(tmp_path):
    wheel_lib, portable_lib = tmp_path / "libggml-cpu.so.0", tmp_path / "portable.so"
    wheel_lib.write_bytes(b"wheel")
    portable_lib.write_bytes(b"portable")

    def found(name, sha):
        backend = CpuBackend(name, "auto", "why", str(wheel_lib), sha, "src", None, ("avx2",), name == "portable")
        return EmbeddedBinary(tmp_path / "llama-server", {}, backend)

    wheel_sha = hashlib.sha256(b"wheel").hexdigest()
    base = embedded_proof.key_inputs(found("wheel", wheel_sha), "auto", {"avx2", "fma"})
    assert base["wheel_library_sha256"] == base["backend_library_sha256"] == wheel_sha
    portable = embedded_proof.key_inputs(found("portable", "ab" * 32), "portable", {"avx2", "fma"})
    assert portable["wheel_library_sha256"] == wheel_sha and portable["backend_library_sha256"] == "ab" * 32
    keys = {embedded_proof.key(inputs) for inputs in (
        base, portable, {**base, "cpu_backend_choice": "wheel"}, {**base, "kit_version": "9.9"},
        embedded_proof.key_inputs(found("wheel", wheel_sha), "auto", {"avx2"}))}
    assert len(keys) == 5
    assert embedded_proof.key(base) == embedded_proof.key(dict(reversed(list(base.items()))))


def test_no_start_and_recheck_together_are_refused():
    result = subprocess.run([sys.executable, "-m", "kit.cli", "doctor", "--no-start", "--recheck"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "drop one" in result.stderr


@pytest.mark.engine
def test_doctor_on_this_machine_proves_the_embedded_engine(fresh_kit_cache):
    """This machine has no Docker daemon and no GPU, and the embedded engine computes tokens. The kit cache is
    a fresh one (sharing the real models and engine builds), so the proof is made, then kept."""
    def doctor_json(*options):
        result = subprocess.run([sys.executable, "-m", "kit.cli", "doctor", "--json", *options], capture_output=True,
                                text=True, timeout=240)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    report = doctor_json("--recheck")
    found = {c["name"]: c for c in report["checks"]}
    assert found["docker daemon"]["status"] == MISSING
    assert found["gpu"]["status"] == MISSING
    engine = found["embedded engine"]
    assert engine["status"] == OK, engine
    proof = engine["data"]
    assert proof["proven"] is True and proof["cached"] is False
    assert proof["tokens"] > 0 and proof["text"] and proof["completion_seconds"] > 0
    assert "7e4c0a9" in proof["build_info"] and proof["startup_seconds"] > 0
    assert proof["cpu_backend"]["name"] in ("wheel", "portable") and len(proof["cpu_backend"]["library_sha256"]) == 64
    assert report["can_run"] == ["embedded CPU engine"] and report["unproven"] == []
    kept = json.loads(embedded_proof.path(fresh_kit_cache, proof["key"]).read_text())
    assert kept["ok"] and kept["tokens"] == proof["tokens"]

    cached = {c["name"]: c for c in doctor_json("--no-start")["checks"]}["embedded engine"]
    assert cached["status"] == OK and cached["data"]["cached"] is True and cached["data"]["at"] == kept["at"]


def test_the_real_image_probe_asks_the_docker_sdk_and_reads_not_found_as_absent(monkeypatch):
    import docker

    class Images:
        def get(self, reference):
            if reference != VLLM_IMAGE:
                raise docker.errors.ImageNotFound(f"No such image: {reference}")
            return type("Image", (), {"id": VLLM_IMAGE_FOUND["id"], "tags": [VLLM_IMAGE]})()

    closed = []
    client = type("Client", (), {"images": Images(), "close": lambda self: closed.append(True)})()
    monkeypatch.setattr(docker, "from_env", lambda timeout: client)
    assert doctor._docker_image(VLLM_IMAGE) == VLLM_IMAGE_FOUND
    assert doctor._docker_image("kit/vllm:missing") is None
    assert closed == [True, True]
