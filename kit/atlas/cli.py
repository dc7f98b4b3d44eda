"""`kit atlas BUNDLE_OR_RUN...`: the verified runs side by side; `kit bisect`: the first llama.cpp build where a result changes."""

from __future__ import annotations

from pathlib import Path

import click

from kit.core.terminal_text import echo


@click.command("atlas")
@click.argument("inputs", metavar="BUNDLE_OR_RUN...", nargs=-1, required=True,
                type=click.Path(path_type=Path, exists=True))
@click.option("-o", "--out", "html_out", type=click.Path(path_type=Path, dir_okay=False),
              help="Write the atlas as an HTML page (the kit's own rendering, no script, strict CSP).")
@click.option("--csv", "csv_out", type=click.Path(path_type=Path, dir_okay=False), help="Write the atlas as CSV.")
def atlas(inputs: tuple[Path, ...], html_out: Path | None, csv_out: Path | None) -> None:
    """Set runs side by side: one row per engine x build x machine x CPU backend x model x weight format x cache
    setting x server binary or image; columns: the ladder's rungs, the paper's measures (Tables IV-VII with their intervals), replay
    identity with the other rows (same requests -> identical outputs?) and the size of the runs.

    Every input is verified first: a bundle by `kit verify`'s code (one that does not verify is refused), a
    run folder by recomputing its results from its raw records (links refused). A cell that cannot be
    compared says why.
    """
    from kit.atlas import render, sources, table  # noqa: PLC0415
    from kit.core.atomic_file import write_text_atomic  # noqa: PLC0415
    from kit.core.safe_console import SafeConsole  # noqa: PLC0415
    from kit.run.preflight import check_out  # noqa: PLC0415

    for target, option in ((html_out, "-o"), (csv_out, "--csv")):
        if target is not None:
            check_out(target.parent, option)
    with sources.verified(list(inputs), say=echo) as runs:
        built = table.build(runs)
    console = SafeConsole()
    console.print(render.terminal(built))
    for line in render.legend(built):
        console.print(line, markup=False, highlight=False)
    if html_out is not None:
        write_text_atomic(html_out, render.html_page(built))
        echo(f"written: {html_out}")
    if csv_out is not None:
        write_text_atomic(csv_out, render.csv_text(built))
        echo(f"written: {csv_out}")


@click.command("bisect")
@click.argument("engine", type=click.Choice(["llamacpp"]))
@click.option("--good", type=click.IntRange(1, 999_999), required=True, metavar="N",
              help="A llama.cpp build whose result is the old one (e.g. the paper's, 10435).")
@click.option("--bad", type=click.IntRange(1, 999_999), required=True, metavar="M",
              help="A later build whose result changed.")
@click.option("--protocol", default="ladder-cpu", show_default=True, help="The protocol each step runs.")
@click.option("--rung", default="L2", show_default=True,
              help="The result that changed: a ladder rung (L0-L7, of a ladder protocol), a paper measure "
                   "(e.g. IV:paths_differ), outputs (byte-identical to the good end's on every shared request) or "
                   "logprobs (outputs and their log-probabilities byte-identical: the engine's numbers).")
@click.option("--model", help="The GGUF every step serves (default: the kit's pinned SmolLM2-135M-Instruct Q4_1); "
                             "another weight format runs other kernels, whose results may change where Q4_1's do not.")
@click.option("--plan", "dry", is_flag=True, help="Only say how many steps and roughly how long; build nothing.")
@click.option("--out", type=click.Path(path_type=Path, file_okay=False),
              help="The bisect folder (default: outputs/bisect-llamacpp-N-M-PROTOCOL-RUNG); the same folder continues "
                   "a bisect begun there.")
def bisect(engine: str, good: int, bad: int, protocol: str, rung: str, model: str | None, dry: bool,
           out: Path | None) -> None:
    """Find the first llama.cpp build between --good and --bad where a result changes.

    Says the plan first (the index's builds between the two, the steps at most, rough times here), then
    builds llama-server of each build it needs (`kit engines build llamacpp --build N`; a build made before
    is reused) and runs the protocol on it as `kit run --engine-build N` does: the two ends first, then
    midpoints, each run verified and judged good (the good end's result), bad (any other result) or skipped
    (the kit cannot drive that build: its build failed, its run was refused or its engine could not start;
    the nearest untested build is tried instead). The bisect folder keeps each step's run under runs/, an
    atlas of them (atlas.html, atlas.csv, rewritten after every step) and the state file bisect.json: the same
    command continues an interrupted bisect, and no step is built or run twice.

    Ends with "first build where RUNG changes: B (last good: A)" and each step's build and run times; exit 0.
    Exits 4 when no build can be named (both ends give the same result; or builds it had to skip lie where the
    change is, and it names that range), 2 on bad input, 130 when stopped (Ctrl-C; run it again to continue).
    """
    from kit.atlas import bisect as bisecting  # noqa: PLC0415
    from kit.atlas import bisect_run  # noqa: PLC0415
    from kit.launch.llamacpp import llamacpp_sdist  # noqa: PLC0415

    if dry:
        for line in bisecting.plan(good, bad, protocol, rung, llamacpp_sdist.available_builds()).lines():
            echo(line)
        echo("nothing was built (--plan)")
        return
    bisect_run.bisect(good, bad, protocol, rung, out, echo, llamacpp_sdist.available_builds, model=model)
