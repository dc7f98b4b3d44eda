"""The `kit` command line. Every command is a thin shell over the runner, analysis and bundle code."""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path
from typing import Any

import click

from kit import __version__
from kit.app.option_groups import GroupedCommand
from kit.core.errors import KitError, NoVerdict, RunInterrupted
from kit.core import limits
from kit.core.choices import LazyChoice
from kit.engines.registry import DEFAULT as DEFAULT_ENGINE, check_choices, run_choices
from kit.importers.cli import THRESHOLDS as HARNESS_THRESHOLDS
from kit.launch.engines_cli import CPU_BACKEND
from kit.core.terminal_text import echo, one_line
from kit.run.executor_cli import OPTIONS as EXECUTOR_OPTIONS, chosen as executor, executor_options


def _within(low: int, high: int) -> click.IntRange:
    """An integer option within [low, high] (the limits table in docs/protocols.md)."""
    return click.IntRange(low, high)


class Seconds(click.FloatRange):
    """Seconds, more than 0 and at most `high`; NaN, which compares false with every bound, is refused too."""

    def __init__(self, high: float):
        super().__init__(0, high, min_open=True)

    def convert(self, value, param, ctx):
        seconds = super().convert(value, param, ctx)
        if seconds != seconds:
            self.fail(f"{value!r} is not a number of seconds in the range 0<x<={self.max:g}", param, ctx)
        return seconds


ANSWER_BOUNDS = [
    click.option("--max-answer-bytes", type=_within(limits.ANSWER_BYTES_MIN, limits.ANSWER_BYTES_MAX),
                 default=limits.ANSWER_BYTES_DEFAULT, show_default=True,
                 help="The most bytes of one engine answer the kit reads; a longer answer fails the run (a real "
                      "one is far smaller). Recorded in the manifest."),
    click.option("--request-deadline", type=Seconds(limits.REQUEST_DEADLINE_MAX),
                 help="Seconds one engine request may take, from connecting to its answer's last byte (default: "
                      "the longer of 600 s and 1 s per token the request asks for). Recorded in the manifest."),
]

FIX_OPTIONS = [
    click.option("--fix", "fixes", multiple=True, metavar="NAME",
                 help="Apply a named fix to every server the kit starts (repeatable): reuse-off, chunk-N, threads-N, "
                      "f16, cpu-backend-portable, cpu-backend-wheel (docs/remedy.md). Recorded; resume re-applies it."),
    click.option("--server-arg", "server_args", multiple=True, metavar="ARG",
                 help="A llama-server flag the fix registry does not name (repeatable), e.g. --server-arg=-ub=32; "
                      "only tuning flags (docs/remedy.md). Recorded."),
]
ENGINE_BUILD = click.option(
    "--engine-build", type=click.IntRange(1, 999_999), metavar="N",
    help="Run llama-server of llama.cpp build N, built here by `kit engines build llamacpp --build N`, instead of "
         "the embedded engine (the paper's build, the default). Recorded in the manifest and engine record.")

