"""The `kit` command line. Every command is a thin shell over the runner, analysis and bundle code."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import click

from kit import __version__
from kit.errors import KitError, RunInterrupted

RUN_OPTIONS = [
    click.option("--gsm8k", type=click.Path(path_type=Path), help="GSM8K test.jsonl to serve items from "
                 "(default: the kit's generated arithmetic problems, nothing to download)."),
    click.option("--items", type=int, help="Number of items (overrides the protocol's workload.items)."),
    click.option("--episodes", type=int, help="Number of BFCL episodes (overrides the protocol's workload.episodes)."),
    click.option("--sessions", type=int, help="Number of sessions, each on a fresh server (overrides the protocol)."),
    click.option("--max-tokens", type=int, help="Tokens to generate per request (overrides the protocol)."),
    click.option("--model", help="GGUF file to serve (default: SmolLM2-135M-Instruct Q4_1, pinned by sha256)."),
    click.option("--server-bin", type=click.Path(path_type=Path),
                 help="A llama-server binary to launch instead of the embedded one."),
    click.option("--engine-url", help="Use an already running llama-server at this URL (the kit cannot restart it)."),
    click.option("--port", type=int, help="Port for the server the kit starts (default: a free one)."),
    click.option("--threads", type=int, help="CPU threads for the server (default: all cores)."),
    click.option("--out", type=click.Path(path_type=Path), help="Parent folder of the run folder (default: outputs/)."),
]


def run_options(func):
    for option in reversed(RUN_OPTIONS):
        func = option(func)
    return func


def _overrides(items: int | None, episodes: int | None, sessions: int | None,
               max_tokens: int | None) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    workload = {key: value for key, value in (("items", items), ("episodes", episodes)) if value is not None}
    if workload:
        overrides["workload"] = workload
    if sessions is not None:
        overrides["sessions"] = sessions
    if max_tokens is not None:
        overrides["max_tokens"] = max_tokens
    return overrides


def _run(protocol: str, gsm8k, items, episodes, sessions, max_tokens, model, server_bin, engine_url, port, threads, out) -> None:
    from kit import console, runner  # noqa: PLC0415 - keep `kit --help` fast

    reporter = console.ConsoleReporter()
    options = runner.RunOptions(protocol=protocol, overrides=_overrides(items, episodes, sessions, max_tokens), gsm8k=gsm8k,
                                model=model, server_bin=server_bin, engine_url=engine_url, port=port,
                                threads=threads, out=out)
    started = time.monotonic()
    try:
        result = runner.run(options, emit=reporter, say=reporter.console.print)
    finally:
        reporter.close()
    if result.table is not None:
        reporter.console.print(console.RENDERERS[result.table["table"]](result.table))
    if reporter.first_verdict is not None:
        reporter.console.print(f"first item verdict after {reporter.first_verdict:.1f} s; "
                               f"total {time.monotonic() - started:.1f} s")
    reporter.console.print(f"run folder: {result.run_dir}  (status: {result.status})")
    if result.status == "interrupted":
        raise RunInterrupted(f"the run was interrupted: {result.reason}", f"the run folder is {result.run_dir}")
    if result.status != "finished":
        raise KitError(f"the run {result.status}: {result.reason}")


@click.group(invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kit")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """The cache-divergence reproducibility kit.

    Prefix caching can make the same request give different answers depending on hidden server
    state. `kit demo` shows it on the embedded CPU engine in a few minutes; `kit run PROTOCOL`
    runs any protocol in protocols/.
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


@cli.command()
@run_options
def demo(**kwargs) -> None:
    """Show path divergence on this machine in a few minutes (embedded engine, nothing to set up).

    Runs protocols/demo.yaml: a small restored-state control, generated arithmetic problems served
    cold, warm, cold, warm in two fresh-server sessions, and prints the table.
    """
    _run("demo", **kwargs)


@cli.command()
@click.argument("protocol")
@run_options
def run(protocol: str, **kwargs) -> None:
    """Run PROTOCOL: a name from protocols/ (e.g. `reset`) or a path to a protocol YAML file.

    Writes a run folder (manifest.json, records/*.jsonl, logs/, results/) and prints the results.
    The engine is the embedded llama-server with the pinned SmolLM2 model unless --server-bin,
    --model or --engine-url says otherwise.
    """
    _run(protocol, **kwargs)


@cli.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for findings.json, tables/ and figures/ (default: analysis/ inside the first run folder).")
@click.option("--no-figures", is_flag=True, help="Skip drawing the figures (matplotlib not needed).")
@click.option("--block-replicates", type=int, default=10_000, show_default=True,
              help="Circular block bootstrap replicates for single-pass rates.")
@click.option("--sweep-replicates", type=int, default=2_000, show_default=True,
              help="Two-way bootstrap replicates for the sweep (each refits the GLMM).")
@click.option("--cluster-replicates", type=int, default=2_000, show_default=True,
              help="Episode-bootstrap replicates for the mechanism and the grid trend.")
