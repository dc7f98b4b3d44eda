"""Text from files the kit did not write is printed without terminal control characters."""

from __future__ import annotations

import string

from hypothesis import given
from hypothesis import strategies as st

from kit.terminal_text import one_line, printable


def test_escape_sequences_go_whole():
    assert printable("a\x1b[1;31mred\x1b[0m b") == "ared b"
    assert printable("x\x1b]0;retitled\x07y\x1b]8;;http://e\x1b\\link\x1b]8;;\x1b\\z") == "xylinkz"
    assert printable("8-bit \x9b2J CSI, \x9d0;t\x9c OSC, \x1bP+q\x1b\\ DCS") == "8-bit  CSI,  OSC,  DCS"
    assert printable("cr\rbs\x08nul\x00del\x7fnel\x85 kept:\ttab\nnewline") == "crbsnuldelnel kept:\ttab\nnewline"
    assert one_line("two\nlines\tand  spaces") == "two lines and  spaces"


@given(st.text())
def test_printable_text_holds_no_terminal_controls(text):
    for shown in (printable(text), one_line(text)):
        assert not any(ord(c) < 0x20 and c not in "\n\t" or 0x7F <= ord(c) <= 0x9F for c in shown)
    assert "\n" not in one_line(text) and "\t" not in one_line(text)


@given(st.text(alphabet=string.ascii_letters + " .,:;-=()[]{}'\"/_", max_size=80))
def test_printable_keeps_plain_text(text):
    assert printable(text) == text == one_line(text)
