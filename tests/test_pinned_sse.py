"""Pinned: the event-stream reader where a piece ends, to the event and to the character.

Written for the mutation run of sse.py (docs/mutation.md). The suite's streams split a CRLF only
where the blank line it would add changes nothing (after a comment, after an event), and its
overlong lines are found by the end of the stream at the latest; here a CRLF split inside an
event must not end it, and the cap holds piece by piece.
"""

from __future__ import annotations

import pytest

from trio_routines.sse import EventStreamParser, LineTooLong


def test_a_crlf_split_between_pieces_is_one_line_break_not_two() -> None:
    parser = EventStreamParser()
    assert parser.feed("data: a\r") == []
    assert parser.feed("\ndata: b\r\n") == []  # not a blank line: the event goes on
    assert parser.feed("\r") == [("message", "a\nb")]
    assert parser.feed("\nevent: x\r") == []
    assert parser.close() == [("x", "")]


def test_only_a_cr_at_the_very_end_of_a_piece_waits_for_its_lf() -> None:
    parser = EventStreamParser()
    # The CR inside the piece is a line break of its own; the LF opening the next piece is
    # another, so the blank line it makes ends the event.
    assert parser.feed("data: a\rdata: b") == []
    assert parser.feed("\n\n") == [("message", "a\nb")]
    assert parser.feed("data: c\n\r") == [("message", "c")]  # a CR alone: a blank line
    assert parser.feed("\ndata: d\n\n") == [("message", "d")]


def test_a_piece_over_the_cap_is_refused_as_it_arrives() -> None:
    parser = EventStreamParser(max_line=20)
    with pytest.raises(LineTooLong, match="a line longer than 20 characters"):
        parser.feed("data: " + "x" * 15)  # 21 characters, no line break yet
    held = EventStreamParser(max_line=20)
    held.feed("data: " + "x" * 10)
    with pytest.raises(LineTooLong):
        held.feed("x" * 5)


def test_each_line_starts_the_count_afresh() -> None:
    parser = EventStreamParser(max_line=20)
    fits = "data: " + "x" * 14  # 20 characters
    assert parser.feed(fits + "\n" + fits) == []
    assert parser.feed("\n" + fits + "\n") == []
    assert parser.feed(fits[:5]) == []
    assert parser.feed(fits[5:] + "\n\n") == [("message", "\n".join(["x" * 14] * 4))]