@click.option("--workers", type=int, default=0, help="Processes reading record files (default: one per CPU).")
def analyze(run_dirs: tuple[Path, ...], out: Path | None, no_figures: bool, block_replicates: int,
            sweep_replicates: int, cluster_replicates: int, workers: int) -> None:
    """Compute the paper's tables (III-VII), figures (1-3) and findings.json from RUN_DIRS.

    Recognises reset, grid and sweep run folders from their manifests (a folder holding several run
    folders works too). VOID passes are excluded and listed; tables a run cannot feed are skipped with
    the reason.
    """
    from kit.analysis import findings  # noqa: PLC0415

    target = out or (run_dirs[0] / "analysis")
    settings = findings.Settings(block_bootstrap_replicates=block_replicates, sweep_replicates=sweep_replicates,
                                 cluster_replicates=cluster_replicates, workers=workers)
    result = findings.analyze(list(run_dirs), target, settings, figures=not no_figures)
    click.echo(f"runs: {len(result['runs'])} ({', '.join(sorted({r['kind'] for r in result['runs']})) or 'none'})")
    for item in result["skipped_inputs"]:
        click.echo(f"skipped {item['path']}: {item['reason']}")
    for item in result["excluded_passes"]:
        click.echo(f"excluded pass {item['run']}/{item['pass']} ({item['status']}): {item['reason']}")
    for name, table in result["tables"].items():
        click.echo(f"table {name}: {len(table['rows'])} rows" +
                   "".join(f"; skipped: {s['reason']}" for s in table["skipped"][:1]))
    for name, reason in (result["files"].get("figures") or {}).get("skipped", {}).items():
        click.echo(f"{name} skipped: {reason}")
    click.echo(f"written: {target}/findings.json, tables/, figures/")


@cli.group()
def engines() -> None:
    """Engine builds and checks."""


@engines.command("build-cpu-backend")
def build_cpu_backend() -> None:
    """Build the AVX2 CPU backend the embedded engine needs on CPUs without AVX-512 (about a minute)."""
    from kit.launch import cpu_backend  # noqa: PLC0415

    if not cpu_backend.needs_rebuild():
        click.echo("this CPU has AVX-512: the embedded engine's own CPU backend runs here; nothing to build")
        return
    click.echo(f"built: {cpu_backend.build(say=click.echo)}")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.option("--model", "models", multiple=True,
              help="Registry model you plan to use (repeatable; default: the embedded engine's model).")
@click.option("--no-start", is_flag=True, help="Do not start the embedded engine (faster, but proves less).")
def doctor(as_json: bool, models: tuple[str, ...], no_start: bool) -> None:
    """Say what this machine can run: Docker, GPUs, CUDA, build tools, disk, the embedded engine.

    Exits 0 when anything at all can run (missing optional parts are listed with their fix), 1 when
    nothing can.
    """
    import json  # noqa: PLC0415

    from kit import doctor as doc  # noqa: PLC0415

    checks = doc.run_checks(doc.default_probes(), models or (doc.DEFAULT_MODEL,), start_engine=not no_start)
    result = doc.report(checks)
    if as_json:
        click.echo(json.dumps(result, indent=2, default=str))
    else:
        for check in checks:
            click.echo(check.line())
        click.echo(f"can run: {', '.join(result['can_run']) or 'nothing'}")
    if not result["can_run"]:
        sys.exit(1)


@engines.command("build")
@click.argument("engine", type=click.Choice(["llamacpp"]))
@click.option("--archs", default="89", show_default=True, help="CUDA architectures, ';'-separated (e.g. '80;90').")
@click.option("--prefix", type=click.Path(path_type=Path), help="Install folder (default: in the kit cache).")
def build_engine(engine: str, archs: str, prefix: Path | None) -> None:
    """Build llama-server at the paper's commit with CUDA 12 (needs nvcc 12.x and cmake)."""
    from kit.launch import gpu_setup  # noqa: PLC0415

    click.echo(f"built: {gpu_setup.build_llamacpp(prefix, archs, say=click.echo)}")


@engines.command("install")
@click.argument("engine", type=click.Choice(["vllm"]))
@click.option("--venv", type=click.Path(path_type=Path), help="Virtual environment to create (default: in the kit cache).")
@click.option("--force", is_flag=True, help="Install even when no NVIDIA GPU is visible.")
def install_engine(engine: str, venv: Path | None, force: bool) -> None:
    """Install vLLM 0.11.0 into its own virtual environment (needs an NVIDIA GPU to run)."""
    from kit.launch import gpu_setup  # noqa: PLC0415

    click.echo(f"installed: {gpu_setup.install_vllm(venv, force, say=click.echo)}")


def _attach_subcommands() -> None:
    from kit.models.cli import models  # noqa: PLC0415

    cli.add_command(models)


_attach_subcommands()


def main() -> None:
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("kit: stopped", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KitError as exc:
        click.echo(f"kit: error: {exc.line()}", err=True)
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        click.echo("kit: stopped", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
