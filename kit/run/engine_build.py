"""`--engine-build N`: a run on llama-server of llama.cpp build N, built here by `kit engines build llamacpp
--build N` (kit.launch.llamacpp.llamacpp_build), instead of the embedded engine (the paper's build).

What may combine with it is checked before anything is written; the build's identity (the sdist's name
and sha256, the CPU backend, the binary's sha256) goes into the manifest's engine record, and a resume or
replay compares the build it is given with the one recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from kit.core.errors import ConfigError, KitError
from kit.engines import registry
from kit.launch.llamacpp import llamacpp_build, llamacpp_probe, llamacpp_sdist
from kit.run import engine_source

OPTION = "--engine-build"


def check(options: Any) -> None:
    """Refuse what cannot combine with --engine-build (before anything is fetched or written)."""
    build = getattr(options, "engine_build", None)
    if build is None:
        return
    llamacpp_sdist.check_build(build)
    clash = [option for source, option in engine_source.given(options) if source != "engine-build"]
    clash += [] if registry.named(options.engine).builds else [f"--engine {options.engine}"]
    if clash:
        raise ConfigError(f"{OPTION} {build} chooses the engine the kit starts, so it cannot combine with "
                          f"{' and '.join(clash)}", f"drop {' and '.join(clash)}, or drop {OPTION}")
    llamacpp_build.check_backend(options.cpu_backend)


def locate(build: int, cpu_backend: str, model: Path, model_sha256: str,
           say: Callable[[str], None] = print) -> tuple[Path, dict[str, Any]]:
    """The built binary and the engine record's keys for it; refused when not built, changed, or undrivable
    (its flags, then its API on `model`, once per binary: kit.launch.llamacpp.llamacpp_probe)."""
    backend = llamacpp_build.check_backend(cpu_backend)
    record = llamacpp_build.record(build, backend)  # the binary hashed once, checked against its BUILD.json
    binary = llamacpp_build.install_dir(build, backend) / llamacpp_build.BINARY
    llamacpp_probe.drivable(binary, build, record["binary_sha256"], model, model_sha256, say)
    identity = {key: record.get(key) for key in ("build", "source", "sdist", "sdist_sha256", "cpu_backend",
                                                 "binary_sha256")}
    return binary, {"engine": f"llama-server of llama.cpp build {build} (built here from "
                              f"{llamacpp_sdist.PROJECT}=={build}.0.0, {backend} CPU backend)",
                    "engine_build": identity, "cpu_backend": backend}


def recorded_build(engine: dict[str, Any]) -> int | None:
    """The build a run's engine record names (None: the embedded engine or another engine)."""
    entry = engine.get("engine_build")
    build = entry.get("build") if isinstance(entry, dict) else None
    return build if isinstance(build, int) and not isinstance(build, bool) else None


def describe(engine: dict[str, Any]) -> str:
    """One phrase naming the llama.cpp build a run's engine record shows."""
    build = recorded_build(engine)
    if build is not None:
        return f"llama.cpp build {build}"
    name = str(engine.get("engine") or "")
    return f"the paper's llama.cpp build ({name})" if "embedded" in name else (name or "an unrecorded engine")


def identity_line(engine: dict[str, Any]) -> str:
    """A run's llama.cpp build as compared between runs: the build and its sdist's sha256 (the sdist's own
    build-info says "build 0, commit unknown", so /props cannot tell two sdist builds apart)."""
    entry = engine.get("engine_build")
    if recorded_build(engine) is None or not isinstance(entry, dict):
        return describe(engine)
    return f"llama.cpp build {entry['build']} ({entry.get('sdist')}, sha256 {str(entry.get('sdist_sha256'))[:12]}…)"


def same_build(engine: dict[str, Any], given: int | None) -> str | None:
    """None when `given` (a resume's or replay's --engine-build) is the build the run recorded, else why not."""
    recorded = recorded_build(engine)
    if recorded == given:
        return None
    return f"the run was made on {describe(engine)}; this one is asked to use " + (
        f"llama.cpp build {given}" if given is not None else "the embedded engine (the paper's build)")


def own_build(engine: dict[str, Any], given: int | None) -> str | None:
    """None when `given` (a resume's or replay's --engine-build) is the build a run's engine record names,
    its binary here of the recorded sha256; else why not (a rebuilt binary of the same number is another
    engine). The binary's sha256 is the one its BUILD.json records, checked against the file (`record`)."""
    problem = same_build(engine, given)
    if problem is not None or given is None:
        return problem
    entry = engine.get("engine_build") or {}
    backend = str(entry.get("cpu_backend") or "portable")
    now = llamacpp_build.record(given, backend).get("binary_sha256")
    if now != entry.get("binary_sha256"):
        return (f"llama.cpp build {given} here has binary sha256 {str(now)[:12]}…, but the run recorded "
                f"{str(entry.get('binary_sha256'))[:12]}…: a different binary of that build")
    return None


def resumed(run_dir: Path, engine: dict[str, Any], given: int | None) -> int | None:
    """The build a resume runs: the recorded one, passed again (a run folder never chooses what runs)."""
    problem = own_build(engine, given)
    if problem is not None:
        recorded = recorded_build(engine)
        raise KitError(f"{run_dir}: {problem}; one run never mixes engine builds",
                       "start a new run (one run never mixes engine binaries)" if recorded == given else
                       f"resume with {OPTION} {recorded}" if recorded is not None else f"resume without {OPTION}")
    return given
