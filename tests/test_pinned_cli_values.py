"""What each command-line option's value may be (``trio_routines.cli.values``), pinned at its
edges: the value a command gets, and the one line a refused text is told with."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from trio_routines.cli import values


def refused(function: Callable[[str], Any], text: str) -> str:
    with pytest.raises(argparse.ArgumentTypeError) as caught:
        function(text)
    # No chained traceback: a caught error is raised `from None`.
    error = caught.value
    assert error.__cause__ is None
    assert error.__context__ is None or error.__suppress_context__
    return str(caught.value)


def test_seconds_are_finite_and_not_negative_and_positive_ones_above_zero() -> None:
    assert values.non_negative_seconds("0") == 0.0
    assert values.non_negative_seconds("1.5") == 1.5
    assert refused(values.non_negative_seconds, "abc") == "'abc' is not a number of seconds"
    for text in ("-1", "-0.001", "inf", "nan"):
        assert refused(values.non_negative_seconds, text) == (
            f"{text!r} must be a finite number of seconds >= 0"
        )
    assert values.positive_seconds("0.001") == 0.001
    for text in ("0", "-5", "-0.001", "inf", "nan"):
        assert refused(values.positive_seconds, text) == (
            f"{text!r} must be a finite number of seconds above 0"
        )
    assert refused(values.positive_seconds, "x") == "'x' is not a number of seconds"
    for text in ("٥", "５", "1.٥", "٥e1"):  # float() reads them; no other value does
        assert refused(values.non_negative_seconds, text) == f"{text!r} is not a number of seconds"


def test_a_limit_is_a_positive_whole_number_or_off() -> None:
    assert values.limit("off") is None
    assert values.limit(" OFF ") is None
    assert values.limit("1") == 1
    assert values.limit(" 25 ") == 25
    for text in ("0", "-1", "1.5", "", "offf"):
        assert refused(values.limit, text) == f'"{text}" is not a positive whole number or off'


def test_a_lifetime_is_an_hour_to_a_hundred_years() -> None:
    assert values.lifetime("1h") == timedelta(hours=1)
    assert values.lifetime("30d") == timedelta(days=30)
    assert values.lifetime("36500d") == timedelta(days=36_500)
    # Past it, a wake-up's until leaves the calendar (a traceback, then a 500 on every add).
    for text in ("59m", "3599s", "3600", "soon", "36501d", "3000000d", "1000000000d"):
        assert refused(values.lifetime, text) == f'"{text}" is not a span of an hour to 36500d'


def test_a_refused_text_is_shown_escaped_and_cut_to_64_characters() -> None:
    assert refused(values.limit, "a" * 100) == (
        '"' + "a" * 64 + '" is not a positive whole number or off'
    )
    assert refused(values.limit, "\x1b[2J") == '"\\x1b[2J" is not a positive whole number or off'


def test_an_instant_needs_a_zone_and_becomes_utc() -> None:
    assert values.instant("2026-03-28T11:00+02:00") == datetime(2026, 3, 28, 9, tzinfo=UTC)
    assert refused(values.instant, "2026-03-28T09:00") == (
        '"2026-03-28T09:00" is not an instant with a zone (e.g. 2026-03-28T09:00Z, '
        "2026-03-28T09:00:00.000Z or 2026-03-28T11:00+02:00)"
    )
    # One that is, but falls past the calendar's end in UTC, is not told it is none.
    assert refused(values.instant, "9999-12-31T23:59-01:00") == (
        '"9999-12-31T23:59-01:00" falls outside the calendar in UTC (after 9999-12-31 or '
        "before 0001-01-01)"
    )


def test_host_port_takes_the_last_colon_brackets_for_ipv6_and_ports_0_to_65535() -> None:
    assert values.host_port("127.0.0.1:8080") == ("127.0.0.1", 8080)
    assert values.host_port("[::1]:8080") == ("::1", 8080)
    assert values.host_port("h:0") == ("h", 0)
    assert values.host_port("h:65535") == ("h", 65535)
    assert values.host_port("h:08080") == ("h", 8080)
    # Only a pair of brackets is taken off.
    assert values.host_port("[abc:80") == ("[abc", 80)
    assert values.host_port("abc]:80") == ("abc]", 80)
    assert values.host_port("::1:8080") == ("::1", 8080)  # a bare IPv6 address still reads
    two_ports = ("127.0.0.1:8080:1", "h:80:1", "a:b:c:1")  # not an IPv6 address: a port twice
    for text in ("h", ":80", "h:", "h:000080", "h:²", "h:-1", "h:8o", *two_ports):
        assert refused(values.host_port, text) == (
            f'"{text}": expected HOST:PORT, e.g. 127.0.0.1:8080'
        )
    for text in ("h:65536", "localhost:99999"):
        assert refused(values.host_port, text) == f'"{text}": the port must be 0 to 65535'


def test_a_server_url_is_http_or_https_with_a_host_and_a_valid_port() -> None:
    for text in ("http://127.0.0.1:8080", "https://example.org", "http://h:1", "http://h:65535"):
        assert values.server_url(text) == text
    for text in ("ftp://h", "http://", "127.0.0.1:8080", "http:///path"):
        assert refused(values.server_url, text) == (
            f'"{text}" is not an http(s) URL, e.g. http://127.0.0.1:8080'
        )
    for text in ("http://h:0", "http://h:65536", "http://h:99999"):
        assert refused(values.server_url, text) == f'"{text}" has no valid port'
    # Below a proxy's path, and an IPv6 literal, are addresses too.
    for text in ("http://h/trio", "https://h:8443/a/b/", "http://[::1]:80", "http://h/!~"):
        assert values.server_url(text) == text
    assert refused(values.server_url, "http://[::1") == (
        '"http://[::1" is not an http(s) URL, e.g. http://127.0.0.1:8080'
    )


@pytest.mark.parametrize(
    "text",
    ["http://h/ ", "http://h/a b", "http://h/\r\nX: y", "http://h\t", "http://hé", "http://h/\x00"],
)
def test_a_server_url_is_printable_ascii(text: str) -> None:
    # A request line cannot carry these: http.client raised InvalidURL, a traceback.
    assert refused(values.server_url, text).endswith(
        " has a space, a control character or a character outside ASCII — write the "
        "server's address as http(s)://host[:port]"
    )


@pytest.mark.parametrize("text", ["http://h/?x=1", "http://h#top", "http://h/?", "https://h/#"])
def test_a_server_url_has_no_query_or_fragment(text: str) -> None:
    # The command's own path goes after the URL: after a query or a fragment it was lost.
    assert refused(values.server_url, text) == (
        f'"{text}" has a query or a fragment — give the server\'s address alone'
    )


@pytest.mark.parametrize(
    "text",
    [
        "http://user:s3cret@h:8080",
        "http://s3cret@h",
        "http://u:s3cret@h/ x",
        "ftp://u:s3cret@h",
        "http://user:s3cret@[::1",  # no URL at all: still not repeated
    ],
)
def test_a_server_url_with_credentials_is_refused_without_repeating_them(text: str) -> None:
    message = refused(values.server_url, text)
    assert message == (
        "a server URL with a user name or password is refused — give http(s)://host[:port], "
        "and the token in TRIO_ROUTINES_TOKEN"
    )
    assert "s3cret" not in message


def test_a_poll_interval_is_within_its_range() -> None:
    assert values.poll_seconds("0.05") == 0.05
    assert values.poll_seconds("86400") == 86400.0
    for text in ("1e-9", "0.049", "86400.5", "1e308"):
        assert refused(values.poll_seconds, text) == (
            f"{text!r} must be between 0.05 and 86400 seconds"
        )
    for text in ("0", "-1", "0.01", "inf", "nan", "86401"):
        assert refused(values.poll_seconds, text) == (
            f"{text!r} must be between 0.05 and 86400 seconds"
        )
    assert refused(values.poll_seconds, "x") == "'x' is not a number of seconds"


def test_a_delay_has_a_unit_and_ends_before_the_last_instant() -> None:
    assert values.delay("90s") == timedelta(seconds=90)
    assert values.delay("1.5h") == timedelta(minutes=90)
    for text in ("120", "0s", "later"):
        assert refused(values.delay, text) == (f'"{text}" is not a delay: use 90s, 30m, 1.5h or 2d')
    # Beyond datetime's range (3,000,000 days), and beyond timedelta's own (10^11 days).
    for text in ("3000000d", "100000000000d"):
        assert refused(values.delay, text) == f'"{text}" is too far away'


def test_budgets_and_replicas_are_refused_with_their_own_reasons() -> None:
    assert len(values.budgets("200k tokens/day, 5 USD/week")) == 2
    assert refused(values.budgets, "lots") == (
        "a budget is written like 200k tokens/day or 5 USD/week, not 'lots'"
    )
    assert values.replica("replica-1") == "replica-1"
    assert refused(values.replica, "") == "a replica id must be 1 to 128 characters"


def test_a_count_is_a_whole_number_from_1_to_1000() -> None:
    assert values.count("1") == 1
    assert values.count(" 7 ") == 7
    assert values.count("1000") == 1000
    assert values.count("0001000") == 1000
    for text in ("0", "1001", "10000", "99999999999999999999", "-5", "-0"):
        assert refused(values.count, text) == f'"{text}" must be between 1 and 1000'
    for text in ("", "-", "--5", "-1.5", "1.5", "²", "-²", "seven"):
        assert refused(values.count, text) == f'"{text}" is not a whole number'


def test_a_value_that_must_say_something_is_kept_as_given_and_an_empty_one_refused() -> None:
    assert values.given("state") == "state"
    assert values.given(" ./state ") == " ./state "  # as typed: a path may hold spaces
    assert values.given("postgresql://db/x") == "postgresql://db/x"
    assert refused(values.given, "") == "'' is empty (a variable that is not set?)"
    assert refused(values.given, " \t") == "' \\t' is empty (a variable that is not set?)"


def test_an_at_sign_after_the_host_is_no_user_name() -> None:
    # Only the authority (between :// and the first /) is looked at for credentials.
    assert values.server_url("http://127.0.0.1:8080/a@b") == "http://127.0.0.1:8080/a@b"
    assert values.server_url("http://h:1/x://u@y") == "http://h:1/x://u@y"
    assert "user name or password" in refused(values.server_url, "http://u@h:1")
