"""`kit models …`: list the registry, pull (and verify) model files, convert GGUF formats.

The group is attached to the main CLI with `cli.add_command(models)`. Errors the kit knows about
(`KitError`) print as one line on stderr and exit non-zero.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path

import click

from kit.core.errors import KitError
from kit.models.fetch import default_cache_dir, ensure_model
from kit.models.progress import FetchProgress
from kit.models.registry import load_registry
from kit.core.terminal_text import echo

FORMAT_CHOICES = ("F16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1")

_registry_option = click.option(
    "--registry", "registry_path", type=click.Path(path_type=Path, dir_okay=False), default=None,
    help="A registry YAML file to use instead of the packaged one (offline mirrors).")


def _one_line_errors(command):
    """Turn a KitError into `error: <what>; <fix>` on stderr and the error's exit code."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except KitError as err:
            echo(f"error: {err.line()}", err=True)
            sys.exit(err.exit_code)

    return wrapper


class _ProgressLine:
    """Prints progress to stderr: a rewritten line on a terminal, one line per stage otherwise."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.last: tuple[str, str] | None = None
        self.last_pct = -1

    def __call__(self, event: FetchProgress) -> None:
        key = (event.stage, event.detail)
        pct = int(100 * event.done / event.total) if event.total else -1
        if key != self.last:
            if self.tty and self.last is not None:
                echo("", err=True)
            if not self.tty:
                echo(f"{event.stage}: {event.detail}", err=True)
            self.last, self.last_pct = key, -1
        if self.tty and pct != self.last_pct:
            shown = f" {pct:3d}%" if pct >= 0 else ""
            echo(f"\r{event.stage}: {event.detail}{shown}", err=True, nl=False)
            self.last_pct = pct

    def close(self) -> None:
        if self.tty and self.last is not None:
            echo("", err=True)


def _size(n: int | None) -> str:
    if n is None:
        return "?"
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return "?"


@click.group()
def models() -> None:
    """Model files: the registry, downloads pinned by sha256, format conversion."""


@models.command("list")
@click.option("--cache-dir", type=click.Path(path_type=Path), default=None, help="Model cache folder.")
@_registry_option
@_one_line_errors
def list_models(cache_dir: Path | None, registry_path: Path | None) -> None:
    """Show the registry's GGUF files and vLLM checkpoints."""
    registry = load_registry(registry_path)
    cache = cache_dir or default_cache_dir()
    echo(f"GGUF files (cache: {cache})")
    for name, entry in registry.models.items():
        here = "cached" if (cache / entry.file).exists() else ""
        kinds = ",".join(s.kind for s in entry.sources) or "none"
        echo(f"  {name:38} {entry.quant:7} {entry.family:7} {_size(entry.size):>9}  sources={kinds:12} {here}")
    echo("vLLM checkpoints (downloaded by vLLM)")
    for name, ckpt in registry.checkpoints.items():
        echo(f"  {name:38} {ckpt.repo}@{ckpt.revision}  family={ckpt.family}")


@models.command()
@click.argument("name")
@click.option("--formats", default="", help="Also make these formats, comma-separated (e.g. F16,Q8_0).")
@click.option("--cache-dir", type=click.Path(path_type=Path), default=None, help="Model cache folder.")
@_registry_option
@_one_line_errors
def pull(name: str, formats: str, cache_dir: Path | None, registry_path: Path | None) -> None:
    """Fetch model NAME (or hash a .gguf path), verify its sha256, optionally convert it."""
    wanted = [f.strip().upper() for f in formats.split(",") if f.strip()]
    if wanted:
        from kit.models.dequant import target_types  # noqa: PLC0415 - imports gguf/numpy only when converting

        for fmt in wanted:
            target_types(fmt)  # refuse K-quants / unknown names before downloading anything
    cache = cache_dir or default_cache_dir()
    progress = _ProgressLine()
    try:
        model = ensure_model(name, cache_dir=cache, progress=progress, registry=load_registry(registry_path))
        results = [model]
        for fmt in wanted:
            if model.entry is not None and model.entry.quant == fmt:
                continue
            from kit.models.derived import ensure_format  # noqa: PLC0415 - converting needs gguf; fetching does not

            results.append(ensure_format(model, fmt, cache, progress))
    finally:
        progress.close()
    for item in results:
        echo(f"{item.sha256}  {item.path}  ({item.source})")


@models.command()
@click.argument("src")
@click.option("-o", "--output", "dst", required=True, type=click.Path(path_type=Path), help="File to write.")
@click.option("--to", "target", default="F16", show_default=True,
              help=f"Target format: {', '.join(FORMAT_CHOICES)} (K-quants need llama-quantize).")
@click.option("--cache-dir", type=click.Path(path_type=Path), default=None, help="Model cache folder.")
@_registry_option
@_one_line_errors
def dequant(src: str, dst: Path, target: str, cache_dir: Path | None, registry_path: Path | None) -> None:
    """Rewrite model SRC (registry name or .gguf path) as DST in another format."""
    from kit.models.dequant import convert, target_types  # noqa: PLC0415 - converting needs gguf; fetching does not

    target_types(target)
    progress = _ProgressLine()
    try:
        model = ensure_model(src, cache_dir=cache_dir, progress=progress, registry=load_registry(registry_path))
        digest = convert(model.path, dst, target.upper(), progress)
    finally:
        progress.close()
    echo(f"{digest}  {dst}")
