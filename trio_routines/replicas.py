"""Replicas: who fires a slot, and how every member of a store sees who is alive.

Theory of operation
-------------------

Several schedulers (replicas) may share one store. A claim already makes each slot fire at
most once; what a replica must also show the others is what it is *doing*, in a form that
dies with it. Each store keeps **holds**: named exclusive locks that the operating system or
the database server releases by itself when the holding process dies (an ``fcntl`` range lock
on one file of the state directory, which the kernel drops with the process; a
session-level advisory lock on a PostgreSQL connection, which the server drops with the
connection). Never a timeout guessed from wall clocks.

A replica holds, for as long as it runs, the hold of its **id**; and for each fire under way
the hold of its **claim** (routine and slot: taken before the claim is made, let go after its
settle; where a written claim names its replica, as in both of ours, it is held in the store
only until the claim is written -- on PostgreSQL, never -- and in this process after, the
claim itself being held while its replica lives) and of its **session** (one
turn per session across every replica). A claim naming a replica's own id is judged by that
replica from memory: one it does not hold was made by an earlier process under the same id.
So:

* a claim without an outcome whose holder is gone (its replica's hold, or its claim hold,
  free) is dead -- its holder stopped mid-turn -- and is recorded ``interrupted``; one whose
  holder lives is running, and is left alone;
* a fire whose claim hold is taken elsewhere is another fire's: a duplicate, nothing to do;
* a turn whose session hold is taken elsewhere is busy, exactly as inside one process.

This module is the pure part: the replica's id, the keys of holds, the record a replica
publishes about itself. The holds themselves live with each store.
"""

from __future__ import annotations

import functools
import hashlib
import os
import socket
from datetime import datetime

import attrs

from .errors import InvalidOption
from .instants import format_iso, slot_name
from .text import shown

REPLICA_LIMIT = 128  # characters of a replica id
REPLICA_ENV = "TRIO_ROUTINES_REPLICA"


def default_replica() -> str:
    """``host:pid`` -- stable for the life of the process, and says where to look."""
    return f"{socket.gethostname() or 'localhost'}:{os.getpid()}"


def replica_problem(replica: object) -> str | None:
    """Why ``replica`` cannot be a replica id, or None when it can."""
    if not isinstance(replica, str):
        return f"a replica id must be a string, not {type(replica).__name__}"
    if not replica or len(replica) > REPLICA_LIMIT:
        return f"a replica id must be 1 to {REPLICA_LIMIT} characters"
    try:
        replica.encode("utf-8")
    except UnicodeEncodeError:
        return "a replica id must be valid Unicode text"
    if shown(replica) != replica:
        return f"a replica id must be one line of visible text: {shown(replica)[:64]!r}"
    return None


def check_replica(replica: str) -> str:
    """``replica`` unchanged, or a one-line :class:`~trio_routines.errors.InvalidOption`."""
    problem = replica_problem(replica)
    if problem is not None:
        raise InvalidOption(problem)
    return replica


def stored_replica(value: object) -> str | None:
    """A replica id read back from a store: kept when it could have been written, else None."""
    if isinstance(value, str) and replica_problem(value) is None:
        return value
    return None


def key(kind: str, *parts: str) -> int:
    """A hold's key: 63 bits of a hash of its kind and parts, the same in every process.

    Non-negative, so that it is both a PostgreSQL ``bigint`` and a file offset. Two keys
    collide with odds of one in 2**63 per pair: a collision only makes two unrelated holds
    exclude each other.
    """
    return _key_of("\x00".join((kind, *parts)))


def _key_of(text: str) -> int:
    """The key of a hold's whole text: its kind and parts, joined by NUL."""
    hashed = _KEYED.copy()  # the parameters are set once: a copy, not a call with keywords
    hashed.update(text.encode("utf-8", "surrogatepass"))
    return int.from_bytes(hashed.digest(), "big") >> 1


#: BLAKE2b with the keys' digest size and personalization, nothing hashed yet.
_KEYED = hashlib.blake2b(digest_size=8, person=b"trio-routines")


def replica_key(replica: str, namespace: str = "") -> int:
    """The key of a replica's own hold; ``namespace`` sets apart stores whose holds share one
    lock space (PostgreSQL's advisory locks are per database, a store per schema)."""
    return key("replica", namespace, replica) if namespace else key("replica", replica)


@functools.lru_cache(maxsize=1 << 14)  # asked at every turn, of the same few sessions
def session_key(session: str) -> int:
    """A session's hold key, asked for at every turn: remembered for the busiest sessions."""
    return key("session", session)


def claim_key(routine: str, slot: datetime) -> int:
    """``key("claim", routine, slot_name(slot))``, asked for at every fire: its text made in
    one step rather than joined from a tuple of the parts."""
    return _key_of(f"claim\x00{routine}\x00{slot_name(slot)}")


@attrs.frozen
class ReplicaInfo:
    """What one replica publishes about itself, and what any member reads back."""

    id: str
    version: str
    host: str
    pid: int
    started: datetime
    last_seen: datetime
    in_flight: int = 0
    alive: bool = True


def replica_json(info: ReplicaInfo, *, liveness: bool = True) -> dict[str, object]:
    """A replica as the JSON outputs show it; without ``liveness``, as its file holds it."""
    record: dict[str, object] = {
        "id": info.id,
        "version": info.version,
        "host": info.host,
        "pid": info.pid,
        "started": format_iso(info.started),
        "lastSeen": format_iso(info.last_seen),
        "inFlight": info.in_flight,
    }
    if liveness:
        record["alive"] = info.alive
    return record
