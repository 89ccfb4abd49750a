"""Pinned: the status page's sign-in cookie (http/signin.py), called directly: what it
carries, which requests carry one that holds, and the header that sets it."""

from __future__ import annotations

import hashlib
import hmac

from trio_routines.http.signin import (
    CLOCK_SLACK,
    COOKIE,
    SIGNED_IN,
    cookie_value,
    has_cookie,
    set_cookie,
)

TOKEN = b"page-token"
NOW = 1_800_000_000  # Unix seconds
UNTIL = NOW + SIGNED_IN


def _scope(*cookies: bytes) -> dict[str, object]:
    return {"headers": [(b"cookie", c) for c in cookies]}


def _good(until: int = UNTIL, token: bytes = TOKEN) -> bytes:
    return f"{COOKIE}={cookie_value(token, until)}".encode()


def test_the_cookie_carries_its_end_and_an_hmac_of_it_keyed_by_the_token() -> None:
    mac = hmac.new(TOKEN, b"trio_routines status page v2 %d" % UNTIL, hashlib.sha256)
    assert cookie_value(TOKEN, UNTIL) == f"{UNTIL}.{mac.hexdigest()}"
    assert SIGNED_IN == 12 * 3600


def test_the_cookie_is_found_among_others_in_any_header() -> None:
    good = _good()
    assert has_cookie(_scope(b"a=1; " + good + b" ; b=2"), TOKEN, NOW)
    assert has_cookie(_scope(b"a=1", b"  " + good), TOKEN, NOW)
    assert has_cookie(_scope(good, b"x=" + cookie_value(TOKEN, UNTIL).encode()), TOKEN, NOW)
    assert not has_cookie(_scope(b"a=1"), TOKEN, NOW)
    assert not has_cookie(_scope(), TOKEN, NOW)
    assert not has_cookie(_scope(good + b"0"), TOKEN, NOW)
    assert not has_cookie(_scope(good.upper()), TOKEN, NOW)
    assert not has_cookie(_scope(b"x" + good), TOKEN, NOW)
    assert not has_cookie(_scope(good), b"another token", NOW)


def test_a_good_cookie_is_not_undone_by_a_bad_one_of_the_same_name() -> None:
    good = _good()
    assert has_cookie(_scope(b"a=1;" + good + b";" + COOKIE.encode() + b"=bad"), TOKEN, NOW)
    assert has_cookie(_scope(b"a=1;" + good), TOKEN, NOW)


def test_a_cookie_holds_until_its_end_and_no_further_ahead_than_a_sign_in() -> None:
    # The server keeps to its end: a cookie copied out of a browser no longer served for as
    # long as the token stayed the same.
    good = _scope(_good())
    assert has_cookie(good, TOKEN, UNTIL - 1)
    assert not has_cookie(good, TOKEN, UNTIL)
    assert not has_cookie(good, TOKEN, UNTIL + 3600)
    # An end further ahead than a sign-in lasts (and another replica's clock a little ahead).
    ahead = UNTIL + CLOCK_SLACK
    assert has_cookie(_scope(_good(ahead)), TOKEN, NOW)
    assert not has_cookie(_scope(_good(ahead + 1)), TOKEN, NOW)
    assert CLOCK_SLACK == 300


def test_a_cookie_whose_end_was_changed_or_is_no_number_is_refused() -> None:
    mac = cookie_value(TOKEN, UNTIL).partition(".")[2]
    for value in (
        f"{UNTIL + 1}.{mac}",  # a later end under the first one's HMAC
        f"{UNTIL - 1}.{mac}",
        f"{UNTIL}{mac}",  # no dot
        f".{mac}",
        f"+{UNTIL}.{mac}",
        f"{UNTIL}.{mac}.",
        f"{'1' * 13}.{mac}",  # more digits than an instant has
        f"\u0661{UNTIL}.{mac}",  # a digit, but no ASCII one
    ):
        assert not has_cookie(_scope(f"{COOKIE}={value}".encode()), TOKEN, NOW), value
    far = 10**12 - 1  # twelve digits: read, and refused for its end only
    assert not has_cookie(_scope(_good(far)), TOKEN, NOW)
    assert has_cookie(_scope(_good(far)), TOKEN, far - SIGNED_IN)


def test_the_sign_in_cookie_s_attributes() -> None:
    assert set_cookie("/m/", "v", 60, {"scheme": "http"}) == (
        "set-cookie",
        f"{COOKIE}=v; Path=/m/; Max-Age=60; HttpOnly; SameSite=Strict",
    )
    assert set_cookie("/", "", 0, {"scheme": "https"}) == (
        "set-cookie",
        f"{COOKIE}=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict; Secure",
    )
    assert set_cookie("/", "", 0, {})[1].endswith("SameSite=Strict")
