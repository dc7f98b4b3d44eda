"""Text from files the kit did not write is printed without terminal control characters, and as written:
`printable` drops every control and escape sequence; a SafeConsole (kit.core.safe_console) prints any string
as literal text, whatever brackets, backslashes or emoji codes it holds, and nothing raw reaches its output."""

from __future__ import annotations

import io
import re
import string
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from rich.text import Text

from kit.core.safe_console import SafeConsole
from kit.core.terminal_text import one_line, printable

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
SGR = re.compile(r"\x1b\[[0-9;]*m")  # the colours Rich writes for the kit's own styles
HOSTILE = "b1-fake[/] [bold red]owned[/] \\[x] :smile: \x1b]0;owned title\x07\x1b[2J\x1b[31mred\x9b2J\x9d0;t\x9c\\"
MARKUPISH = st.lists(st.sampled_from([*"[]/\\:@#= abxyz", "bold", "red", "link", "smile", "\x1b", "\x9b", "\x07",
                                      "\x9c", "\n", "\t", "é", "漢"]), max_size=60).map("".join)


def test_escape_sequences_go_whole():
    assert printable("a\x1b[1;31mred\x1b[0m b") == "ared b"
    assert printable("x\x1b]0;retitled\x07y\x1b]8;;http://e\x1b\\link\x1b]8;;\x1b\\z") == "xylinkz"
    assert printable("8-bit \x9b2J CSI, \x9d0;t\x9c OSC, \x1bP+q\x1b\\ DCS") == "8-bit  CSI,  OSC,  DCS"
    assert printable("cr\rbs\x08nul\x00del\x7fnel\x85 kept:\ttab\nnewline") == "crbsnuldelnel kept:\ttab\nnewline"
    assert one_line("two\nlines\tand  spaces") == "two lines and  spaces"


@given(st.text())
def test_printable_text_holds_no_terminal_controls(text):
    for made in (printable(text), one_line(text)):
        assert not CONTROL.search(made)
    assert "\n" not in one_line(text) and "\t" not in one_line(text)


@given(st.text(alphabet=string.ascii_letters + " .,:;-=()[]{}'\"/_\\", max_size=80))
def test_printable_keeps_plain_text(text):
    assert printable(text) == text == one_line(text)


def _blanks(text: str) -> str:
    """`text` with each run of spaces and tabs as one space (Rich expands a tab to the next tab stop)."""
    return re.sub(r"[ \t]+", " ", text)


def _printed(*objects, color: bool = False, **options) -> str:
    out = io.StringIO()
    console = SafeConsole(file=out, width=10_000, force_terminal=color, color_system="truecolor" if color else None)
    console.print(*objects, soft_wrap=True, **options)
    return out.getvalue()


@given(st.one_of(st.text(), MARKUPISH))
@example("a\\[bold]b\\[/] c\\\\[x]")  # a backslash before `[`: escaped markup lost it (issue #35)
@example(HOSTILE)
def test_any_string_prints_as_written_without_controls(text):
    """What `shown` got wrong: a backslash before `[` (and every other printable character) is kept; how much
    of a broken escape sequence goes is not promised, only that no control character is left."""
    for printed in (_printed(text), _printed(text, markup=False, emoji=False, highlight=False)):
        assert not CONTROL.search(printed)
    safe = printable(text)
    assert _blanks(_printed(safe)) == _blanks(safe + "\n")


@given(st.one_of(st.text(), MARKUPISH))
def test_the_kits_styles_around_any_text_leave_only_its_colours(text):
    def styled(inner: str) -> str:
        return SGR.sub("", _printed(Text.assemble(("PASS", "bold green"), " ", inner, (" end", "red")), color=True))

    assert not CONTROL.search(styled(text))
    assert _blanks(styled(printable(text))) == _blanks(f"PASS {printable(text)} end\n")


def test_a_safe_console_cannot_be_made_to_read_markup():
    with pytest.raises(TypeError, match="markup"):
        SafeConsole(markup=True)
    assert _printed("[bold]x[/]", markup=True) == "[bold]x[/]\n"  # asked per call: still literal
    from rich.console import Console

    adopted = SafeConsole.adopt(Console(file=io.StringIO(), width=200))  # Textual's app console, in the launcher
    adopted.print(HOSTILE, soft_wrap=True)
    assert adopted.file.getvalue() == printable(HOSTILE) + "\n"


def test_an_engine_build_with_markup_and_escapes_is_printed_as_written():
    from kit.app.console import ConsoleReporter
    from kit.core.events import Notice, RunStarted, SessionEnded, SessionStarted

    out = io.StringIO()
    reporter = ConsoleReporter(SafeConsole(file=out, width=300))
    reporter(RunStarted(Path("/runs/x[/]"), "demo[/]", {"requests": 1}))
    reporter(SessionStarted("s1[/]", 1, 1, {"build_info": HOSTILE}))
    reporter(Notice(f"notice {HOSTILE}"))
    reporter(SessionEnded("s1", "VOID", f"during s1: engine said {HOSTILE}"))
    reporter.say(f"no bundle written: {HOSTILE}")
    reporter.close()
    text = out.getvalue()
    shown = printable(HOSTILE)
    assert "run folder: /runs/x[/]" in text and f"session s1[/] (1/1): engine {shown}" in text
    assert f"engine said {shown}" in text and f"no bundle written: {shown}" in text and f"notice {shown}" in text
    assert not CONTROL.search(text)


def test_a_reporter_refuses_a_console_that_reads_markup():
    from rich.console import Console

    from kit.app.console import ConsoleReporter
    from kit.watch.console import Live

    for make in (ConsoleReporter, Live):
        with pytest.raises(TypeError, match="SafeConsole"):
            make(Console(file=io.StringIO()))


def test_file_text_in_a_result_table_is_printed_as_written():
    from kit.protocols.reset.results import ResetResults
    from kit.protocols.reset.view import reset_table

    table = {"table": "restored-state control", "sessions": [{"session": "s1[/]", "status": f"VOID {HOSTILE}"}],
             "across_sessions": {"sessions": 0, "note": f"note {HOSTILE}"}}
    out = io.StringIO()
    SafeConsole(file=out, width=400).print(reset_table(ResetResults.of(table)))
    assert "s1[/]" in out.getvalue() and f"note {printable(HOSTILE)}" in out.getvalue()
    assert not CONTROL.search(out.getvalue())


def test_a_plain_line_of_the_command_line_is_printable(capsys):
    from kit.core.terminal_text import echo

    echo(f"left out: {HOSTILE}")
    echo(f"\rdownload: {HOSTILE} 50%", err=True, nl=False)
    out, err = capsys.readouterr()
    assert out == f"left out: {printable(HOSTILE)}\n" and err == f"\rdownload: {printable(HOSTILE)} 50%"
