"""The image files: build script behaviour (without CUDA), and one pin shared by every file.

The real CUDA build needs a GPU toolchain and network access; here the script's argument handling,
its dry run, and its refusal to build any commit but the pin are exercised for real.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from kit.launch.docker.container_spec import LLAMACPP_COMMIT, LLAMACPP_IMAGE, VLLM_IMAGE

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "images" / "build-llamacpp.sh"
VLLM_SERVE = ROOT / "images" / "vllm-serve.sh"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_help_names_the_pin():
    result = run(BUILD, "--help")
    assert result.returncode == 0
    assert LLAMACPP_COMMIT in result.stdout
    assert "--archs" in result.stdout


def test_dry_run_shows_paper_cmake_flags():
    result = run(BUILD, "--dry-run", "--archs", "86;89", "/opt/llama")
    assert result.returncode == 0, result.stderr
    assert "-DGGML_CUDA=ON" in result.stdout
    assert "-DCMAKE_CUDA_ARCHITECTURES=86;89" in result.stdout
    assert "-DLLAMA_CURL=OFF" in result.stdout
    assert "--target llama-server" in result.stdout
    assert "-DGGML_NATIVE=OFF" not in result.stdout
    assert "-DGGML_NATIVE=OFF" in run(BUILD, "--dry-run", "--portable", "/opt/llama").stdout


def test_default_archs_come_from_environment_or_89():
    assert "-DCMAKE_CUDA_ARCHITECTURES=89 " in run(BUILD, "--dry-run", "/p").stdout
    env_run = run(BUILD, "--dry-run", "/p", env={"CUDA_ARCHITECTURES": "90"})
    assert "-DCMAKE_CUDA_ARCHITECTURES=90 " in env_run.stdout


@pytest.mark.parametrize("args", [["--archs", "sm_89", "/p"], ["--archs", "89;", "/p"], [], ["/a", "/b"]])
def test_bad_arguments_fail(args):
    result = run(BUILD, "--dry-run", *args)
    assert result.returncode != 0
    assert result.stderr.strip()


def test_a_checkout_at_another_commit_is_refused(tmp_path):
    src = tmp_path / "llama.cpp"
    src.mkdir()
    git = ["git", "-C", str(src), "-c", "user.email=t@example.org", "-c", "user.name=t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "not the pin"], check=True)
    result = run(BUILD, "--no-fetch", "--src", src, tmp_path / "prefix")
    assert result.returncode != 0
    assert f"expected the pinned commit {LLAMACPP_COMMIT}" in result.stderr
    assert not (tmp_path / "prefix").exists()


def test_fetch_failure_is_reported(tmp_path):
    empty = tmp_path / "remote"
    empty.mkdir()
    subprocess.run(["git", "-C", str(empty), "init", "-q"], check=True)
    result = run(BUILD, "--repo", f"file://{empty}", "--src", tmp_path / "src", tmp_path / "prefix")
    assert result.returncode != 0
    assert "could not fetch commit" in result.stderr


def test_every_file_carries_the_same_llamacpp_pin():
    script = BUILD.read_text()
    assert re.search(r"^readonly PIN=(\w+)$", script, re.MULTILINE).group(1) == LLAMACPP_COMMIT
    dockerfile = (ROOT / "Dockerfile.llamacpp").read_text()
    assert f'org.opencontainers.image.revision="{LLAMACPP_COMMIT}"' in dockerfile
    assert "RUN build-llamacpp.sh" in dockerfile
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert compose["services"]["llamacpp"]["image"] == LLAMACPP_IMAGE
    assert LLAMACPP_IMAGE.split(":")[1].startswith(LLAMACPP_COMMIT[:7])


def test_dockerfiles_pin_their_bases():
    llama = (ROOT / "Dockerfile.llamacpp").read_text()
    froms = re.findall(r"^FROM (\S+)", llama, re.MULTILINE)
    # the cpu target first (its base: an ARG, pinned by default), then the paper's CUDA build and image
    assert froms == ["${BASE_IMAGE}", "nvidia/cuda:12.6.3-devel-ubuntu24.04", "nvidia/cuda:12.6.3-runtime-ubuntu24.04"]
    assert re.search(r"^ARG BASE_IMAGE=debian:bookworm-slim$", llama, re.MULTILINE)
    assert re.findall(r"^FROM \S+ AS (\S+)", llama, re.MULTILINE) == ["cpu", "build", "cuda"]
    # both targets: the same user, entrypoint and health check
    assert len(re.findall(r"^USER 10001:10001$", llama, re.MULTILINE)) == 2
    assert len(re.findall(r'^ENTRYPOINT \["llama-server"\]$', llama, re.MULTILINE)) == 2
    assert len(re.findall(r"^HEALTHCHECK ", llama, re.MULTILINE)) == 2
    # the wheel the kit downloads is the one the cpu stage checks again
    from kit.launch.docker import images  # noqa: PLC0415

    assert f"ARG WHEEL_SHA256={images.WHEEL_SHA256}" in llama and f"ARG WHEEL_FILE={images.WHEEL_FILE}" in llama
    vllm = (ROOT / "Dockerfile.vllm").read_text()
    assert re.findall(r"^FROM (\S+)", vllm, re.MULTILINE) == ["vllm/vllm-openai:v0.11.0"]
    assert "HEALTHCHECK" in vllm and "HEALTHCHECK" in llama
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert compose["services"]["vllm"]["image"] == VLLM_IMAGE


def test_compose_services_are_loopback_gpu_and_read_only():
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    for name in ("llamacpp", "vllm"):
        service = compose["services"][name]
        assert service["profiles"] == [name]
        assert all(port.startswith("127.0.0.1:") for port in service["ports"])
        (device,) = service["deploy"]["resources"]["reservations"]["devices"]
        assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]
        models = [v for v in service["volumes"] if v["target"] == "/models"]
        assert models and all(v["read_only"] is True for v in models)
        assert "healthcheck" in service
    cpu = compose["services"]["llamacpp-cpu"]  # the same server without a GPU: no device reservation
    assert cpu["profiles"] == ["llamacpp-cpu"] and "deploy" not in cpu and "--n-gpu-layers" not in cpu["command"]
    assert cpu["image"] == "kit/llamacpp:7e4c0a9-cpu" and all(p.startswith("127.0.0.1:") for p in cpu["ports"])
    assert all(v["read_only"] is True for v in cpu["volumes"] if v["target"] == "/models")
    vllm = compose["services"]["vllm"]
    assert vllm["ipc"] == "host"
    assert vllm["environment"]["HF_TOKEN"] is None  # passed through, no value written


@pytest.mark.parametrize("caching, flag", [("on", "--enable-prefix-caching"), ("off", "--no-enable-prefix-caching")])
def test_vllm_entrypoint_flags(caching, flag):
    result = run(VLLM_SERVE, f"--prefix-caching={caching}", "Qwen/Qwen2.5-7B-Instruct", env={"KIT_DRY_RUN": "1"})
    assert result.returncode == 0, result.stderr
    words = result.stdout.split()
    assert words[:3] == ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]
    for option, value in [("--max-num-seqs", "1"), ("--seed", "42"), ("--max-model-len", "16384")]:
        assert words[words.index(option) + 1] == value
    assert "--enable-prompt-tokens-details" in words
    assert flag in words


def test_vllm_entrypoint_reads_environment_and_refuses_bad_values():
    ok = run(VLLM_SERVE, env={"KIT_DRY_RUN": "1", "KIT_VLLM_MODEL": "m", "KIT_PREFIX_CACHING": "off"})
    assert ok.returncode == 0 and "--no-enable-prefix-caching" in ok.stdout.split()
    bad = run(VLLM_SERVE, "m", env={"KIT_DRY_RUN": "1", "KIT_PREFIX_CACHING": "maybe"})
    assert bad.returncode != 0 and "maybe" in bad.stderr
    missing = run(VLLM_SERVE, env={"KIT_DRY_RUN": "1", "KIT_VLLM_MODEL": ""})
    assert missing.returncode != 0 and "no model" in missing.stderr
