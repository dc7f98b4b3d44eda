"""A command-line choice whose values are read when asked for, not when the command line is built: the names of
a registry that installed packages add to (kit.core.plugs) are read only by the command that takes them, after
the packages are on the path, and a broken registration is then one `kit: error:` line, not a failed import."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import click


class LazyChoice(click.Choice[str]):
    """`click.Choice` over the names `values()` gives each time they are asked for (help, checking, completion)."""

    def __init__(self, values: Callable[[], Iterable[str]], case_sensitive: bool = True):
        self._values = values
        super().__init__((), case_sensitive)

    @property  # click stores the choices as a tuple; here they are read each time
    def choices(self) -> tuple[str, ...]:
        return tuple(self._values())

    @choices.setter
    def choices(self, _given: Any) -> None:  # click.Choice.__init__ stores its own: these are read instead
        pass
