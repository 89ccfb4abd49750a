"""The one escaping helper: one line, control characters visible, reasons bounded."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from trio_routines.text import ERROR_LIMIT, clipped, error_text, one_line, shown, visible


def test_control_characters_are_shown_not_obeyed() -> None:
    assert visible("a\x1b[31mb\x07\x9bc\x7f") == "a\\x1b[31mb\\x07\\x9bc\\x7f"
    assert visible("café ✓") == "café ✓"
    assert shown("one\ntwo\u2028three\r\n\tfour") == "one two three four"


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
