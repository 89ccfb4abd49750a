"""The W3C Trace Context headers' strict parsing (a pure core)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_routines.tracecontext import (
    MAX_LENGTH,
    MAX_MEMBERS,
    parse_traceparent,
    parse_tracestate,
)

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"
GOOD = f"00-{TRACE}-{SPAN}-01"


def test_a_valid_traceparent_gives_its_ids_and_flags() -> None:
    assert parse_traceparent([GOOD]) == (int(TRACE, 16), int(SPAN, 16), 1)
    assert parse_traceparent([f" \t{GOOD} "]) == (int(TRACE, 16), int(SPAN, 16), 1)  # OWS
    assert parse_traceparent([f"00-{TRACE}-{SPAN}-00"]) == (int(TRACE, 16), int(SPAN, 16), 0)


def test_a_higher_version_is_read_as_far_as_version_00_goes() -> None:
    assert parse_traceparent([f"cc-{TRACE}-{SPAN}-01"]) == (int(TRACE, 16), int(SPAN, 16), 1)
    assert parse_traceparent([f"cc-{TRACE}-{SPAN}-01-what-comes-next"]) is not None
    assert parse_traceparent([f"cc-{TRACE}-{SPAN}-01x"]) is None  # not a dash after the flags


@pytest.mark.parametrize(
    "value",
    [
        "",
        "garbage",
        GOOD.upper(),  # lowercase hex only
        f"00-{TRACE.upper()}-{SPAN}-01",
        f"ff-{TRACE}-{SPAN}-01",  # the forbidden version
        f"00-{'0' * 32}-{SPAN}-01",  # an all-zero trace id
        f"00-{TRACE}-{'0' * 16}-01",  # an all-zero parent id
        f"00-{TRACE}-{SPAN}-01-extra",  # version 00 is exactly 55 characters
        f"00-{TRACE[:-1]}-{SPAN}-01",
        f"00-{TRACE}-{SPAN}-1",
        f"00_{TRACE}_{SPAN}_01",
        f"00-{TRACE}-{SPAN[:-1]}g-01",
        f"00-{TRACE}-{SPAN}-0١",  # an Arabic-Indic digit is a digit to Python, not to W3C
        f"0-{TRACE}-{SPAN}-01",
        f"cc-{TRACE}-{SPAN}-01-" + "x" * 5000,  # far past any header we read
        f"00-{TRACE}-{SPAN}-01\r\nx-injected: 1",
    ],
)
def test_a_malformed_traceparent_is_none(value: str) -> None:
    assert parse_traceparent([value]) is None


def test_no_header_or_a_repeated_one_is_none() -> None:
    assert parse_traceparent([]) is None
    assert parse_traceparent([GOOD, GOOD]) is None


@given(st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1), st.integers(0, 255))
def test_every_valid_traceparent_reads_back(trace: int, span: int, flags: int) -> None:
    assert parse_traceparent([f"00-{trace:032x}-{span:016x}-{flags:02x}"]) == (trace, span, flags)


@given(st.text())
def test_any_text_is_a_context_or_none_never_an_error(value: str) -> None:
    found = parse_traceparent([value])
    assert found is None or (found[0] > 0 and found[1] > 0)
    state = parse_tracestate([value])
    assert state is None or len(state) <= MAX_MEMBERS


def test_a_valid_tracestate_keeps_its_members_in_order() -> None:
    assert parse_tracestate([]) == ()
    assert parse_tracestate(["congo=t61rcWkgMzE, rojo=00f067aa0ba902b7"]) == (
        ("congo", "t61rcWkgMzE"),
        ("rojo", "00f067aa0ba902b7"),
    )
    # Multi-tenant keys, values with blanks inside, empty members, two header lines joined.
    assert parse_tracestate(["t1@vendor=a b,,", " x/y*z_-=1 ", "last=~"]) == (
        ("t1@vendor", "a b"),
        ("x/y*z_-", "1"),
        ("last", "~"),
    )


@pytest.mark.parametrize(
    "value",
    [
        "Upper=1",  # keys are lowercase
        "1abc=x",  # a simple key starts with a letter
        "key=",  # a value has at least one character
        "key=a=b",  # no equals sign in a value
        "key=del\x7f",
        "key=" + "v" * 257,
        "k" * 257 + "=v",
        "a=1,a=2",  # a key twice
        ",".join(f"k{i}=v" for i in range(MAX_MEMBERS + 1)),
        "key=tab\tinside",
        "key=é",
        "x" * 5000,
    ],
)
def test_a_malformed_tracestate_is_none(value: str) -> None:
    assert parse_tracestate([value]) is None


@pytest.mark.parametrize("blank", ["\xa0", "\x0b", "\x0c", "\r", "\n", "\u2003"])
def test_only_space_and_tab_are_stripped_around_a_header(blank: str) -> None:
    # A header's optional whitespace is SP and HTAB; anything else Python calls whitespace
    # (a no-break space, which reaches us from an HTTP header's obs-text, a form feed) is
    # part of the value, and no valid value holds one.
    assert parse_traceparent([GOOD + blank]) is None
    assert parse_traceparent([blank + GOOD]) is None
    assert parse_tracestate([f"congo=t61rcWkgMzE{blank}"]) is None
    assert parse_tracestate([f"{blank}congo=t61rcWkgMzE"]) is None


def test_a_header_of_exactly_max_length_is_read_one_more_character_is_not() -> None:
    head = f"cc-{TRACE}-{SPAN}-01-"
    longest = head + "x" * (MAX_LENGTH - len(head))
    assert parse_traceparent([longest]) == (int(TRACE, 16), int(SPAN, 16), 1)
    assert parse_traceparent([longest + "x"]) is None
    # tracestate counts every header line's characters together.
    members = [f"k{i}={'v' * 100}" for i in range(MAX_MEMBERS)]
    first, second = ",".join(members[:16]), ",".join(members[16:])
    room = MAX_LENGTH - len(first) - len(second)
    assert room > 0
    second += "," * room  # empty members: skipped, but counted
    assert sum(map(len, (first, second))) == MAX_LENGTH
    assert parse_tracestate([first, second]) == tuple(
        (f"k{i}", "v" * 100) for i in range(MAX_MEMBERS)
    )
    assert parse_tracestate([first, second + ","]) is None


def test_max_members_are_kept() -> None:
    members = tuple((f"k{i}", "v") for i in range(MAX_MEMBERS))
    assert parse_tracestate([",".join(f"{k}={v}" for k, v in members)]) == members


def test_an_empty_member_between_two_others_is_skipped_not_the_end() -> None:
    assert parse_tracestate([" , a=1 ,\t, b=2"]) == (("a", "1"), ("b", "2"))
