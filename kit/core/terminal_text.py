"""Text from files the kit did not write, made safe to print on a terminal.

A bundle may come from anyone; a manifest value such as ``"\\x1b]0;owned\\x07"`` would otherwise
retitle the reviewer's terminal, clear it or hide the lines above. `printable` drops whole escape
sequences (CSI, OSC, DCS/SOS/PM/APC strings and two-byte escapes, in their 7-bit and 8-bit forms)
and every other C0 control but newline and tab, DEL and every C1 control.

Nothing at a call site has to remember this: the kit prints through a `SafeConsole`
(kit.core.safe_console), on which a plain string is literal text and every segment is made printable, and the
launcher draws every line through the same filter (kit.tui.app.PrintableLines); `one_line` is for the plain
lines the command line echoes.
"""

from __future__ import annotations

import re

_CONTROLS = re.compile(r"""
      \x1b\[[0-?]*[\x20-/]*[@-~]?                 # CSI: ESC [ parameters intermediates final
    | \x9b[0-?]*[\x20-/]*[@-~]?                   # the same, 8-bit CSI
    | (?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])     # OSC, DCS, SOS, PM, APC (7- or 8-bit) ...
      [^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?       #   ... up to BEL or the string terminator
    | \x1b[\x20-/]*[\x30-~]?                      # any other escape sequence
    | [\x00-\x08\x0b-\x1f\x7f-\x9f]               # C0 but tab and newline, DEL, C1
""", re.VERBOSE)


def printable(text: str) -> str:
    """`text` without terminal control characters and escape sequences (newlines and tabs kept)."""
    return _CONTROLS.sub("", text)


def one_line(text: str) -> str:
    """`text` made printable and folded onto one line (newlines and tabs become spaces)."""
    return re.sub(r"[\n\t]+", " ", printable(text))



def echo(message: object = "", *, err: bool = False, nl: bool = True) -> None:
    """Write one plain line of the command line's (stdout, or stderr with `err`), made printable whatever it
    quotes: the one way the kit writes a line outside a SafeConsole. A leading carriage return (a progress
    line redrawn in place) is the kit's own and kept."""
    import click  # noqa: PLC0415 - only where a line is written

    text = str(message)
    click.echo(("\r" if text.startswith("\r") else "") + printable(text), err=err, nl=nl)
