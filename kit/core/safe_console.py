"""The one kind of Rich console the kit prints through: a plain `str` on it is always literal text, and no
control character or escape sequence reaches the terminal, whoever wrote the text.

Text from engines, models, manifests, bundles and imported files reaches the console inside the kit's own
lines, tables and progress bars. On a `SafeConsole` that needs nothing at the call site:

- every `str` is rendered as written: markup, emoji codes and highlighting are off and cannot be turned on
  (`render_str` is where Rich reads a string, for `print`, `log`, table cells, titles and captions), so an
  engine's build of ``b1-fake[/]`` is shown as written instead of ending the run with a MarkupError, and a
  backslash before ``[`` stays a backslash;
- every segment rendered is made `printable` (kit.core.terminal_text) on its way out, the text of Rich
  `Text`, tables and bars included; only Rich's own control segments (cursor moves of a live bar) pass.

Style therefore comes only from `rich.text.Text` and renderables the kit builds (``Text.assemble(("PASS",
"green"), ...)``), with outside values inserted as plain strings. `tests/test_console_text.py` fails on a
console made any other way, on markup switched back on, and on markup parsed from anything but a literal.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final, TypedDict

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment
from rich.text import Text

from kit.core.terminal_text import printable


class LiteralSwitches(TypedDict):
    """The switches a SafeConsole always renders with (a TypedDict: each passes as Rich's own keyword)."""

    markup: bool
    emoji: bool
    highlight: bool


LITERAL: Final = LiteralSwitches(markup=False, emoji=False, highlight=False)  # what a SafeConsole always renders with


def printable_segments(segments: Iterable[Segment]) -> Iterator[Segment]:
    """`segments` with their text made printable; control segments (Rich's cursor moves) pass unchanged."""
    for segment in segments:
        text, style, control = segment
        if control or not text:
            yield segment
            continue
        clean = printable(text)
        if clean == text:
            yield segment
        elif clean:
            yield Segment(clean, style)


class SafeConsole(Console):
    """A Rich console whose strings are literal text and whose output holds no terminal control."""

    def __init__(self, **options: Any):
        asked = sorted(key for key in LITERAL if options.pop(key, False))
        if asked:
            raise TypeError(f"a SafeConsole renders strings as literal text; {', '.join(asked)} cannot be turned on")
        super().__init__(**options, **LITERAL)

    @classmethod
    def adopt(cls, console: Console) -> "SafeConsole":
        """`console`, made by a library (Textual's app console), turned into a SafeConsole in place."""
        console.__class__ = cls
        return console  # type: ignore[return-value]

    def render_str(self, text: str, **options: Any) -> Text:
        return super().render_str(text, **{**options, **LITERAL})

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        return printable_segments(super().render(renderable, options))
