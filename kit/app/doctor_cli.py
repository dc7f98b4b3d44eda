"""`kit doctor`: what this machine can run (the checks are kit/app/doctor.py)."""

from __future__ import annotations

import sys

import click

from kit.launch.engines_cli import CPU_BACKEND
from kit.core.terminal_text import echo


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the checks as JSON.")
@click.option("--model", "models", multiple=True,
              help="Registry model you plan to use (repeatable; default: the embedded engine's model).")
@click.option("--no-start", is_flag=True,
              help="Do not start the embedded engine: a kept proof still counts, else it shows as not proven.")
@click.option("--recheck", is_flag=True, help="Prove the embedded engine again even when a kept proof holds.")
@CPU_BACKEND
def doctor(as_json: bool, models: tuple[str, ...], no_start: bool, recheck: bool, cpu_backend: str) -> None:
    """Say what this machine can run: Docker, GPUs, CUDA, build tools, disk, the embedded engine.

    The embedded engine is proven by one short real completion, kept in the kit cache per machine
    (CPU flags, kit version, backend libraries, --cpu-backend) and reused until --recheck. Exits 0
    when anything at all can run (missing optional parts are listed with their fix), 1 when nothing can.
    """
    import json  # noqa: PLC0415

    from kit.app import doctor as doc  # noqa: PLC0415

    if no_start and recheck:
        raise click.UsageError("--recheck proves the engine again and --no-start forbids starting it: drop one")
    checks = doc.run_checks(doc.default_probes(cpu_backend), models, start_engine=not no_start, recheck=recheck)
    result = doc.report(checks)
    if as_json:
        echo(json.dumps(result, indent=2, default=str))
    else:
        for line in doc.lines(checks):
            echo(line)
    if not result["can_run"]:
        sys.exit(1)
