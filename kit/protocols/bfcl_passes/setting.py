"""How Table III names a grid run's setting: its server-level prompt cache and its pass order. Plain
functions of the protocol's own values, shared by the analysis and the flag x order kind (which labels
its arms with them) without either importing the other's reading of run folders."""

from __future__ import annotations


def adjacent_on_passes(passes: list[str]) -> bool | None:
    """Did the two cache-on passes run back to back? None without two cache-on passes."""
    on = [i for i, arm in enumerate(passes) if str(arm) in ("on", "True")]
    return None if len(on) < 2 else on[1] - on[0] == 1


def prompt_cache_setting(cache_ram: int | str | None) -> str:
    """The server-level prompt cache as Table III names it: `--cache-ram` left at llama.cpp's default
    (None), disabled (0), or an explicit size."""
    if cache_ram is None:
        return "default"
    return "disabled" if int(cache_ram) == 0 else f"{int(cache_ram)} MiB"


def pass_order(passes: list[str]) -> str | None:
    """Table III's column: were the two cache-on passes adjacent? None without two cache-on passes."""
    adjacent = adjacent_on_passes(passes)
    return None if adjacent is None else "adjacent" if adjacent else "cache-off pass in between"
