"""Who may talk to a server without a token: the one check of ``Host`` and ``Origin``.

Without a token the surface trusts the loopback interface, and binding 127.0.0.1 is not enough
for that: a web page whose domain re-resolves to 127.0.0.1 (DNS rebinding) makes the browser
send its requests to our port, with the attacker's name in ``Host``. So, without a token, a
request must name a loopback host (``localhost``, ``127.0.0.1``, ``[::1]``, with or without a
port) and a state-changing request that a browser marks with an ``Origin`` must come from a
origin, and the very origin the request names in ``Host`` (its scheme, name and port): a form
or ``fetch`` from any other site is refused, and so is one from another local server's page
(``localhost:3000``, a notebook, a development server), which a browser sends to our port as
readily as a remote site's. With a token, the token is the proof and neither header is
checked: the server may then be reached by any name.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit

from ..errors import TrioRoutinesError
from ..text import printable_ascii
from .wire import Refusal, Scope, one_header

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
CROSS_ORIGIN = (
    "cross-origin requests are refused: call from this server's own page, or without a browser"
)


def token_problem(token: str, name: str = "the token") -> str | None:
    """Why ``token`` cannot be the surface's bearer token, or None; ``name`` says where it
    came from (``TRIO_ROUTINES_TOKEN`` for the command line). A token is sent in a header
    and typed into the status page's form as it is, so it must be printable ASCII with no
    space: one padded with white space was trimmed from a bearer header and not from the
    form (the API refused everyone, while a form of spaces logged in), and a control
    character or a character outside ASCII cannot be sent in a header at all."""
    if not isinstance(token, str):
        return f"{name} must be text, not {type(token).__name__}"
    if printable_ascii(token):
        return None
    return (
        f"{name} has a space, a control character or a character outside ASCII "
        "— use letters, digits and punctuation only, e.g. the output of "
        '`python -c "import secrets; print(secrets.token_urlsafe(32))"`'
    )


class BadToken(TrioRoutinesError, ValueError):
    """Raised by :func:`check_bind` and :func:`~trio_routines.http.make_app` for a token no
    client can send as it is (see :func:`~trio_routines.http.origin.token_problem`)."""


def check_token(token: str | None, name: str = "the token") -> None:
    """Refuse (:class:`BadToken`) a token that is not text, or has a space, a control
    character or a character outside ASCII; an empty one (or None) means none."""
    problem = token_problem(token, name) if token is not None and token != "" else None
    if problem is not None:
        raise BadToken(problem)


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
    if port and not (port.isascii() and port.isdigit() and _is_port(port.lstrip("0"))):
        return False
    return bool(host) and is_loopback(host)


def _is_port(digits: str) -> bool:
    """Whether ``digits`` (no zeros in front) number a port: past 65535 names no socket."""
    return len(digits) <= 5 and int(digits or "0") <= 65535  # int() of 5 digits at most


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(scheme: str, authority: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of ``scheme://authority``, the port filled in; None when it
    is no web origin (another scheme, no host, a port that is not a number)."""
    try:
        parts = urlsplit(f"{scheme}://{authority}")
        host, port = parts.hostname, parts.port  # the port raises ValueError if not a number
    except ValueError:
        return None
    if scheme not in _DEFAULT_PORTS or host is None or parts.path or parts.query:
        return None
    return scheme, host, _DEFAULT_PORTS[scheme] if port is None else port


def _origin_is_ours(value: str, host: str | None, scheme: str) -> bool:
    """``Origin: value`` is a loopback origin, and the one ``Host: host`` names for this
    request's ``scheme`` (any loopback origin for a request without ``Host``)."""
    kind, _, authority = value.strip().partition("://")
    origin = _origin(kind, authority)
    if origin is None or not is_loopback(origin[1]):
        return False
    return host is None or origin == _origin(scheme, host.strip())


def check_origin(scope: Scope, method: str) -> None:
    """Refuse a request a browser could have been tricked into sending (no token configured).

    ``Host`` not loopback: 421 (every route, so a rebound page cannot read either).
    ``Origin`` present on a state-changing method, and not this server's own as ``Host``
    names it (nor loopback, without ``Host``): 403.
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
        if origin is not None and not _origin_is_ours(origin, host, scope.get("scheme", "http")):
            raise Refusal(403, CROSS_ORIGIN)
