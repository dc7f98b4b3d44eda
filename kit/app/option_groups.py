"""`--help` with its options in titled sections (`kit run --help`, `kit demo --help`): a click Command whose
`format_options` writes one section per group of options instead of one long "Options" list. Only click is
imported here, so `kit --help` stays fast."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import click

OTHER = "Other options"  # the section of an option no group names (--help)


class GroupedCommand(click.Command):
    """A command whose help lists its options under `option_groups` (section title -> parameter names, in
    the order shown); an option no group names is listed under "Other options"."""

    def __init__(self, *args: Any, option_groups: Mapping[str, Sequence[str]], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.option_groups = {title: tuple(names) for title, names in option_groups.items()}

    def sections(self, ctx: click.Context) -> dict[str, list[tuple[str, str]]]:
        """Each section's (option, help) rows, in the groups' order, then the options no group names."""
        title_of = {name: title for title, names in self.option_groups.items() for name in names}
        found: dict[str, list[tuple[str, str]]] = {title: [] for title in self.option_groups}
        for param in self.get_params(ctx):
            row = param.get_help_record(ctx) if isinstance(param, click.Option) else None  # arguments: in the usage
            if row is not None:
                found.setdefault(title_of.get(param.name or "", OTHER), []).append(row)
        return {title: rows for title, rows in found.items() if rows}

    def format_options(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        for title, rows in self.sections(ctx).items():
            with formatter.section(title):
                formatter.write_dl(rows)
