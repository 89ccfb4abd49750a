"""The one escaping helper: one line, control characters visible, reasons bounded."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from trio_routines.text import (
    ERROR_LIMIT,
    clipped,
    error_text,
    one_line,
    printable_ascii,
    safe_json,
    shown,
    visible,
    visible_lines,
)


def test_control_characters_are_shown_not_obeyed() -> None:
    assert visible("a\x1b[31mb\x07\x9bc\x7f") == "a\\x1b[31mb\\x07\\x9bc\\x7f"
    assert visible("café ✓") == "café ✓"
    assert shown("one\ntwo\u2028three\r\n\tfour") == "one two\\u2028three four"
    # A break only some readers obey is shown, not read as a space: "s\u2028x" is no "s x".
    assert shown(" s\u2028x\x85y\vz\u2029 ") == "s\\u2028x\\x85y\\x0bz\\u2029"
    assert shown("a\xa0\u2003 b") == "a b"


def test_clipping_counts_bytes_and_keeps_characters_whole() -> None:
    assert clipped("short", 10) == "short"
    cut = clipped("é" * 10, 9)  # 20 bytes; room for 3 "é" and the ellipsis
    assert cut == "ééé…"
    assert len(cut.encode()) <= 9


@given(st.text())
def test_error_text_is_one_bounded_visible_line_and_stable(text: str) -> None:
    stored = error_text(text)
    assert len(stored.encode()) <= ERROR_LIMIT
    assert stored == one_line(stored)
    assert visible(stored) == stored
    assert error_text(stored) == stored  # read back and stored again: unchanged


BIDI = ["\u061c", "\u200e", "\u200f", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e"]
BIDI += ["\u2066", "\u2067", "\u2068", "\u2069"]


def test_what_reorders_or_breaks_a_shown_line_is_shown_not_obeyed() -> None:
    # A name with a right-to-left override reads as another ("Trojan source"), and some
    # terminals and log viewers break a line at U+2028/U+2029.
    for char in [*BIDI, "\u2028", "\u2029"]:
        escaped = f"\\u{ord(char):04x}"
        assert visible(f"a{char}b") == f"a{escaped}b"
        assert visible_lines(f"a{char}b\n\tc") == f"a{escaped}b\n\tc"
        assert safe_json({"k": f"a{char}b"}) == f'{{"k": "a{escaped}b"}}'
        assert json.loads(safe_json(f"a{char}b")) == f"a{char}b"  # still the same text
    for char in BIDI:
        assert shown(f"a{char}b") == f"a\\u{ord(char):04x}b"
    # Their neighbours, and the letters of right-to-left scripts, are text like any other.
    for char in ["\u061b", "\u061d", "\u200d", "\u202f", "\u2065", "\u206a", "שלום"]:
        assert visible(char) == char


def test_lone_surrogates_are_shown_escaped_and_pairs_as_their_character() -> None:
    # Text read from a JSON escape ("\\ud800") or from bytes that did not decode: no UTF-8
    # output (a page, a terminal, a log line) can carry it as it is.
    for code in (0xD800, 0xDBFF, 0xDC00, 0xDCFF, 0xDFFF):
        char, escaped = chr(code), f"\\u{code:04x}"
        assert visible(f"a{char}b") == f"a{escaped}b"
        assert visible_lines(f"a{char}b\n\tc") == f"a{escaped}b\n\tc"
        assert safe_json({"k": f"a{char}b"}) == f'{{"k": "a{escaped}b"}}'
        visible(f"a{char}b").encode("utf-8")
    for char in ("\ud7ff", "\ue000", "\U0001f600"):  # their neighbours, a pair's character
        assert visible(char) == char
    # A failure reason holding one (an agent's text decoded with "surrogateescape") is stored
    # as it is shown, where measuring its UTF-8 failed.
    assert error_text(f"exit 2: {chr(0xDCFF)}") == "exit 2: \\udcff"


@given(st.text())
def test_a_visible_text_holds_no_control_left_to_obey(text: str) -> None:
    for escaped in (visible(text), visible_lines(text)):
        assert not any(char in escaped for char in [*BIDI, "\u2028", "\u2029", "\x1b", "\x9b"])


def test_printable_ascii_is_every_character_from_bang_to_tilde() -> None:
    assert printable_ascii("".join(chr(code) for code in range(0x21, 0x7F)))
    assert printable_ascii("")
    for char in (" ", "\x20", "\x7f", "\x00", "\t", "é", "\u202e"):
        assert not printable_ascii(f"a{char}b")
