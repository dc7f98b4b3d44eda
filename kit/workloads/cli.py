"""`kit workloads`: provision the workloads the kit does not ship in its own install (BFCL)."""

from __future__ import annotations

import click

from kit.core.terminal_text import echo


@click.group()
def workloads() -> None:
    """Workloads the kit provisions outside its own install (BFCL)."""


@workloads.command("install")
@click.argument("workload", type=click.Choice(["bfcl"]))
def install_workload(workload: str) -> None:
    """Install BFCL (bfcl-eval 2026.3.23, without its ~150 dependencies) into the kit cache and verify its data."""
    from kit.workloads.bfcl import ensure_bfcl  # noqa: PLC0415

    install = ensure_bfcl()  # its progress on stderr (its default), the result on stdout
    echo(f"BFCL {install.version} in {install.site_dir}")
    for name, digest in sorted(install.dataset_sha256.items()):
        echo(f"  {digest}  {name}")
