"""Text from files the kit did not write is printed without terminal control characters."""

from __future__ import annotations

import string
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from kit.core.terminal_text import one_line, printable, shown


def test_escape_sequences_go_whole():
    assert printable("a\x1b[1;31mred\x1b[0m b") == "ared b"
    assert printable("x\x1b]0;retitled\x07y\x1b]8;;http://e\x1b\\link\x1b]8;;\x1b\\z") == "xylinkz"
    assert printable("8-bit \x9b2J CSI, \x9d0;t\x9c OSC, \x1bP+q\x1b\\ DCS") == "8-bit  CSI,  OSC,  DCS"
    assert printable("cr\rbs\x08nul\x00del\x7fnel\x85 kept:\ttab\nnewline") == "crbsnuldelnel kept:\ttab\nnewline"
    assert one_line("two\nlines\tand  spaces") == "two lines and  spaces"


@given(st.text())
def test_printable_text_holds_no_terminal_controls(text):
    for made in (printable(text), one_line(text)):
        assert not any(ord(c) < 0x20 and c not in "\n\t" or 0x7F <= ord(c) <= 0x9F for c in made)
    assert "\n" not in one_line(text) and "\t" not in one_line(text)


@given(st.text(alphabet=string.ascii_letters + " .,:;-=()[]{}'\"/_", max_size=80))
def test_printable_keeps_plain_text(text):
    assert printable(text) == text == one_line(text)


HOSTILE = "b1-fake[/] [bold red]owned[/]\x1b]0;owned title\x07\x1b[2J\\"


@given(st.text())
def test_shown_text_renders_as_written_without_controls(text):
    from rich.text import Text

    rendered = Text.from_markup(shown(text)).plain  # never a MarkupError
    assert rendered == one_line(text) or rendered == one_line(text) + "\\"  # Rich doubles a trailing backslash
    assert Text.from_markup(f"[bold]{shown(text)}[/]").plain.startswith(one_line(text))


def test_an_engine_build_with_markup_and_escapes_is_printed_as_written():
    import io

    from rich.console import Console

    from kit.app.console import ConsoleReporter
    from kit.core.events import RunStarted, SessionEnded, SessionStarted

    out = io.StringIO()
    reporter = ConsoleReporter(Console(file=out, width=200, highlight=False))
    reporter(RunStarted(Path("/runs/x[/]"), "demo[/]", {"requests": 1}))
    reporter(SessionStarted("s1", 1, 1, {"build_info": HOSTILE}))
    reporter(SessionEnded("s1", "VOID", f"during s1: engine said {HOSTILE}"))
    reporter.say(f"no bundle written: {HOSTILE}")
    reporter.close()
    text = out.getvalue()
    assert "engine b1-fake[/] [bold red]owned[/]" in text and "run folder: /runs/x[/]" in text
    assert "engine said b1-fake[/]" in text and "no bundle written: b1-fake[/]" in text
    assert "\x1b" not in text and "\x07" not in text


def test_file_text_in_a_result_table_is_printed_as_written():
    import io

    from rich.console import Console

    from kit.protocols.reset.view import reset_table

    table = {"sessions": [{"session": "s1[/]", "status": f"VOID {HOSTILE}"}],
             "across_sessions": {"note": f"note {HOSTILE}"}}
    out = io.StringIO()
    Console(file=out, width=300).print(reset_table(table))
    assert "s1[/]" in out.getvalue() and "note b1-fake[/]" in out.getvalue() and "\x1b]" not in out.getvalue()
