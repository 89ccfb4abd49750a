"""The status page's sign-in: a cookie that carries until when it holds and an HMAC of that
keyed by the token (docs/design.md, "Status page"). No session state on the server: any
replica sharing the token honours it, to its end, and changing the token ends every one."""

from __future__ import annotations

import hashlib
import hmac

from .wire import Scope, headers

COOKIE = "trio_routines_page"
#: How long a sign-in lasts, in seconds: the cookie carries its end, and the server keeps to it.
SIGNED_IN = 12 * 3600
#: How far past a sign-in's length a cookie's end may lie: another replica's clock a little ahead.
CLOCK_SLACK = 300


def cookie_value(token: bytes, until: int) -> str:
    """What the cookie carries: until when it holds (Unix seconds), and an HMAC of that keyed
    by the token, so that the server holds it to its end; useless as a bearer token."""
    return f"{until}.{_mac(token, until)}"


def _mac(token: bytes, until: int) -> str:
    return hmac.new(token, b"trio_routines status page v2 %d" % until, hashlib.sha256).hexdigest()


def has_cookie(scope: Scope, token: bytes, now: float) -> bool:
    """Whether the request carries a page's cookie for ``token`` that holds at ``now`` (Unix
    seconds; constant-time compare)."""
    found = False
    for header in headers(scope, b"cookie"):
        for pair in header.split(b";"):
            name, _, value = pair.strip().partition(b"=")
            if name == COOKIE.encode("ascii"):
                found |= _holds(value.strip(), token, now)
    return found


def _holds(value: bytes, token: bytes, now: float) -> bool:
    """Whether ``value`` is a cookie of ``token`` whose end is after ``now`` and no further
    than a sign-in's length (and another replica's clock a little ahead) from it."""
    until, dot, mac = value.partition(b".")
    if not dot or not until.isdigit() or len(until) > 12:  # (ASCII digits only)
        return False
    end = int(until)
    good = hmac.compare_digest(mac, _mac(token, end).encode("ascii"))
    return good and now < end <= now + SIGNED_IN + CLOCK_SLACK


def set_cookie(base: str, value: str, max_age: int, scope: Scope) -> tuple[str, str]:
    secure = "; Secure" if scope.get("scheme") == "https" else ""
    return (
        "set-cookie",
        f"{COOKIE}={value}; Path={base}; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}",
    )
