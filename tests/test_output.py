"""A turn's kept output (trio_routines.output): the ``output:`` key, the bound, the tail."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_routines.errors import InvalidRoutine
from trio_routines.output import (
    OUTPUT_MAX,
    Tail,
    output_size_text,
    parse_output_size,
    stored_output,
)
from trio_routines.routines import Routine, parse_routine_text
from trio_routines.text import visible_lines


def routine_with(value: str) -> Routine:
    return parse_routine_text("r", f"---\ncron: 0 9 * * *\noutput: {value}\n---\nGo.\n")


@pytest.mark.parametrize(
    ("value", "size"),
    [
        ("512", 512),
        ("512B", 512),
        ("1", 1),
        ("4KiB", 4096),
        ("4 kib", 4096),
        ("0016", 16),
        ("64KiB", OUTPUT_MAX),
        ("65536", OUTPUT_MAX),
        ('"16"', 16),
        ("none", None),
        ("NONE", None),
    ],
)
def test_output_sizes_in_a_routine_file(value: str, size: int | None) -> None:
    assert routine_with(value).output == size


def test_output_is_off_by_default() -> None:
    assert parse_routine_text("r", "---\n---\nGo.").output is None
    assert Routine(name="r", prompt="Go.").output is None


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("-1", "a size like"),
        ("+4", "a size like"),
        ("0", "at least 1 byte"),
        ("0KiB", "at least 1 byte"),
        ("65537", "at most 64KiB"),
        ("65KiB", "at most 64KiB"),
        ("1MiB", "a size like"),
        ("4KB", "a size like"),
        ("4k", "a size like"),
        ("1.5KiB", "a size like"),
        ("1e3", "a size like"),
        ("9" * 13, "a size like"),
        ("9" * 5000, "a size like"),
        ("four", "a size like"),
        ("4KiB extra", "a size like"),
        ("٤", "a size like"),  # an Arabic-Indic digit: \d, but no size of ours
    ],
)
def test_hostile_output_sizes_are_refused_in_one_line(value: str, why: str) -> None:
    with pytest.raises(InvalidRoutine, match=why) as info:
        routine_with(value)
    assert "\n" not in str(info.value)
    assert len(str(info.value)) < 200  # a huge value is quoted, but its length is bounded


@pytest.mark.parametrize("value", [0, -1, OUTPUT_MAX + 1, True, 4.0, "4MB", "0"])
def test_the_record_refuses_a_bad_output_size(value: object) -> None:
    with pytest.raises(InvalidRoutine, match='"output"'):
        Routine(name="r", prompt="Go.", output=value)  # type: ignore[arg-type]


def test_size_text_reads_back() -> None:
    assert [output_size_text(s) for s in (None, 16, 4096, 1500)] == ["none", "16B", "4KiB", "1500B"]
    for size in (1, 100, 4096, OUTPUT_MAX):
        assert parse_output_size(output_size_text(size)) == size


def test_stored_output_keeps_the_end_on_a_character_boundary() -> None:
    assert stored_output("hello world", 5) == "world"
    assert stored_output("", 5) is None
    # "é" is two bytes: a cut through it drops its half, never leaving invalid UTF-8.
    assert stored_output("aé", 1) is None
    assert stored_output("éé", 3) == "é"
    assert stored_output("x🙂", 3) is None
    assert stored_output("x🙂", 4) == "🙂"


def test_stored_output_replaces_what_no_store_can_hold() -> None:
    assert stored_output("a\x00b\udcffc") == "a\ufffdb\ufffdc"
    # Everything else is kept as it came: escaping is for whoever shows it.
    assert stored_output("line\n\x1b[31mred\r") == "line\n\x1b[31mred\r"


@given(st.text(), st.integers(min_value=1, max_value=300))
def test_stored_output_is_bounded_valid_and_stable(text: str, limit: int) -> None:
    kept = stored_output(text, limit)
    if kept is None:
        return
    data = kept.encode()  # valid UTF-8: no lone surrogate left
    assert len(data) <= limit
    assert "\x00" not in kept
    assert stored_output(kept, limit) == kept
    assert stored_output(text.replace("\x00", "\ufffd"), limit) == kept


@given(st.lists(st.text(), max_size=30), st.integers(min_value=1, max_value=64))
def test_the_tail_keeps_what_the_whole_reply_would(pieces: list[str], limit: int) -> None:
    tail = Tail(limit)
    for piece in pieces:
        tail.add(piece)
    assert tail.text() == stored_output("".join(pieces), limit)


def test_the_tail_stays_small_whatever_streams() -> None:
    tail = Tail(16)
    for _ in range(10_000):
        tail.add("x" * 100)
    tail.add("the end, 16 bytes"[-16:])
    assert tail.text() == "he end, 16 bytes"
    assert sum(len(chunk) for chunk in tail._chunks) <= 2 * 16 + 100


def test_visible_lines_escape_all_but_line_breaks_and_tabs() -> None:
    assert visible_lines("a\nb\tc\rd\x1b[2Je\x00\x7f\u2028") == (
        "a\nb\tc\\x0dd\\x1b[2Je\\x00\\x7f\\u2028"
    )
