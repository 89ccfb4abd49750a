"""What each command-line option's value may be: argparse ``type=`` functions.

Each takes the text as given and returns the value the command uses, or raises
:class:`argparse.ArgumentTypeError` with one line naming the text (shown escaped and cut to 64
characters) and what it should look like; :mod:`.parser` turns that into ``error: ...`` and
exit status 2. Nothing here knows which option uses it.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

from ..budgets import Budget, parse_budgets
from ..errors import InvalidOption
from ..instants import beyond_the_calendar, parse_instant
from ..replicas import replica_problem
from ..text import printable_ascii, quoted, shown
from ..wakelimits import MAX_LIFETIME
from ..wakeups import POLL_RANGE, parse_delay


def given(text: str) -> str:
    """A value that must say something: an empty one (``--state "$UNSET"``) would otherwise
    read as not given, and the environment's or the default state or agent be used instead."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"{quoted(text)} is empty (a variable that is not set?)")
    return text


def _seconds(text: str) -> float:
    try:
        if not text.isascii():  # float() also reads other scripts' digits ("٥"): no value does
            raise ValueError(text)
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not a number of seconds") from None


def non_negative_seconds(text: str) -> float:
    value = _seconds(text)
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{quoted(text)} must be a finite number of seconds >= 0")
    return value


def positive_seconds(text: str) -> float:
    """Seconds above 0: a negative value is refused in the same words as 0, not as one that
    only had to be 0 or more."""
    value = _seconds(text)
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(
            f"{quoted(text)} must be a finite number of seconds above 0"
        )
    return value


def poll_seconds(text: str) -> float:
    """``serve --poll``: seconds within :data:`~trio_routines.wakeups.POLL_RANGE` (0 or less,
    or no finite number, is out of it too)."""
    value = _seconds(text)
    low, high = POLL_RANGE
    if not low <= value <= high:  # (NaN compares false: out of it)
        raise argparse.ArgumentTypeError(
            f"{quoted(text)} must be between {low:g} and {high:g} seconds"
        )
    return value


def limit(text: str) -> int | None:
    """A count limit: a positive whole number, or ``off``."""
    if text.strip().lower() == "off":
        return None
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not a positive whole number or off")
    return int(text)


def lifetime(text: str) -> timedelta:
    """The longest life of a recurring wake-up: a delay such as ``30d`` or ``12h``, an hour
    or more."""
    seconds = parse_delay(text)
    if seconds is None or not 3600 <= seconds <= MAX_LIFETIME.total_seconds():
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} is not a span of an hour to {MAX_LIFETIME.days}d"
        )
    return timedelta(seconds=seconds)


def _shown(text: str) -> str:
    return '"' + shown(text)[:64] + '"'


def instant(text: str) -> datetime:
    """An ``ISO`` option: any ISO 8601 instant with a zone, as the slot's UTC millisecond."""
    parsed = parse_instant(text)
    if parsed is None and beyond_the_calendar(text):
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} falls outside the calendar in UTC (after 9999-12-31 or before "
            "0001-01-01)"
        )
    if parsed is None:
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} is not an instant with a zone "
            "(e.g. 2026-03-28T09:00Z, 2026-03-28T09:00:00.000Z or 2026-03-28T11:00+02:00)"
        )
    return parsed


def host_port(text: str) -> tuple[str, int]:
    """``--http HOST:PORT`` (``[::1]:8080`` for IPv6)."""
    host, sep, port = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host and not _is_ipv6(host):  # two ports, as 127.0.0.1:8080:1
        host = ""
    # isascii: int() refuses digits such as "²" that isdigit() accepts; len: no int() of a
    # long digit string (over 4,300 digits it raises, and it is slow before that).
    digits = port.isascii() and port.isdigit() and len(port) <= 5
    if not sep or not host or not digits:
        raise argparse.ArgumentTypeError(f"{_shown(text)}: expected HOST:PORT, e.g. 127.0.0.1:8080")
    if int(port) > 65535:  # HOST:PORT, but no port there is
        raise argparse.ArgumentTypeError(f"{_shown(text)}: the port must be 0 to 65535")
    return host, int(port)


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def server_url(text: str) -> str:
    """``status --url``: the HTTP surface of a running serve, ``http(s)://host[:port]``, with a
    path if a proxy serves it below one. Printable ASCII only (a request line cannot carry a
    space or a control character); no query or fragment (the command's own path goes after
    the URL); no user name or password, which the refusal does not repeat (the token goes in
    ``$TRIO_ROUTINES_TOKEN``)."""
    try:
        parts = urlsplit(text)
    except ValueError:  # an unclosed IPv6 bracket
        parts = urlsplit("")
    authority = text.partition("://")[2].partition("/")[0]  # as written, parsed or not
    if "@" in parts.netloc or "@" in authority:  # first: the refusals after it show the text
        raise argparse.ArgumentTypeError(
            "a server URL with a user name or password is refused — "
            "give http(s)://host[:port], and the token in TRIO_ROUTINES_TOKEN"
        )
    if not printable_ascii(text):
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} has a space, a control character or a character outside ASCII — "
            "write the server's address as http(s)://host[:port]"
        )
    if parts.query or parts.fragment or text.endswith(("?", "#")):
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} has a query or a fragment — give the server's address alone"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(
            f"{_shown(text)} is not an http(s) URL, e.g. http://127.0.0.1:8080"
        )
    try:
        valid_port = parts.port is None or parts.port > 0  # out of range raises ValueError
    except ValueError:
        valid_port = False
    if not valid_port:
        raise argparse.ArgumentTypeError(f"{_shown(text)} has no valid port")
    return text


def delay(text: str) -> timedelta:
    """``--in``: 90s, 30m, 1.5h, 2d (a bare number is refused: its unit would be a guess)."""
    seconds = parse_delay(text)
    if seconds is None:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not a delay: use 90s, 30m, 1.5h or 2d")
    try:
        span = timedelta(seconds=seconds)
    except OverflowError:
        span = timedelta.max
    if datetime.max.replace(tzinfo=UTC) - datetime.now(UTC) <= span:
        raise argparse.ArgumentTypeError(f"{_shown(text)} is too far away")
    return span


def budgets(text: str) -> tuple[Budget, ...]:
    try:
        return parse_budgets(text)
    except InvalidOption as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def replica(text: str) -> str:
    problem = replica_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def count(text: str) -> int:
    digits = text.strip()
    if digits.startswith("-") and digits[1:].isascii() and digits[1:].isdigit():
        raise argparse.ArgumentTypeError(f"{_shown(text)} must be between 1 and 1000")
    if not (digits.isascii() and digits.isdigit()):
        raise argparse.ArgumentTypeError(f"{_shown(text)} is not a whole number")
    if len(digits.lstrip("0")) > 4 or not 1 <= int(digits) <= 1000:
        raise argparse.ArgumentTypeError(f"{_shown(text)} must be between 1 and 1000")
    return int(digits)
