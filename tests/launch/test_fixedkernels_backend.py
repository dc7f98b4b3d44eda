"""The fixed-kernels CPU backend (kit.launch.cpu.portable_backend.FIXED_KERNELS): its flags, its one-line source
patch, its own cache folder and record, and the fix that runs on it. No engine is started and nothing is built."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from kit.core.errors import ConfigError, EngineError
from kit.launch.cpu import cpu_backend, portable_backend
from kit.launch.llamacpp import fixes, llamacpp_sdist
from kit.launch.cpu.portable_backend import FIXED_KERNELS, PORTABLE, Patch


def test_its_build_has_one_kernel_path_and_keeps_every_portable_flag():
    flags = FIXED_KERNELS.cmake_flags
    assert flags[:len(portable_backend.CMAKE_FLAGS)] == portable_backend.CMAKE_FLAGS
    assert "-DGGML_LLAMAFILE=OFF" in flags and "-DGGML_CPU_REPACK=OFF" in flags
    assert PORTABLE.cmake_flags == portable_backend.CMAKE_FLAGS and not PORTABLE.patches
    assert FIXED_KERNELS.folder != PORTABLE.folder  # its own cache folder: the portable build is never replaced
    assert [patch.new for patch in FIXED_KERNELS.patches] == ["ctx->use_ref             = true;"]


def test_a_patch_applies_once_or_stops_the_build(tmp_path):
    source = tmp_path / "src"
    (source / "ggml").mkdir(parents=True)
    target = source / "ggml" / "a.cpp"
    target.write_text("x = false;\ny = 1;\n")
    patch = Patch("ggml/a.cpp", "x = false;", "x = true;", "why")
    patch.apply(source)
    assert target.read_text() == "x = true;\ny = 1;\n"
    with pytest.raises(EngineError, match="occurs 0 times"):
        patch.apply(source)  # applied already: the text it replaces is gone
    target.write_text("x = false;\nx = false;\n")
    with pytest.raises(EngineError, match="occurs 2 times"):
        patch.apply(source)
    assert target.read_text() == "x = false;\nx = false;\n"  # nothing half-patched


def test_the_patch_matches_the_pinned_sources_once(tmp_path):
    """The kit's patch against the sha256-pinned sdist itself (skipped where it was never downloaded)."""
    sdist = llamacpp_sdist.sdist_dir() / portable_backend.SDIST_FILE
    if not sdist.is_file():
        pytest.skip(f"{sdist.name} not in the kit's cache")
    (patch,) = FIXED_KERNELS.patches
    member = f"{portable_backend.SDIST_FILE.removesuffix('.tar.gz')}/llama.cpp/{patch.file}"
    with tarfile.open(sdist) as tar:
        tar.extract(member, tmp_path, filter="data")
    source = tmp_path / portable_backend.SDIST_FILE.removesuffix(".tar.gz") / "llama.cpp"
    patch.apply(source)
    assert (source / patch.file).read_text().count(patch.new) == 1


def test_its_record_names_the_variant_flags_and_patch(tmp_path, monkeypatch):
    library = tmp_path / portable_backend.LIBRARY
    library.write_bytes(b"not really a library")
    monkeypatch.setattr(portable_backend.cpu_isa, "scan", lambda path: {"avx2": 1})
    record = portable_backend.describe_build(library, FIXED_KERNELS)
    assert record["variant"] == "portable-fixedkernels"
    assert record["cmake_flags"] == list(FIXED_KERNELS.cmake_flags)
    assert record["patches"] == [patch.to_json() for patch in FIXED_KERNELS.patches]
    assert record["source_sha256"] == llamacpp_sdist.PINNED[llamacpp_sdist.PAPER_BUILD]
    assert len(record["library_sha256"]) == 64
    plain = portable_backend.describe_build(library, PORTABLE)
    assert "variant" not in plain and "patches" not in plain  # the portable record as it always was


def test_an_unbuilt_variant_is_not_found_and_not_built_unless_allowed(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    assert portable_backend.built_library(FIXED_KERNELS) is None
    with pytest.raises(EngineError) as raised:
        cpu_backend.portable("--fix x", "--fix x", False, lambda _line: None, "portable-fixedkernels")
    assert "--variant portable-fixedkernels" in raised.value.fix
    # before it is built, its requirements are what its flags enable
    assert cpu_backend.requirements("portable-fixedkernels") >= set(portable_backend.TARGET_ISA)
    with pytest.raises(EngineError, match="no portable CPU backend build is named"):
        portable_backend.variant("fast")


def test_a_built_variant_is_the_backend_its_record_says(tmp_path, monkeypatch):
    monkeypatch.setenv("KIT_CACHE_DIR", str(tmp_path))
    folder = portable_backend.build_dir(FIXED_KERNELS)
    folder.mkdir(parents=True)
    (folder / portable_backend.LIBRARY).write_bytes(b"stand-in")
    monkeypatch.setattr(portable_backend.cpu_isa, "scan", lambda path: {"avx": 1, "avx2": 1})
    backend = cpu_backend.portable("--fix f", "--fix f", False, lambda _line: None, "portable-fixedkernels")
    assert backend.name == "portable-fixedkernels" and backend.folder == str(folder) and backend.rebuilt_here
    assert backend.library_sha256 == portable_backend.build_record(FIXED_KERNELS)["library_sha256"]
    assert "one kernel path" in backend.source
    assert portable_backend.built_library(PORTABLE) is None  # the other build is untouched


def test_the_fix_runs_on_it_and_only_with_the_embedded_engine():
    fix = fixes.named("cpu-backend-portable-fixedkernels")
    assert fix.cpu_backend == "portable-fixedkernels" in portable_backend.VARIANTS
    assert fix.launchers == (fixes.EMBEDDED,) and "batch size" in fix.closes
    applied = fixes.parse(["cpu-backend-portable-fixedkernels"], [])
    fixes.refuse(applied, source=fixes.EMBEDDED, engine="llamacpp")
    for source in (fixes.SERVER_BIN, fixes.ENGINE_BUILD):
        with pytest.raises(ConfigError, match="cannot be applied with the"):
            fixes.refuse(applied, source=source, engine="llamacpp")
    with pytest.raises(ConfigError, match="both set cpu_backend"):
        fixes.resolve(["cpu-backend-portable-fixedkernels", "cpu-backend-portable"])
    assert cpu_backend.BACKENDS == ("wheel", "portable")  # never picked by auto or KIT_CPU_BACKEND


def test_a_resumed_run_keeps_its_backend_through_its_recorded_fix(tmp_path):
    from kit.run.resume import resumed_cpu_backend  # noqa: PLC0415

    recorded = {"name": "portable-fixedkernels", "library_sha256": "0" * 64}
    assert resumed_cpu_backend(Path(tmp_path), recorded, "auto") == {}  # the recorded --fix applies it again
    assert resumed_cpu_backend(Path(tmp_path), {"name": "portable", "library_sha256": "0" * 64}, "auto") == {
        "cpu_backend": "portable"}
