"""A turn's kept output pinned whole (output.py): each refusal of the ``output:`` key compared
whole, and how the tail holds a streamed reply (see docs/mutation.md)."""

from __future__ import annotations

import pytest

from trio_routines.errors import InvalidRoutine
from trio_routines.output import OUTPUT_MAX, Tail, check_output_size, parse_output_size

A_SIZE = '"output" must be "none" or a size like 512, 4KiB or 64KiB, not '


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", '"output" must be at least 1 byte (write "none" to keep nothing)'),
        ("65537", "\"output\" must be at most 64KiB, not '65537'"),
        ("x" * 40, A_SIZE + repr("x" * 40)),  # 40 characters: quoted whole
        ("y" + "x" * 40, A_SIZE + repr("y" + "x" * 39) + "… (41 characters)"),
    ],
)
def test_a_refused_output_size_is_said_whole(value: str, message: str) -> None:
    with pytest.raises(InvalidRoutine) as caught:
        parse_output_size(value)
    assert str(caught.value) == message


def test_the_records_refusal_is_said_whole() -> None:
    with pytest.raises(InvalidRoutine) as caught:
        check_output_size(None, None, OUTPUT_MAX + 1)
    assert str(caught.value) == '"output" must be a number of bytes from 1 to 65536, or None'


def test_an_agents_odd_event_is_ignored_not_kept() -> None:
    tail = Tail(8)
    for odd in (42, b"bytes", None, "", ["x"]):
        tail.add(odd)  # type: ignore[arg-type]
    tail.add("ok")
    assert tail.text() == "ok"


def test_the_tail_joins_its_pieces_only_past_twice_its_limit_and_keeps_the_last_limit() -> None:
    tail = Tail(4)
    for piece in "abcdefgh":  # 8 characters: twice the limit, still held as they came
        tail.add(piece)
    assert tail._chunks == list("abcdefgh")
    tail.add("i")  # past twice the limit: joined, the last 4 kept
    assert tail._chunks == ["fghi"]
    assert tail.text() == "fghi"
    for piece in ("jk", "lm", "n"):  # counted from what was kept: 4 + 5 characters
        tail.add(piece)
    assert tail._chunks == ["klmn"]
    tail.add("wxyz")  # a piece as long as the limit replaces everything before it
    assert tail._chunks == ["wxyz"]
    assert tail.text() == "wxyz"


def test_the_tail_holds_at_most_twice_its_limit_of_small_pieces() -> None:
    tail = Tail(16)
    for n in range(1000):
        tail.add("ab" if n % 2 else "c")
        assert sum(len(chunk) for chunk in tail._chunks) <= 2 * 16
    assert tail.text() == ("cab" * 500)[-16:]
