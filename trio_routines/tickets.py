"""Turn tickets: how an agent in another process calls the wake-up tools as its turn.

An agent in the scheduler's process calls :func:`~trio_routines.tools.call_tool` inside its
turn, and what it adds is the turn's: its origin is recorded, and the rate and the chain
depth apply (:mod:`trio_routines.wakelimits`). An agent in another process has no turn of
ours around its calls. So every turn it is asked for carries a *ticket* -- the HTTP agent's
request body as ``turn``, a ``cmd:`` command's environment as ``TRIO_ROUTINES_TURN`` -- and
it hands the ticket back with each tool call (``POST /tools/call``): the call then runs as
the turn's, with the same texts and the same limits as ``call_tool`` inside the turn.

A ticket is the turn's :class:`~trio_routines.FireContext` (its kind, session, routine,
slot, wake-up and that wake-up's origin) and an end, signed with HMAC-SHA256. Any replica
holding the same key honours it, whichever replica ran the turn; the key is this process's
own random one unless :func:`share_key` was given a secret (``serve`` gives it
``TRIO_ROUTINES_TOKEN``, which every replica behind one address shares). A ticket holds for
:data:`TICKET_LIFETIME` after it was made: an agent may still act for its turn once the
turn has answered (a queue, a retry), and a ticket kept longer is refused.

What a ticket can do: a tool call needs the API's own authorization first, and a caller
that has it may add wake-ups without any ticket (origin ``http``, never refused by the rate
or the depth). A ticket only makes a call the turn's: limited as the turn, recorded as asked
by it. The signature keeps a caller from naming a turn that never ran (a routine's cron
fire it never had, a shallower chain) in what the history and the listings show.
"""

from __future__ import annotations

import base64
import binascii
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

__all__ = ["TICKET_LIFETIME", "BadTicket", "make_ticket", "read_ticket", "share_key"]

#: How long a ticket is honoured after it was made.
TICKET_LIFETIME = timedelta(hours=24)
#: The longest ticket read: far past any turn's (a session and a routine name of the most
#: characters each, escaped), short of a body a client could fill.
MAX_TICKET = 16_384
_VERSION = 1
_DOMAIN = b"trio_routines turn ticket v1"


class BadTicket(ValueError):
    """A ticket that is not one of ours, is damaged, or has expired (one line, for a 403)."""


def _derived(secret: bytes) -> bytes:
    # A key of its own, not the secret itself: a ticket's signature says nothing of the token.
    return hmac.new(secret, _DOMAIN, hashlib.sha256).digest()


_key = _derived(secrets.token_bytes(32))


def share_key(secret: str | bytes) -> None:
    """Sign and check tickets with a key made from ``secret`` (text or bytes, not empty), so
    that every process given the same secret honours the others' tickets: replicas behind
    one address. Without it each process has a random key of its own."""
    raw = secret.encode("utf-8", "surrogatepass") if isinstance(secret, str) else secret
    if not isinstance(raw, bytes) or not raw:
        raise ValueError("a ticket secret must be non-empty text or bytes")
    global _key
    _key = _derived(raw)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    padded = text + "=" * (-len(text) % 4)
    return base64.urlsafe_b64decode(padded.encode("ascii"))


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
    payload = json.dumps(fields, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    signature = hmac.new(_key, payload, hashlib.sha256).digest()
    return f"{_b64(payload)}.{_b64(signature)}"


_DAMAGED = "the turn ticket is damaged or not one of this scheduler's"


def read_ticket(ticket: object, now: float | None = None) -> FireContext:
    """The turn a ticket stands for; :class:`BadTicket` for anything else: not text, too
    long, a signature not made with this process's key, or past its end at ``now``."""
    if not isinstance(ticket, str) or not ticket:
        raise BadTicket("the turn ticket must be the text the turn was given")
    if len(ticket) > MAX_TICKET:
        raise BadTicket(f"the turn ticket is longer than any of ours ({MAX_TICKET} characters)")
    head, dot, tail = ticket.rpartition(".")
    if not dot or not ticket.isascii():
        raise BadTicket(_DAMAGED)
    try:
        payload, signature = _unb64(head), _unb64(tail)
    except (binascii.Error, ValueError):
        raise BadTicket(_DAMAGED) from None
    if not hmac.compare_digest(hmac.new(_key, payload, hashlib.sha256).digest(), signature):
        raise BadTicket(
            f"{_DAMAGED} (a replica with another key made it: give every replica the same "
            "TRIO_ROUTINES_TOKEN)"
        )
    fire, ends = _fields(payload)
    at = time.time() if now is None else now
    if ends <= datetime.fromtimestamp(at, UTC):
        raise BadTicket(
            f"the turn ticket ended at {format_iso(ends)} (a ticket holds for "
            f"{TICKET_LIFETIME.total_seconds() / 3600:g} hours after its turn began)"
        )
    return fire


def _fields(payload: bytes) -> tuple[FireContext, datetime]:
    """A signed payload's turn and end. Ours, so malformed only across versions."""
    try:
        fields = json.loads(payload)
        if fields.get("v") != _VERSION:
            raise ValueError("another version")
        slot = fields.get("slot")
        origin = fields.get("origin")
        fire = FireContext(
            fields["kind"],
            fields["session"],
            routine=fields.get("routine"),
            slot=None if slot is None else parse_iso(slot),
            wakeup=fields.get("wakeup"),
            origin=None if origin is None else origin_from_json(origin),
        )
        ends = parse_iso(fields["ends"])
        if not isinstance(fire.session, str) or ends is None:
            raise ValueError("no session or end")
    except (ValueError, TypeError, KeyError, AttributeError):
        raise BadTicket(_DAMAGED) from None
    return fire, ends
