"""Turn tickets: how an agent in another process calls the wake-up tools as its turn.

An agent in the scheduler's process calls :func:`~trio_routines.tools.call_tool` inside its
turn, and what it adds is the turn's: its origin is recorded, and the rate and the chain
depth apply (:mod:`trio_routines.wakelimits`). An agent in another process has no turn of
ours around its calls. So every turn it is asked for carries a *ticket* -- the HTTP agent's
request body as ``turn``, a ``cmd:`` command's environment as ``TRIO_ROUTINES_TURN`` -- and
it hands the ticket back with each tool call (``POST /tools/call``, in its ``Authorization:
Ticket <ticket>`` header): the call then runs as the turn's, with the same texts and the same
limits as ``call_tool`` inside the turn.

A ticket is the turn's :class:`~trio_routines.FireContext` (its kind, session, routine,
slot, wake-up and that wake-up's origin) and an end, signed with HMAC-SHA256. Any replica
holding the same key honours it, whichever replica ran the turn; the key is this process's
own random one unless :func:`share_key` was given a secret (the command line gives it
``TRIO_ROUTINES_TOKEN``, which every replica behind one address shares, and so does
:func:`~trio_routines.serve` its ``token``). One key serves the whole process.

A ticket is a credential of its own, narrower than the API's token: the wake-up tools of one
session, called as one turn, limited as that turn. The signature keeps a holder from naming a
turn that never ran, another session, or a shallower chain than its turn's. A ticket holds
for :data:`TICKET_LIFETIME` after its turn began, whether or not the turn still runs (a
replica that did not run it cannot know): code that keeps a ticket may use it from a later
turn of the same session within that hour, and what it adds then counts as the kept
ticket's turn, no deeper. The rate, the cap of pending wake-ups per session and the
lifetime of recurring ones bound it still.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from .context import FireContext
from .converter import origin_from_json, origin_to_json
from .instants import format_iso, parse_iso
from .names import is_unicode

__all__ = ["DAMAGED", "TICKET_LIFETIME", "BadTicket", "make_ticket", "read_ticket", "share_key"]

#: How long a ticket is honoured after it was made (its turn's start).
TICKET_LIFETIME = timedelta(hours=1)
#: The longest ticket read: a header's worth (the HTTP server reads at most 16 KiB of them),
#: far past a turn's whose session and routine names take a few KiB of UTF-8 each.
MAX_TICKET = 12_288
_VERSION = 1
_DOMAIN = b"trio_routines turn ticket v1"


class BadTicket(ValueError):
    """A ticket that is not one of ours, is damaged, or has expired (one line, for a 403)."""


def _derived(secret: bytes) -> bytes:
    # A key of its own, not the secret itself: a ticket's signature says nothing of the token.
    return hmac.new(secret, _DOMAIN, hashlib.sha256).digest()


_key = _derived(secrets.token_bytes(32))


def _secret_bytes(secret: str) -> bytes:
    """The bytes a text secret was read from: an environment's undecodable bytes come as
    lone surrogates (U+DC80..U+DCFF), each one byte again; any other lone surrogate as itself."""
    try:
        return secret.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        return secret.encode("utf-8", "surrogatepass")


def share_key(secret: str | bytes) -> None:
    """Sign and check tickets with a key made from ``secret`` (text or bytes, not empty), so
    that every process given the same secret honours the others' tickets: replicas behind
    one address. Without it each process has a random key of its own."""
    raw = _secret_bytes(secret) if isinstance(secret, str) else secret
    if not isinstance(raw, bytes) or not raw:
        raise ValueError("a ticket secret must be non-empty text or bytes")
    global _key
    _key = _derived(raw)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    """The bytes of ``text`` when it is the very text :func:`_b64` makes of them, so that one
    ticket has one spelling: a character outside the alphabet (which the decoder would pass
    over), padding, or stray bits in the last character are a ``ValueError``."""
    padded = text + "=" * (-len(text) % 4)
    data = base64.b64decode(padded.encode("ascii"), altchars=b"-_")
    if _b64(data) != text:
        raise ValueError(text)
    return data


def make_ticket(fire: FireContext, now: float | None = None) -> str:
    """The ticket of the turn ``fire``, honoured for :data:`TICKET_LIFETIME` from ``now``
    (seconds since the epoch; the wall clock when omitted)."""
    made = time.time() if now is None else now
    ends = datetime.fromtimestamp(made, UTC) + TICKET_LIFETIME
    fields: dict[str, Any] = {"v": _VERSION, "kind": fire.kind, "session": fire.session}
    if fire.routine is not None:
        fields["routine"] = fire.routine
    if fire.slot is not None:
        fields["slot"] = format_iso(fire.slot)
    if fire.wakeup is not None:
        fields["wakeup"] = fire.wakeup
    if fire.origin is not None:
        fields["origin"] = origin_to_json(fire.origin)
    fields["ends"] = format_iso(ends)
    # UTF-8, not escapes: a name of emoji would take twelve bytes a character (surrogatepass:
    # a name read from undecodable bytes holds lone surrogates, and round-trips).
    text = json.dumps(fields, separators=(",", ":"), ensure_ascii=False)
    payload = text.encode("utf-8", "surrogatepass")
    signature = hmac.new(_key, payload, hashlib.sha256).digest()
    return f"{_b64(payload)}.{_b64(signature)}"


#: What a ticket not signed by this process's key, or not readable, is told.
DAMAGED = "the turn ticket is damaged or not one of this scheduler's"


def read_ticket(ticket: object, now: float | None = None) -> FireContext:
    """The turn a ticket stands for; :class:`BadTicket` for anything else: not text, too
    long, a signature not made with this process's key, or past its end at ``now``."""
    if not isinstance(ticket, str) or not ticket:
        raise BadTicket("the turn ticket must be the text the turn was given")
    if len(ticket) > MAX_TICKET:
        raise BadTicket(
            f"the turn ticket is longer than {MAX_TICKET} characters, more than a header "
            "carries (a turn whose session and routine names take more than a few KiB has "
            "no ticket that can be sent back)"
        )
    head, dot, tail = ticket.partition(".")
    if not dot:
        raise BadTicket(DAMAGED)
    try:
        payload, signature = _unb64(head), _unb64(tail)
    except ValueError:  # binascii.Error; UnicodeEncodeError for a character beyond ASCII
        raise BadTicket(DAMAGED) from None
    if not hmac.compare_digest(hmac.new(_key, payload, hashlib.sha256).digest(), signature):
        raise BadTicket(
            f"{DAMAGED}: its signature is not this process's (it was changed, or made by a "
            "process given another TRIO_ROUTINES_TOKEN, or none: replicas share one)"
        )
    fire, ends = _fields(payload)
    at = time.time() if now is None else now
    if ends <= datetime.fromtimestamp(at, UTC):
        raise BadTicket(
            f"the turn ticket ended at {format_iso(ends)} (a ticket holds for "
            f"{TICKET_LIFETIME.total_seconds() / 60:g} minutes after its turn began)"
        )
    return fire


def _fields(payload: bytes) -> tuple[FireContext, datetime]:
    """A signed payload's turn and end. Ours, so malformed only across versions."""
    try:
        fields = json.loads(payload.decode("utf-8", "surrogatepass"))
        if fields.get("v") != _VERSION:
            raise ValueError(fields)  # another version's
        fire = FireContext(
            fields["kind"],
            fields["session"],
            routine=fields.get("routine"),
            slot=parse_iso(fields.get("slot")),  # None for none (a slot is not optional text)
            wakeup=fields.get("wakeup"),
            origin=origin_from_json(fields.get("origin")),
        )
        ends = parse_iso(fields["ends"])
        if not isinstance(fire.session, str) or not fire.session or ends is None:
            raise ValueError(fields)
        texts = (fire.session, fire.routine, fire.wakeup)
        if not all(text is None or (isinstance(text, str) and is_unicode(text)) for text in texts):
            raise ValueError(fields)  # no turn of ours had it: no store could hold it
        if fire.origin is None and fields.get("origin") is not None:
            # An origin another release wrote and this one cannot read: read as none, the
            # turn's chain would start again at 0.
            raise ValueError(fields)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        raise BadTicket(DAMAGED) from None
    return fire, ends
