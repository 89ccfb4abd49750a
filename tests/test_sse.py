"""The event-stream reader: the format's rules, and any split of the input reads the same."""

from __future__ import annotations

import re
from collections.abc import Iterator
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_routines import sse
from trio_routines.sse import EventStreamParser, LineTooLong

STREAM = (
    ": hello\r\n"
    "data: one\n"
    "data:two\n\n"
    "event: failed\r"
    "data:  spaced\r\r"
    "id: 7\nretry: 10\nnonsense\ndata\n\n"
    "event: busy\n"
)
EXPECTED = [("message", "one\ntwo"), ("failed", " spaced"), ("message", ""), ("busy", "")]


def read(pieces: list[str]) -> list[tuple[str, str]]:
    parser = EventStreamParser()
    found = []
    for piece in pieces:
        found += parser.feed(piece)
    return found + parser.close()


def test_the_format_rules() -> None:
    assert read([STREAM]) == EXPECTED


def test_nothing_pending_means_nothing_at_the_end() -> None:
    assert read(["data: x\n\n", ": bye\n"]) == [("message", "x")]
    assert read([]) == []


@given(st.lists(st.integers(0, len(STREAM)), max_size=12))
def test_any_split_reads_the_same(cuts: list[int]) -> None:
    points = [0, *sorted(cuts), len(STREAM)]
    pieces = [STREAM[a:b] for a, b in pairwise(points)]
    assert read(pieces) == EXPECTED


def test_every_cut_and_every_character_alone_read_the_same() -> None:
    for cut in range(len(STREAM) + 1):  # across every "\r|\n" too
        assert read([STREAM[:cut], "", STREAM[cut:]]) == EXPECTED
    assert read(list(STREAM)) == EXPECTED
    assert read(["data: a\r", "", "\n", "\r\n"]) == [("message", "a")]
    assert read(["data: a\r", "\r", "\n"]) == [("message", "a")]


class CountingPattern:
    """The line-break pattern, counting the characters each search is given."""

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern
        self.scanned = 0

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        self.scanned += len(text)
        return self.pattern.finditer(text)

    def split(self, text: str) -> list[str]:
        self.scanned += len(text)
        return self.pattern.split(text)


def test_a_long_line_in_small_pieces_is_scanned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    counting = CountingPattern(sse._LINE_BREAK)
    monkeypatch.setattr(sse, "_LINE_BREAK", counting)
    line = "data: " + "x" * 20_000 + "\n\n"
    assert read([line[i : i + 10] for i in range(0, len(line), 10)]) == [("message", "x" * 20_000)]
    assert counting.scanned == len(line)


def test_a_line_over_the_cap_is_refused_however_it_arrives() -> None:
    fits = "data: " + "x" * 14  # 20 characters
    assert read_capped([fits + "\n\n"]) == [("message", "x" * 14)]
    assert read_capped([fits]) == [("message", "x" * 14)]
    assert read_capped([fits[:7], fits[7:], "\r", "\n\n"]) == [("message", "x" * 14)]
    for pieces in ([fits + "y\n"], [fits, "y"], [fits[:3], fits[3:] + "y", "\n"], [fits + "y"]):
        with pytest.raises(LineTooLong, match="a line longer than 20 characters"):
            read_capped(pieces)


def read_capped(pieces: list[str]) -> list[tuple[str, str]]:
    parser = EventStreamParser(max_line=20)
    found = []
    for piece in pieces:
        found += parser.feed(piece)
    return found + parser.close()
