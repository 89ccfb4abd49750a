"""Claims: the pure rules every store applies.

A claim is the durable decision "this slot runs here", and afterwards the record of how it
ended. Stores differ in how they keep claims (files, rows); they agree on these rules:

* **stale beats duplicate.** A slot whose name sorts before the newest claim of its routine is
  refused as stale before anything is written, even if its own claim still exists. This keeps
  an old redelivery from firing after its claim was pruned, and turns a wall clock that moved
  backwards into skipped (never repeated) instants.
* **equal is duplicate.** The newest slot asked for again is a duplicate.
* **retention by count.** After a new claim, the oldest claims beyond ``keep`` are pruned; the
  newest is never pruned, so the stale gate keeps working beyond the window.
* **tolerant reading.** A claim's content is read leniently (torn writes and earlier formats
  read as unsettled, stamped at the slot instant), because the slot itself, held by the name,
  is what matters; only the stamp and outcome are recovered from the content.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Collection, Iterator, Sequence
from datetime import datetime

from .converter import loads
from .instants import parse_iso, slot_of
from .records import Fire, Outcome
from .replicas import stored_replica
from .usage import Usage, usage_from_json

KEEP_CLAIMS = 512
#: The longest duration a claim is read with, in milliseconds: the calendar's whole span. A
#: longer one (a hand-edited ``1e308``) reads as none, as a negative one does.
MAX_MS = 315_537_897_600_000

#: The name of a store's spare claim file beside a routine's claims (see the directory store's
#: spares.py): never a claim, and passed over without a word.
SPARE_CLAIM = ".next-claim"
_OUTCOMES = frozenset(o.value for o in Outcome)

log = logging.getLogger("trio_routines")


def is_stale(newest: str | None, wanted: str) -> str | None:
    """``newest``, a routine's newest claim name (None: it has none), when ``wanted`` sorts
    before it (stale), else ``None``."""
    if newest is not None and wanted < newest:
        return newest
    return None


def names_to_prune(taken: Sequence[str], keep: int = KEEP_CLAIMS) -> list[str]:
    """Which of the pre-claim names ``taken`` to delete once one more claim was added.

    Keeps at most ``keep`` claims including the new one; never returns the newest name.
    """
    if keep < 1:
        raise ValueError("keep must be at least 1")
    excess = max(0, len(taken) + 1 - keep)
    return list(taken[:excess])


def claim_gate(
    entries: Collection[str], keep: int = KEEP_CLAIMS
) -> tuple[str | None, list[str], list[str]]:
    """What a claim needs of its routine's directory ``entries``: the newest claim name (None
    when there is none: the stale gate), the names to prune once one more claim is added,
    oldest first -- :func:`claim_names` read by :func:`is_stale` and :func:`names_to_prune` --
    and the foreign names among them (not claims: a store may know some of its own there).

    A directory holding claims only (every one, unless something foreign was put there) is
    judged without a sort or a loop of ours: one check of every name and the newest and oldest
    by ``max`` and ``min``. In the steady state every routine keeps ``keep`` claims and every
    claim lists them all; this was half the Python a claim spent on its listing.
    """
    if keep < 1:
        raise ValueError("keep must be at least 1")
    if not all(map(slot_of, entries)):  # something foreign among them: the general way
        foreign = [entry for entry in entries if slot_of(entry) is None]
        taken = claim_names(entries)
        return (taken[-1] if taken else None), names_to_prune(taken, keep), foreign
    excess = len(entries) + 1 - keep
    if excess <= 0:
        prune = []
    elif excess == 1:  # the steady state: the oldest one goes
        prune = [min(entries)]
    else:
        prune = sorted(entries)[:excess]
    return (max(entries) if entries else None), prune, []  # no ``default=``: no keywords


def claim_names(entries: Collection[str]) -> list[str]:
    """The claim names among directory entries, in slot order; foreign names are dropped."""
    # One comprehension: every claim lists its routine's directory (up to 512 names), and a
    # loop with an append and a branch per name cost twice as much.
    names = [entry for entry in entries if slot_of(entry) is not None]
    if len(names) != len(entries):
        for entry in entries:
            if slot_of(entry) is None and entry != SPARE_CLAIM:
                log.debug("ignoring %s: not a fired-slot claim", entry)
    names.sort()
    return names


def newest_first(entries: Sequence[str]) -> Iterator[str]:
    """The claim names among directory entries, newest first, lazily.

    The newest costs one pass over the names (``max``), not a sort and a check of each:
    reading every routine's newest claim at boot is what this is for. The rest, asked only
    when the newest could not be used (pruned meanwhile), come as :func:`claim_names` has them.
    """
    newest = max(entries, default=None)
    if newest is None:
        return
    if slot_of(newest) is not None:
        yield newest
    for name in reversed(claim_names(entries)):
        if name != newest:
            yield name


def parse_claim(name: str, text: str, where: str) -> Fire:
    """Read one claim's content leniently; never raises for bad content.

    ``name`` is the claim's slot name (it must round-trip), ``where`` the path or row label
    used in log lines.
    """
    return read_claim(name, text, where)[0]


def read_claim(name: str, text: str, where: str) -> tuple[Fire, bool]:
    """:func:`parse_claim`, and whether ``text`` held a claim record at all (False: empty, or
    damaged), which a settle about to write over it asks (one parse for both)."""
    slot = slot_of(name)
    if slot is None:
        raise ValueError(f"{name!r} is not a claim name")
    try:
        record = loads(text)
    except ValueError:  # RecursionError included: converter.loads maps it
        record = None
    if not isinstance(record, dict):
        if text.strip():
            log.debug("claim %s is not a claim record (torn write, or an earlier format)", where)
        return Fire(slot=slot, fired_at=slot), False
    return fire_from_record(slot, record, where), True


#: The most characters of an unknown outcome a warning shows.
SHOWN_OUTCOME = 64


def fire_from_record(slot: datetime, record: dict[str, object], where: str) -> Fire:
    """Recover stamp, outcome, duration, reason, output and usage from a claim's fields, warning
    about oddities."""
    stamp = record.get("firedAt")
    fired_at = parse_iso(stamp) if isinstance(stamp, str) else None
    if fired_at is None:
        log.warning("claim %s carries an unreadable stamp — using the slot instant", where)
        fired_at = slot
    raw_outcome = record.get("outcome")
    outcome: Outcome | None = None
    ms: int | None = None
    error: str | None = None
    output: str | None = None
    usage: Usage | None = None
    unknown: str | None = None
    if isinstance(raw_outcome, str) and raw_outcome in _OUTCOMES:  # (an array is no key)
        outcome = Outcome(raw_outcome)
    elif raw_outcome is not None:
        # Settled by someone (a newer version, an edit): never settled again over it.
        shown = json.dumps(raw_outcome, ensure_ascii=False)
        unknown = shown if len(shown) <= SHOWN_OUTCOME else shown[:SHOWN_OUTCOME] + "…"
        log.warning(
            "claim %s carries an outcome this version does not know — shown as none, "
            "never written over: %s",
            where,
            unknown,
        )
    if outcome is not None or unknown is not None:
        raw_ms = record.get("ms")
        if (
            isinstance(raw_ms, int | float)
            and not isinstance(raw_ms, bool)
            and math.isfinite(raw_ms)
            and 0 <= raw_ms <= MAX_MS
        ):
            ms = round(raw_ms)
        raw_error = record.get("error")
        if isinstance(raw_error, str):
            error = raw_error  # the record makes it one visible line of at most 1 KiB
        raw_output = record.get("output")
        if isinstance(raw_output, str):
            output = raw_output  # the record bounds it (output.stored_output)
        usage = usage_from_json(record.get("usage"))  # a malformed one reads as none
    replica = stored_replica(record.get("replica"))
    return Fire(
        slot=slot,
        fired_at=fired_at,
        outcome=outcome,
        ms=ms,
        error=error,
        replica=replica,
        output=output,
        usage=usage,
        unknown_outcome=unknown,
    )


def claimed_through(fire: Fire) -> datetime:
    """The instant a claim accounts for, from which later slots count as missed: its stamp,
    or its slot where the stamp lies before it (a claim made by hand: no fire is stamped
    before its slot)."""
    return fire.fired_at if fire.fired_at >= fire.slot else fire.slot


def arm_from(newest: Fire | None, now: datetime) -> datetime:
    """The instant a routine's next slot is counted from, when no catch-up is due.

    ``now``, unless the newest claim lies later (:func:`claimed_through`): a wall clock that
    ran ahead when it was made, and was corrected since, or a claim made by hand. Every slot up
    to that claim is stale, so the routine can fire nothing before the first slot after it --
    the honest "next" to show anyone.
    """
    if newest is not None and (through := claimed_through(newest)) > now:
        return through
    return now