RUN_OPTIONS = [
    click.option("--gsm8k", type=click.Path(path_type=Path), help="GSM8K test.jsonl to serve items from "
                 "(default: the kit's generated arithmetic problems, nothing to download)."),
    click.option("--items", type=_within(1, limits.ITEMS_MAX),
                 help="Number of items (overrides the protocol's workload.items)."),
    click.option("--episodes", type=_within(1, limits.EPISODES_MAX),
                 help="Number of BFCL episodes (overrides the protocol's workload.episodes)."),
    click.option("--sessions", type=_within(1, limits.SESSIONS_MAX),
                 help="Number of sessions, each on a fresh server (overrides the protocol)."),
    click.option("--histories", type=_within(1, limits.HISTORIES_MAX),
                 help="Episode histories of a sweep: canonical + N-1 random orders "
                 "(overrides the protocol's histories)."),
    click.option("--max-tokens", type=_within(1, limits.CTX_MAX),
                 help="Tokens to generate per request (overrides the protocol)."),
    click.option("--engine", type=LazyChoice(run_choices), default=DEFAULT_ENGINE, show_default=True,
                 help="The engine: llama.cpp (one server serves both cache arms, switched per request) or vLLM 0.11.0 "
                      "(prefix caching is fixed per server process, so each cache arm gets its own server; grid "
                      "protocols with `server: per_arm` or `per_pass`, e.g. grid-vllm)."),
    click.option("--model", help="GGUF file to serve (default: SmolLM2-135M-Instruct Q4_1, pinned by sha256); with "
                                 "--engine vllm a checkpoint: a registry name (default qwen2.5-7b-instruct), a Hugging "
                                 "Face id or a folder."),
    click.option("--server-bin", type=click.Path(path_type=Path),
                 help="A llama-server binary to launch instead of the embedded one (with --engine vllm: a `vllm` "
                      "executable instead of the venv `kit engines install vllm` makes)."),
    ENGINE_BUILD,
    click.option("--launcher", type=click.Choice(["native", "docker"]), default="native", show_default=True,
                 help="How the kit starts the engine: native (the embedded llama-server, --server-bin, or `vllm "
                      "serve` from its venv) or docker (an image built from Dockerfile.llamacpp or Dockerfile.vllm, "
                      "GPU passthrough; needs a Docker daemon)."),
    click.option("--image", help="--launcher docker: the engine image (default: the paper's CUDA image; "
                                 "`kit images build llamacpp --target cpu` makes kit/llamacpp:7e4c0a9-cpu)."),
    click.option("--gpus", metavar="all|none|N|IDS", help="--launcher docker: GPUs the container gets: all, none "
                 "(no device request), a count, or ids 0,1 (default: none on a cpu image, else all). Recorded."),
    click.option("--engine-url", "engine_url", multiple=True, metavar="[ARM=]URL",
                 help="Use an already running server (the kit cannot restart it): one URL for llama.cpp, or with "
                      "--engine vllm one per cache arm: --engine-url on=URL --engine-url off=URL."),
    click.option("--port", type=_within(limits.PORT_MIN, limits.PORT_MAX),
                 help="Port for the server the kit starts (default: a free one)."),
    click.option("--threads", type=_within(1, limits.THREADS_MAX),
                 help="CPU threads for the server (default: all cores)."),
    click.option("--out", type=click.Path(path_type=Path), help="Parent folder of the run folder (default: outputs/)."),
    click.option("--yes", "-y", is_flag=True,
                 help="Start it even where its rough duration on this machine's CPU engine is past an hour (without "
                      "--yes such a run is refused before anything is fetched or written, naming the CPU-sized "
                      "protocol, e.g. grid-cpu)."),
    CPU_BACKEND,
    *ANSWER_BOUNDS,
    *EXECUTOR_OPTIONS,
    *FIX_OPTIONS,
]
# how `kit run --help` and `kit demo --help` list RUN_OPTIONS (kit.app.option_groups)
RUN_HELP = {"cls": GroupedCommand, "option_groups": {
    "Workload and size": ("gsm8k", "items", "episodes", "sessions", "histories", "max_tokens", "out", "yes"),
    "Engine": ("engine", "model", "server_bin", "engine_build", "engine_url", "port", "threads", "cpu_backend"),
    "Fixes (docs/remedy.md)": ("fixes", "server_args"),
    "Launcher (--launcher docker)": ("launcher", "image", "gpus"),
    "Executor (--executor ray)": ("executor", "ray_address", "cpus_per_task", "gpus_per_task"),
    "Limits": ("max_answer_bytes", "request_deadline"),
}}


def run_options(func, options=RUN_OPTIONS):
    for option in reversed(options):
        func = option(func)
    return func


