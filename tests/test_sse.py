"""The event-stream reader: the format's rules, and any split of the input reads the same."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given
from hypothesis import strategies as st

from trio_routines.sse import EventStreamParser

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
