"""A state as messages and logs show it: every credential libpq would read in it masked.

Theory of operation. libpq takes a password from three places in a connection string: the
user-info of a URL (``postgresql://user:secret@host/db``), a URL query parameter
(``?password=secret``, its name possibly percent-encoded: ``?pass%77ord=secret``) and a
``key=value`` string (``host=db password='se cret'``); ``sslpassword`` (a client key's
passphrase) and ``oauth_client_secret`` the same ways. :func:`shown_state` masks each as
``***``, and errs on the side of masking: a URL's user-info is read up to the last ``@``
before its path (libpq stops at the first, so a password with a raw ``@`` is still masked
whole), key names are compared without case, and a query piece without ``=`` (the rest of a
password whose ``&`` was not encoded) is masked too. :func:`shown_message` does the same for
a message quoting pieces of a state (libpq's parse errors quote the token they stumble on).
Only what the shown state shows may appear in a message about it. A URL of any other scheme is
masked as a PostgreSQL URL is: it is shown only to be refused, perhaps a database's URL mistyped.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

__all__ = ["CREDENTIAL_KEYS", "shown_message", "shown_state"]

CREDENTIAL_KEYS = frozenset({"password", "sslpassword", "oauth_client_secret"})
MASK = "***"
# Credentials this short are masked in a message only where it quotes them: replacing every
# "a" would shred the message, and a password that short is no secret anyway.
MIN_UNQUOTED = 4

# Any URL, not only libpq's: a mistyped scheme is refused with the state shown (stores/__init__).
_SCHEME = re.compile(r"(?i)^[a-z][a-z0-9+.-]*://")
# libpq's key=value syntax: a key, "=" with optional blanks, then a value either quoted
# (backslash escapes; an unterminated quote runs to the end) or up to the next blank.
_PAIR = re.compile(
    r"(?<!\S)(?P<key>[^\s=]+)\s*=\s*(?P<value>'(?:\\.?|[^'\\])*'?|(?:\\.?|[^\s\\])*)", re.S
)
_QUOTED = re.compile(r'"([^"]*)"')


def shown_state(state: str) -> str:
    """``state`` (a path, a URL or a ``key=value`` string) with every credential masked."""
    return _masked(state)[0]


def shown_message(message: str, state: str) -> str:
    """A message about ``state`` showing nothing of a credential in it.

    Every credential of ``state`` is masked, and so is every ``"quoted"`` piece that the
    shown state does not show (a parse error quoting part of a password).
    """
    shown, secrets = _masked(state)
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= MIN_UNQUOTED:
            message = message.replace(secret, MASK)

    def quoted(match: re.Match[str]) -> str:
        piece = match.group(1)
        return match.group() if piece in shown else f'"{MASK}"'

    return _QUOTED.sub(quoted, message)


def _masked(state: str) -> tuple[str, set[str]]:
    """``state`` masked, and the credentials masked in it (raw and decoded)."""
    secrets: set[str] = set()
    scheme = _SCHEME.match(state)
    if scheme is None:
        return _masked_pairs(state, secrets), secrets
    head, rest = state[: scheme.end()], state[scheme.end() :]
    authority = rest.split("/", 1)[0]
    if "@" not in authority:  # a password with a raw "/": its user-info runs to the last "@"
        authority = rest.split("?", 1)[0]  # before the query, masked whole all the same
    user_end = authority.rfind("@")
    if user_end >= 0:
        user, colon, password = authority[:user_end].partition(":")
        if colon:
            secrets.update(_forms(password))
            head += f"{user}:{MASK}@"
        else:  # libpq reads "host?password=x@y" as a user name: mask its query all the same
            head += _masked_query(user, secrets) + "@"
        rest = rest[user_end + 1 :]
    return head + _masked_query(rest, secrets), secrets


def _masked_query(text: str, secrets: set[str]) -> str:
    """``text`` (what follows a URL's host) with its query's credentials masked."""
    path, question, query = text.partition("?")
    if not question:
        return path
    pieces = []
    for piece in query.split("&"):
        key, equals, value = piece.partition("=")
        if piece and (not equals or unquote(key).strip().lower() in CREDENTIAL_KEYS):
            secrets.update(_forms(value if equals else piece))
            piece = f"{key}={MASK}" if equals else MASK
        pieces.append(piece)
    return path + "?" + "&".join(pieces)


def _masked_pairs(text: str, secrets: set[str]) -> str:
    def pair(match: re.Match[str]) -> str:
        if match.group("key").lower() not in CREDENTIAL_KEYS:
            return match.group()
        value = match.group("value")
        secrets.update(_forms(value) | _forms(_unquoted(value)))
        start, end = match.span("value")
        return match.group()[: start - match.start()] + MASK + match.group()[end - match.start() :]

    masked = _PAIR.sub(pair, text)
    return masked


def _unquoted(value: str) -> str:
    """A ``key=value`` string's value as libpq reads it: quotes and backslashes undone."""
    quoted = value.startswith("'")
    out = []
    index = 1 if quoted else 0
    while index < len(value):
        char = value[index]
        if char == "\\":
            index += 1
            out.append(value[index : index + 1])
        elif quoted and char == "'":
            break
        else:
            out.append(char)
        index += 1
    return "".join(out)


def _forms(value: str) -> set[str]:
    return {value, unquote(value)} - {""}