def _overrides(items: int | None, episodes: int | None, sessions: int | None, max_tokens: int | None,
               histories: int | None = None) -> dict[str, Any]:
    overrides: dict[str, Any] = {}
    workload = {key: value for key, value in (("items", items), ("episodes", episodes)) if value is not None}
    if workload:
        overrides["workload"] = workload
    for key, value in (("sessions", sessions), ("max_tokens", max_tokens), ("histories", histories)):
        if value is not None:
            overrides[key] = value
    return overrides


def engine_urls(given: tuple[str, ...]) -> tuple[str | None, dict[str, str]]:
    """`--engine-url` values: one plain URL, or ARM=URL once per cache arm (on, off)."""
    plain = [value for value in given if not value.startswith(("on=", "off="))]
    by_arm: dict[str, str] = {}
    for value in given:
        if value in plain:
            continue
        arm, url = value.split("=", 1)
        if arm in by_arm:
            raise click.BadParameter(f"the cache-{arm} arm is given twice", param_hint="--engine-url")
        by_arm[arm] = url
    if plain and (by_arm or len(plain) > 1):
        raise click.BadParameter("give one URL, or one on=URL and one off=URL", param_hint="--engine-url")
    return (plain[0] if plain else None), by_arm


def _run(protocol: str, gsm8k, items, episodes, sessions, histories, max_tokens, engine, model, server_bin, engine_build,
         launcher, engine_url, port, threads, out, cpu_backend, max_answer_bytes, request_deadline, image=None, gpus=None,
         yes=False, fixes=(), server_args=(), **where) -> None:
    from kit.run import runner  # noqa: PLC0415 - keep `kit --help` fast

    url, by_arm = engine_urls(engine_url)
    options = runner.RunOptions(protocol=protocol,
                                overrides=_overrides(items, episodes, sessions, max_tokens, histories),
                                gsm8k=gsm8k, engine=engine, model=model, server_bin=server_bin,
                                engine_build=engine_build, launcher=launcher,
                                engine_url=url, engine_urls=by_arm, port=port, threads=threads, out=out,
                                cpu_backend=cpu_backend, max_answer_bytes=max_answer_bytes,
                                request_deadline=request_deadline, image=image, gpus=gpus,
                                confirmed=yes, fixes=tuple(fixes), server_args=tuple(server_args),
                                **executor(**where))
    _report(lambda reporter: runner.run(options, emit=reporter, say=reporter.say))


def _report(execute) -> None:
    """Run with the terminal reporter, print the results table, and exit non-zero unless finished."""
    from kit.app import console  # noqa: PLC0415

    reporter = console.ConsoleReporter()
    started = time.monotonic()
    try:
        result = execute(reporter)
    finally:
        reporter.close()
    view = console.results_view(result.table)
    if view is not None:
        reporter.console.print(view)
    if (note := console.results_note(result.run_dir, result.table)) is not None:
        reporter.console.print(note, style="dim")
    if reporter.first_verdict is not None:
        reporter.console.print(f"first verdict after {reporter.first_verdict:.1f} s; "
                               f"total {time.monotonic() - started:.1f} s")
    reporter.say(f"run folder: {result.run_dir}  (status: {result.status})")
    _bundle_after_run(result.run_dir, reporter.say)
    if result.status == "finished":  # last: does the paper's finding hold here (not: do the numbers match)
        for line in console.qualitative_lines(result.run_dir, result.table):
            reporter.console.print(line, markup=False, highlight=False)
    if result.status == "interrupted":
        raise RunInterrupted(f"the run was interrupted: {result.reason}",
                             f"continue it with `kit resume {result.run_dir}`")
    if result.status != "finished":
        raise KitError(f"the run {result.status}: {result.reason}", f"fix that, then `kit resume {result.run_dir}`")
    _verdict_given(result)


