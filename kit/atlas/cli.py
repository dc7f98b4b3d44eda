"""`kit atlas BUNDLE_OR_RUN...`: the verified runs side by side."""

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
@click.option("--rung", default="L2", show_default=True, help="The result that changed: a ladder rung or a measure.")
@click.option("--plan", "dry", is_flag=True,
              help="Accepted for compatibility: the plan is what kit bisect does (it builds nothing).")
def bisect(engine: str, good: int, bad: int, protocol: str, rung: str, dry: bool) -> None:
    """Plan a bisect for the first llama.cpp build between --good and --bad where a result changes: the
    builds the index carries between them, the steps at most, the first midpoint, and rough build and run
    times on this machine. This plan is all kit bisect does so far; it builds and runs nothing (do a step by
    hand with `kit engines build llamacpp --build N`, `kit run --engine-build N` and `kit atlas`)."""
    from kit.atlas import bisect as bisecting  # noqa: PLC0415
    from kit.launch.llamacpp import llamacpp_sdist  # noqa: PLC0415

    for line in bisecting.plan(good, bad, protocol, rung, llamacpp_sdist.available_builds()).lines():
        echo(line)
