"""The usage ledger in the state directory (:mod:`trio_routines.ledger`): a file per key.

    <root>/schedule/usage/<kind>-<digest>   {"kind", "name", "entries": [[minute, currency,
                                             in, out, cost], ...]}, by minute
    <root>/schedule/usage.lock              ours: serializes ledger writers across processes

A key is a routine's name or a session, which may be any text: the file is named by the
SHA-256 of it (``<digest>``, 40 hex digits), and the file names its key again, so that a file
found under the wrong name (planted, or copied) reads as an empty ledger with a warning, as one
that is not ours (a link, a FIFO, too large, not JSON) does, and an entry that cannot be read
is left out; the next write keeps such a file aside (``<kind>-<digest>.corrupt-<instant>-<hex>``,
linked, a link as a link) before it replaces it: what it held is never lost unseen. A budget
counts what it can read: from the damage on, only the usage written since. A write reads the
file, adds the usage to its minute, drops what is older than
:data:`~trio_routines.ledger.LEDGER_SPAN`, and writes the result to a temp file (fsynced)
renamed into place (the directory fsynced), all under an exclusive ``flock`` of
``usage.lock`` taken with a bound: two processes never lose each other's usage. Bounded: at
most one entry per minute of the span per currency.
"""

from __future__ import annotations

import hashlib
import logging
import os
from datetime import datetime
from pathlib import Path

from ...agent import Usage
from ...converter import dumps, loads
from ...errors import StateFault
from ...ledger import Entry, Kind, Spent, add_entry, entry_from_json, entry_to_json, spent_since
from ..safefile import Refused, describe, fsync, link_aside, open_dirs, read_file, replace_file
from .gaps import locked_schedule

log = logging.getLogger("trio_routines")

#: A week of minutes, a few currencies, some 60 bytes an entry: anything larger is not ours.
MAX_LEDGER_BYTES = 8 * 1024 * 1024
LOCK_SECONDS = 10.0


def file_name(kind: Kind, name: str) -> str:
    digest = hashlib.sha256(name.encode("utf-8", errors="surrogatepass")).hexdigest()[:40]
    return f"{kind}-{digest}"


def _read(directory: int, kind: Kind, name: str, where: Path) -> list[Entry]:
    return _read_whole(directory, kind, name, where)[0]


def _read_whole(directory: int, kind: Kind, name: str, where: Path) -> tuple[list[Entry], bool]:
    """The entries, and whether the file held anything else (damage: not all of it was read,
    so a write keeps it aside first)."""
    path = where / file_name(kind, name)
    try:
        data = read_file(directory, path.name, path, MAX_LEDGER_BYTES)
    except FileNotFoundError:
        return [], False
    except Refused as exc:
        log.warning("ignoring the usage ledger %s: %s", path, exc)
        return [], True
    try:
        raw = loads(data.decode("utf-8", errors="surrogatepass"))  # as written
    except (UnicodeDecodeError, ValueError):
        raw = None
    if not isinstance(raw, dict) or not isinstance(raw.get("entries"), list):
        log.warning("ignoring the usage ledger %s: not a ledger", path)
        return [], True
    if raw.get("kind") != kind or raw.get("name") != name:
        log.warning("ignoring the usage ledger %s: it is another %s's", path, kind)
        return [], True
    entries = [entry_from_json(item) for item in raw["entries"]]
    kept = [entry for entry in entries if entry is not None]
    if len(kept) != len(entries):
        log.warning("ignoring %d unreadable entries of %s", len(entries) - len(kept), path)
    return kept, len(kept) != len(entries)


def _keep_aside(directory: int, name: str, where: Path) -> None:
    """Link the damaged ledger ``name`` aside (the entry itself, a link as a link) before a
    write replaces it: what it held is kept for a person to read."""
    log.warning(
        "kept the damaged usage ledger %s as %s", where / name, link_aside(directory, name, where)
    )


def spent_since_sync(root: Path, kind: Kind, name: str, since: datetime) -> Spent:
    """What the turns of ``name`` spent from ``since`` on."""
    try:
        directory = open_dirs(root, ("schedule", "usage"))
    except FileNotFoundError:
        return Spent()
    except OSError as exc:
        raise StateFault(f"the usage of {kind} {name!r} is unreadable: {describe(exc)}") from None
    try:
        return spent_since(_read(directory, kind, name, root / "schedule" / "usage"), since)
    except OSError as exc:
        raise StateFault(f"the usage of {kind} {name!r} is unreadable: {describe(exc)}") from None
    finally:
        os.close(directory)


def record_usage_sync(root: Path, kind: Kind, name: str, when: datetime, usage: Usage) -> None:
    """Add ``usage``, spent at ``when``, to the ledger of ``name``; durable when it returns.
    A ledger that held anything it could not read is kept aside first (``.corrupt-…``)."""
    where = root / "schedule" / "usage"
    what = f"could not record the usage of {kind} {name!r}"
    try:
        with locked_schedule(root, "usage.lock", what, LOCK_SECONDS):
            directory = open_dirs(root, ("schedule", "usage"), create=True)
            try:
                found, damaged = _read_whole(directory, kind, name, where)
                if damaged:
                    _keep_aside(directory, file_name(kind, name), where)
                entries = add_entry(found, when, usage)
                text = dumps(
                    {"kind": kind, "name": name, "entries": [entry_to_json(e) for e in entries]}
                )
                data = text.encode("utf-8", errors="surrogatepass")
                replace_file(directory, file_name(kind, name), where, data, ".usage-")
                fsync(directory, where)
            finally:
                os.close(directory)
    except StateFault:
        raise  # the lock's, which says what and where already
    except OSError as exc:
        raise StateFault(
            f"could not record the usage of {kind} {name!r}: {describe(exc)}"
        ) from None