def _verdict_given(result) -> None:
    """A finished run none of whose passes is OK measured nothing: it ends with NoVerdict's own exit code and a
    last line saying why, so that a job against a broken engine does not pass for one that ran."""
    why = result.no_verdict()
    if why is not None:
        raise NoVerdict(f"no verdict: {why}", f"the run folder {result.run_dir} keeps what the engine answered; "
                        f"fix what the reasons say, then run again (exit {NoVerdict.exit_code}: no verdict)")


def _bundle_after_run(run_dir: Path, say) -> None:
    """Every run ends with a bundle in bundles/ beside its folder (kit.bundle.writer.bundle_after_run)."""
    from kit.bundle.writer import bundle_after_run  # noqa: PLC0415

    bundle_after_run(run_dir, say)


class _Commands(click.Group):
    """The `kit` group: the commands defined in this module, and those of other packages (LAZY: name ->
    "module:attribute"), imported only when that command runs or the list of commands is shown. A run's
    process then does not import what only `kit compare` or `kit models` uses (bench/bench_run_overhead.py)."""

    LAZY = {"models": "kit.models.cli:models", "import": "kit.importers.cli:import_group",
            "replay": "kit.replay.cli:replay", "compare": "kit.compare.cli:compare", "atlas": "kit.atlas.cli:atlas",
            "bisect": "kit.atlas.cli:bisect", "images": "kit.launch.docker.images_cli:images",
            "watch": "kit.watch.cli:watch", "engines": "kit.launch.engines_cli:engines",
            "doctor": "kit.app.doctor_cli:doctor", "workloads": "kit.workloads.cli:workloads"}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.LAZY})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.LAZY:
            import importlib  # noqa: PLC0415

            module, attribute = self.LAZY[cmd_name].split(":")
            command = getattr(importlib.import_module(module), attribute)
            if command.name != cmd_name:
                raise RuntimeError(f"{self.LAZY[cmd_name]} is named {command.name!r}, not {cmd_name!r}")
            self.add_command(command)
        return self.commands.get(cmd_name)


