"""`kit replay`: re-execute a bundle's (or a run folder's) runs here and compare them with the originals."""

from __future__ import annotations

from pathlib import Path

import click

from kit.core.terminal_text import echo


@click.command("replay")
@click.argument("source", type=click.Path(path_type=Path, exists=True))
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Parent folder of the new run folders (default: outputs/).")
@click.option("--cpu-backend", type=click.Choice(["auto", "wheel", "portable"]),
              help="CPU backend of the embedded engine (default: the one the run recorded); naming another one "
                   "replays on it and lists the difference.")
@click.option("--model", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="The model file the run served, where the registry does not know it (its sha256 is checked).")
@click.option("--gsm8k", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="The GSM8K file the run served, where it is not at its recorded path (its sha256 is checked).")
@click.option("--server-bin", type=click.Path(path_type=Path),
              help="Your own llama-server, for a run that used a server binary of its own: the binary a bundle or "
                   "run folder names is never run; this one's sha256 is compared with the recorded one.")
@click.option("--engine-build", type=click.IntRange(1, 999_999), metavar="N",
              help="Replay on llama-server of llama.cpp build N built here (`kit engines build llamacpp --build N`); "
                   "a run made on build N replays only with it (or --different-engine-ok).")
@click.option("--different-engine-ok", is_flag=True,
              help="Replay even when this machine's engine build differs from the recorded one.")
def replay(source: Path, out: Path | None, cpu_backend: str | None, model: Path | None, gsm8k: Path | None,
           server_bin: Path | None, engine_build: int | None, different_engine_ok: bool) -> None:
    """Re-execute the runs of SOURCE (a bundle, verified first, or a run folder) with their recorded
    protocol, overrides, seeds and engine settings, and compare each new run with its original: request
    by request (byte-identical, or where the first token differs), pass by pass, and every value of the
    results tables; what differs in CPU backend, engine build, model, GPU or driver is listed beside it.
    """
    from kit.core.errors import KitError  # noqa: PLC0415
    from kit.core.paths import RunPaths, outputs_dir  # noqa: PLC0415
    from kit.run.preflight import check_out  # noqa: PLC0415
    from kit.replay.progress import printer  # noqa: PLC0415
    from kit.replay.run import ReplayOptions, replay as run_replay  # noqa: PLC0415

    target = out or outputs_dir()
    check_out(target, "--out")
    options = ReplayOptions(source, target, cpu_backend, model, gsm8k, different_engine_ok, server_bin,
                            engine_build)
    replayed = run_replay(options, say=echo, watch=printer(echo))  # a line per pass as it goes
    for done in replayed:
        comparison = done.comparison
        echo(f"replay of {done.original}: {comparison.summary()}")
        for item in comparison.passes:
            first = item.first_difference
            echo(f"  pass {item.pass_id}: {item.identical}/{item.requests[0]} byte-identical"
                       + (f", first difference at seq {first['seq']} token {first['token']}" if first else ""))
        for line in comparison.differences:
            echo(f"  different {line}")
        for line in comparison.values_differ[:10]:
            echo(f"  value differs: {line}")
        echo(f"  new run folder: {done.result.run_dir} (status: {done.result.status}); "
                   f"comparison in {RunPaths(done.result.run_dir).replay / 'comparison.md'}")
    ended = [done for done in replayed if done.result.status != "finished"]
    if ended:
        raise KitError(f"the replay of {ended[0].original} {ended[0].result.status}: {ended[0].result.reason}",
                       f"its run folder is {ended[0].result.run_dir}")
