"""Who may talk to a server without a token: the one check of ``Host`` and ``Origin``.

Without a token the surface trusts the loopback interface, and binding 127.0.0.1 is not enough
for that: a web page whose domain re-resolves to 127.0.0.1 (DNS rebinding) makes the browser
send its requests to our port, with the attacker's name in ``Host``. So, without a token, a
request must name a loopback host (``localhost``, ``127.0.0.1``, ``[::1]``, with or without a
port) and a state-changing request that a browser marks with an ``Origin`` must come from a
loopback origin too (a cross-origin form or ``fetch`` from any other site is refused). With a
token, the token is the proof and neither header is checked: the server may then be reached by
any name.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from .wire import Refusal, Scope, one_header

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def is_loopback(host: str) -> bool:
    """Whether a bare host (no port; brackets allowed around IPv6) is a loopback name.

    Brackets hold an IPv6 address and nothing else: ``[localhost]`` and ``[127.0.0.1]`` are
    no host names at all, and are refused like any name that is not loopback."""
    bare = host.strip()
    if bare.startswith("[") and bare.endswith("]"):
        try:
            return ipaddress.IPv6Address(bare[1:-1]).is_loopback
        except ValueError:
            return False
    if bare.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def _host_is_loopback(value: str) -> bool:
    """``Host: <host>[:<port>]`` names loopback (an IPv6 literal needs its brackets)."""
    host, port = value, ""
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return False
        host, rest = value[: end + 1], value[end + 1 :]
        if rest and not rest.startswith(":"):
            return False
        port = rest[1:]
    elif ":" in value:
        host, _, port = value.rpartition(":")
        if ":" in host:  # a bare IPv6 literal is not a valid Host header
            return False
    if port and not (port.isascii() and port.isdigit()):
        return False
    return bool(host) and is_loopback(host)


def _origin_is_loopback(value: str) -> bool:
    try:
        parts = urlsplit(value.strip())
        host = parts.hostname
        parts.port  # noqa: B018 -- raises ValueError for a port that is not a number
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and host is not None and is_loopback(host)


def check_origin(scope: Scope, method: str) -> None:
    """Refuse a request a browser could have been tricked into sending (no token configured).

    ``Host`` not loopback: 421 (every route, so a rebound page cannot read either).
    ``Origin`` present and not loopback on a state-changing method: 403.
    A request without ``Host`` (HTTP/1.0) is no browser's and passes.
    """
    host = one_header(scope, b"host")
    if host is not None and not _host_is_loopback(host.strip()):
        raise Refusal(
            421,
            "this server answers only to localhost, 127.0.0.1 or [::1] without a token — "
            "set TRIO_ROUTINES_TOKEN to reach it by another name",
        )
    if method in STATE_CHANGING:
        origin = one_header(scope, b"origin")
        if origin is not None and not _origin_is_loopback(origin):
            raise Refusal(403, "cross-origin requests are refused: call from a loopback origin")