@click.group(cls=_Commands, invoke_without_command=True, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kit")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """The cache-divergence reproducibility kit.

    Prefix caching can make the same request give different answers depending on hidden server
    state. `kit demo` shows it on the embedded CPU engine in a few minutes; `kit run PROTOCOL`
    runs any protocol in protocols/. `kit` alone, in a terminal, opens the launcher.
    """
    if ctx.invoked_subcommand is None:
        if sys.stdin.isatty() and sys.stdout.isatty():
            from kit.tui.app import main as launcher  # noqa: PLC0415 - Textual loads only for the launcher

            launcher()
            return
        echo(ctx.get_help())


@cli.command(**RUN_HELP)
@run_options
def demo(**kwargs) -> None:
    """Show path divergence on this machine in a few minutes (embedded engine, nothing to set up).

    Runs protocols/demo.yaml: a small restored-state control, generated arithmetic problems served
    cold, warm, cold, warm in two fresh-server sessions, and prints the table.
    """
    _run("demo", **kwargs)


@cli.command(**RUN_HELP)
@click.argument("protocol")
@run_options
def run(protocol: str, **kwargs) -> None:
    """Run PROTOCOL: a name from protocols/ (e.g. `reset`) or a path to a protocol YAML file.

    Writes a run folder (manifest.json, records/*.jsonl, logs/, results/) and prints the results.
    The engine is the embedded llama-server with the pinned SmolLM2 model unless --server-bin,
    --model or --engine-url says otherwise.

    Exits 0 when the run finished with a verdict; 4 (no verdict) when it finished but no pass is OK
    (every pass VOID: the engine answered nothing usable), its last line saying why; 2 when the input is
    refused or the run failed; 3 when the engine could not be started; 130 when stopped.
    """
    _run(protocol, **kwargs)


@cli.command()
@click.argument("url", required=False)
@click.option("--kind", type=LazyChoice(lambda: ["auto", *check_choices()]), default="auto",
              show_default=True, help="What serves URL (auto: found from what only each engine answers: llama.cpp "
                                      "/props, vLLM /metrics, SGLang /get_server_info, Ollama /api/version; else "
                                      "OpenAI-compatible).")
@click.option("--model", help="Model name on the server (Ollama: required), or a GGUF for the embedded engine.")
@click.option("--cycles", type=_within(1, limits.CALLS_MAX), help="Cycles of the cache-instance protocol (default 5).")
@click.option("--per-arm", type=_within(1, limits.CALLS_MAX),
              help="Same-prompt calls in each arm of a cycle (default 10).")
@click.option("--max-tokens", type=_within(1, limits.CTX_MAX), help="Length of the measured answer (default 256).")
@click.option("--calibration-rounds", type=_within(1, limits.ROUNDS_MAX),
              help="Fresh instances for the timing calibration (default 3).")
@click.option("--always-fresh", type=_within(0, limits.CALLS_MAX),
              help="Calls in the always-fresh regime (default 5; 0 skips it).")
@click.option("--steady", type=_within(0, limits.CALLS_MAX),
              help="Calls in the steady-state regime (default 10; 0 skips it).")
@click.option("--cache-ram", help="llama-server --cache-ram for the embedded engine: MiB, 0 (off, default) or 'default'.")
@click.option("--unload-timeout", type=Seconds(limits.UNLOAD_TIMEOUT_MAX),
              default=30.0, show_default=True, help="Seconds to wait for Ollama's /api/ps to confirm an unload.")
@click.option("--server-bin", type=click.Path(path_type=Path), help="A llama-server binary instead of the embedded one.")
@ENGINE_BUILD
@click.option("--port", type=_within(limits.PORT_MIN, limits.PORT_MAX), help="Port for the server the kit starts.")
@click.option("--threads", type=_within(1, limits.THREADS_MAX), help="CPU threads for the server the kit starts.")
@click.option("--out", type=click.Path(path_type=Path), help="Parent folder of the run folder (default: outputs/).")
@CPU_BACKEND
@functools.partial(run_options, options=[*ANSWER_BOUNDS, *FIX_OPTIONS])
def check(url, kind, model, cycles, per_arm, max_tokens, calibration_rounds, always_fresh, steady, cache_ram,
          unload_timeout, server_bin, engine_build, port, threads, out, cpu_backend, max_answer_bytes,
          request_deadline, fixes=(), server_args=()) -> None:
    """How many prompt-cache states does an engine have, is each deterministic, and how to pin one.

    Without URL the embedded llama-server is checked (restarted before every pass). Runs
    protocols/pinning.yaml and prints the states with their prefill-time signatures, determinism per
    state, the manipulation gate, whether a state change flips the output bytes, and pinning advice.
    A URL where nothing listens is refused before anything is written; a check none of whose passes is
    OK (e.g. an engine the kit cannot reload) exits 4, no verdict, as `kit run` does.
    """
    from kit.app import check as checking  # noqa: PLC0415 - keep `kit --help` fast
    from kit.app import console  # noqa: PLC0415
    from kit.launch.instance import url_provider  # noqa: PLC0415
    from kit.run import runner  # noqa: PLC0415
    from kit.run.preflight import check_listening, check_url  # noqa: PLC0415

    if url is not None:
        check_url(url, "URL")
        if fixes or server_args:  # before the server at URL is contacted
            raise KitError("--fix and --server-arg set the servers the kit starts, but this check reaches a server "
                           "at a URL", "check the embedded engine (no URL), or start your server with the flags")
    resolved, found = checking.resolve(url, kind)
    options = runner.RunOptions(
        protocol="pinning", out=out, port=port, threads=threads, server_bin=server_bin, engine_build=engine_build,
        cpu_backend=cpu_backend,
        max_answer_bytes=max_answer_bytes, request_deadline=request_deadline,
        fixes=tuple(fixes), server_args=tuple(server_args), model=model if resolved == "embedded" else None,
        overrides={**checking.kind_overrides(resolved),
                   **checking.overrides(cycles, per_arm, max_tokens, calibration_rounds, always_fresh, steady, cache_ram)},
        provider=None if resolved == "embedded" else url_provider(url, resolved, model, unload_timeout))
    if url is not None:  # last of the checks: an engine that is not there is refused before a run folder exists
        check_listening(url, "URL")
    reporter = console.PinningReporter(first_line=found)  # what answers at URL, and from which of its answers
    try:
        result = runner.run(options, emit=reporter, say=reporter.say)
    finally:
        reporter.close()
    if result.table is not None and result.status == "finished":
        reporter.console.print(console.results_view(result.table))
    reporter.say(f"run folder: {result.run_dir}  (status: {result.status})")
    if result.status == "interrupted":
        raise RunInterrupted(f"the check was interrupted: {result.reason}", f"the run folder is {result.run_dir}")
    if result.status != "finished":
        raise KitError(f"the check {result.status}: {result.reason}")
    _verdict_given(result)


@cli.command("resume")
@click.argument("run_dir", type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("--cpu-backend", type=click.Choice(["auto", "wheel", "portable"]), default="auto", show_default=True,
              help="auto keeps the CPU backend the run used; naming another one is refused (one run never mixes "
                   "backends).")
@click.option("--server-bin", type=click.Path(path_type=Path),
              help="The server binary of a run that used one: a resume never runs the path the run folder names; "
                   "this binary's sha256 must be the one recorded.")
@click.option("--engine-build", type=click.IntRange(1, 999_999), metavar="N",
              help="The llama.cpp build of a run made with --engine-build, passed again: a resume never runs a build "
                   "on the run folder's word; the built binary's sha256 must be the one recorded.")
@click.option("--engine-url", "engine_url", multiple=True, metavar="[ARM=]URL",
              help="The server(s) of a run made against --engine-url, passed again as then: a resume never "
                   "contacts a URL the run folder names.")
@executor_options
@functools.partial(run_options, options=FIX_OPTIONS)
def resume_run(run_dir: Path, cpu_backend: str, server_bin: Path | None, engine_build: int | None,
               engine_url: tuple[str, ...], fixes: tuple[str, ...] = (), server_args: tuple[str, ...] = (),
               **where) -> None:
    """Continue a run that was stopped or failed: finished passes are kept, a pass that was cut short
    is run again from its start (its earlier records are kept aside in records/superseded/)."""
    from kit.run.resume import resume  # noqa: PLC0415

    urls = engine_urls(engine_url)
    _report(lambda reporter: resume(run_dir, emit=reporter, say=reporter.say, cpu_backend=cpu_backend,
                                           server_bin=server_bin, engine_build=engine_build, engine_url=urls,
                                           executor=executor(**where), fixes=tuple(fixes), server_args=tuple(server_args)))


@cli.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Folder for findings.json, tables/ and figures/ (default: analysis/ inside the first run folder).")
@click.option("--no-figures", is_flag=True, help="Skip drawing the figures (matplotlib not needed).")
@click.option("--block-replicates", type=_within(1, limits.REPLICATES_MAX), default=10_000, show_default=True,
              help="Circular block bootstrap replicates for single-pass rates.")
@click.option("--sweep-replicates", type=_within(1, limits.REPLICATES_MAX), default=2_000, show_default=True,
              help="Two-way bootstrap replicates for the sweep (each refits the GLMM).")
@click.option("--cluster-replicates", type=_within(1, limits.REPLICATES_MAX), default=2_000, show_default=True,
              help="Episode-bootstrap replicates for the mechanism and the grid trend.")
@click.option("--workers", type=_within(0, limits.WORKERS_MAX), default=0,
              help="Processes reading record files and refitting the sweep GLMM (default: one per CPU).")
@HARNESS_THRESHOLDS
def analyze(run_dirs: tuple[Path, ...], out: Path | None, no_figures: bool, block_replicates: int,
            sweep_replicates: int, cluster_replicates: int, workers: int,
            thresholds: tuple[float, float] | None) -> None:
    """Compute the paper's tables (III-VII), figures (1-3) and findings.json from RUN_DIRS.

    Recognises reset, grid and sweep run folders from their manifests (a folder holding several run
    folders works too). VOID passes are excluded and listed; tables a run cannot feed are skipped with
    the reason; a run that did not finish is flagged (only its OK passes count). Inputs holding no run
    folder, or no OK pass at all, are refused before anything is written.
    """
    from kit.analysis import findings  # noqa: PLC0415
    from kit.record.manifest import Manifest  # noqa: PLC0415
    from kit.core.paths import RunPaths  # noqa: PLC0415
    from kit.run.preflight import check_out  # noqa: PLC0415

    target = out or RunPaths(run_dirs[0]).analysis
    check_out(target, "--out" if out else "RUN_DIRS")
    settings = findings.Settings(block_bootstrap_replicates=block_replicates, sweep_replicates=sweep_replicates,
                                 cluster_replicates=cluster_replicates, workers=workers, harness_thresholds=thresholds)
    result = findings.analyze(list(run_dirs), target, settings, figures=not no_figures)
    echo(f"runs: {len(result.runs)} ({', '.join(sorted({r.kind for r in result.runs})) or 'none'})")
    for path in sorted({str(run.path) for run in result.runs}):
        problem = Manifest.load(Path(path)).run.unfinished_problem()
        if problem:
            echo(f"unfinished run {path} ({problem}): only its OK passes are analysed; "
                       f"`kit resume {path}` finishes it")
    if result.comparability:
        echo(f"warning: {result.comparability}")
    for item in result.skipped_inputs:
        echo(one_line(f"skipped {item['path']}: {item['reason']}"))
    for item in result.excluded_passes:  # a VOID pass's reason may quote its engine
        echo(one_line(f"excluded pass {item['run']}/{item['pass']} ({item['status']}): {item['reason']}"))
    for name, table in result.tables.items():
        echo(f"table {name}: {len(table.rows)} rows" +
                   "".join(f"; skipped: {s['reason']}" for s in table.skipped[:1]))
    for found in result.harness or []:
        gate = found["gates"]["manipulation"]
        echo(f"harness run {found['run']}: {len(found['arms'])} arms, manipulation gate "
                   f"{'not evaluated' if gate['pass'] is None else 'PASS' if gate['pass'] else 'FAIL'}, "
                   f"arms differ: {found['arms_differ']}")
        from kit.core.safe_console import SafeConsole  # noqa: PLC0415
        from kit.protocols.kinds import KINDS  # noqa: PLC0415

        SafeConsole().print(KINDS["harness"].render(KINDS["harness"].read(found)))
    for name, found_runs in (result.kinds or {}).items():  # kinds whose findings are their own results table
        from kit.core.safe_console import SafeConsole  # noqa: PLC0415
        from kit.protocols.kinds import KINDS  # noqa: PLC0415

        for found in found_runs:
            echo(one_line(f"{name} run {found['run']}:"))
            SafeConsole().print(KINDS[name].render(KINDS[name].read(found)))
    for name, reason in ((result.files or {}).get("figures") or {}).get("skipped", {}).items():
        echo(f"{name} skipped: {reason}")
    echo(f"written: {target}/findings.json, tables/, figures/")


@cli.command()
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(path_type=Path, exists=True, file_okay=False))
@click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=False),
              help="The bundle to write (default: bundles/<first run folder>.tar.gz beside it).")
@click.option("--allow-unfinished", is_flag=True,
              help="Also pack runs that did not finish (status started, interrupted or failed), as they are: "
                   "the bundle lists each under `unfinished` in bundle.json, and its README and report show "
                   "each run's status. Without it such a run is refused.")
def bundle(run_dirs: tuple[Path, ...], output: Path | None, allow_unfinished: bool) -> None:
    """Pack RUN_DIRS into one .tar.gz a reviewer can check without your machine.

    Holds the manifests, raw records, logs, protocols as run, results and analysis, an offline HTML
    report, a README, RO-Crate provenance and a sealed checksum list. Secret-looking values are redacted.

    Only finished runs are packed: a run that was interrupted, failed, or still says "started" (running,
    or its kit was killed) is refused with its status; `kit resume RUN_DIR` finishes it. A reviewer then
    knows every run in a bundle ran to its end; --allow-unfinished packs such a run anyway, flagged.
    """
    from kit.run import lock as run_lock  # noqa: PLC0415
    from kit.bundle import CHECKSUMS  # noqa: PLC0415
    from kit.bundle.writer import write_bundle  # noqa: PLC0415
    from kit.run.preflight import check_out  # noqa: PLC0415

    if output is not None:
        check_out(output.parent, "--output")
    with run_lock.readers(run_dirs, "bundle"):  # never packs a run another kit is writing
        written = write_bundle(list(run_dirs), output, allow_unfinished=allow_unfinished)
    for line in written.unfinished:
        echo(f"unfinished run packed (--allow-unfinished): {line}")
    for line in written.skipped:
        echo(f"left out: {line}")
    for redaction in written.redactions:
        echo(f"redacted {redaction.count} secret-looking value(s) ({redaction.what}) in {redaction.file}")
    # as `kit verify` counts them: the files the checksum list holds, and the list itself
    echo(f"bundle: {written.path}  ({len(written.files)} files: {len(written.files) - 1} and their checksum "
         f"list {CHECKSUMS})")


@cli.command()
@click.argument("bundle_file", type=click.Path(path_type=Path, dir_okay=False))
def verify(bundle_file: Path) -> None:
    """Check a bundle: its archive layout, every checksum, and every result recomputed from the raw records.

    Prints OK, or each problem and each mismatch (file, key, bundled value, recomputed value);
    exits 1 on any, and on an archive `kit bundle` did not write (a one-line reason).
    """
    from kit.bundle.verify import verify_bundle  # noqa: PLC0415

    verdict = verify_bundle(bundle_file)
    for line in verdict.lines():
        echo(line)
    if not verdict.ok:
        sys.exit(1)


@cli.command()
@click.argument("bundle_file", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--no-verify", is_flag=True,
              help="Show the content without checking checksums and results (the output says UNVERIFIED).")
@click.option("--report", "report_to", type=click.Path(path_type=Path),
              help="Also write the HTML report rendered from the verified data to this .html file.")
def show(bundle_file: Path, no_verify: bool, report_to: Path | None) -> None:
    """Verify a bundle, then print its headline verdicts, results tables and provenance.

    Exits 1 without showing anything when the bundle does not verify (unless --no-verify).
    """
    from kit.bundle.show import describe  # noqa: PLC0415

    for line in describe(bundle_file, verify=not no_verify, report_to=report_to):
        echo(line)


def main() -> None:
    from kit.run import faults as run_faults  # noqa: PLC0415

    run_faults.on_stop_signals()  # SIGINT, SIGTERM, SIGHUP stop a run like Ctrl-C, named in its manifest
    try:
        cli.main(standalone_mode=False)
    except click.exceptions.Abort:
        echo("kit: stopped", err=True)
        sys.exit(130)
    except click.UsageError as exc:  # a bad option or argument: one line naming it, and where help is
        command = exc.ctx.command_path if exc.ctx else "kit"
        echo(f"kit: error: {one_line(exc.format_message()).rstrip('.')}; see `{command} --help`", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KitError as exc:
        echo(f"kit: error: {one_line(exc.line())}", err=True)  # may quote a file from anyone
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        echo("kit: stopped", err=True)
        sys.exit(130)


if __name__ == "__main__":
    main()
