"""Assertions on what the kit printed through Rich (`kit run`, `demo`, `resume`, `check`, their `say` lines
and tables). Rich wraps a line to the terminal's width ($COLUMNS, else 80 when output is not a terminal) and
folds a word longer than a line, so a path or sentence may be split anywhere. Wrapping only moves
characters onto new lines and drops the spaces it breaks at: text compared without any whitespace is the
same whatever the width and the path lengths."""

from __future__ import annotations


def squashed(text: str) -> str:
    """`text` without whitespace of any kind."""
    return "".join(text.split())


def printed(needle: str, output: str) -> bool:
    """Whether `needle` is in `output` however Rich wrapped it."""
    return squashed(needle) in squashed(output)
