"""A wake-up as a row of PostgreSQL's ``wakeups`` table, and back (see wakeups.py).

The columns a row is written with and read with, the read cut to what a wake-up keeps; a row
read back is checked as every stored entry is (:func:`~trio_routines.wakeups.check_stored`),
and its origin, who asked, is read leniently (damage there is passed over, never trusted).
"""

from __future__ import annotations

from typing import Any

from ...records import Origin, Wakeup
from ...wakelimits import ROOM_FIELDS
from ...wakeups import MAX_PROMPT, MOST, check_stored

WAKEUP_COLUMNS = (
    "id, session, prompt, fire_at, cron, tz, attempts, "
    "origin, origin_depth, origin_routine, origin_slot, origin_parent, until_at"
)
PLACES = ", ".join(["%s"] * 13)
#: The same columns as read: no text longer than one character past what a wake-up keeps
#: (wakeups.py's ``MOST``) comes from the server, so that a row edited by hand to megabytes
#: costs no more than a malformed one to every take and listing.
READ_COLUMNS = ", ".join(
    f"left({column}, {MOST.get(column, MAX_PROMPT) + 1})"
    if column in (*MOST, "origin", "origin_routine", "origin_parent")
    else column
    for column in WAKEUP_COLUMNS.split(", ")
)
#: A row's share of the store's room, its text's bytes in the database's encoding, as
#: :func:`~trio_routines.wakelimits.text_bytes` counts a wake-up's (its columns are named as
#: the fields).
ROOM_BYTES = " + ".join(f"coalesce(octet_length({field}), 0)" for field in ROOM_FIELDS)


def wakeup_of_row(row: tuple[Any, ...]) -> Wakeup:
    """The wake-up a row read with :data:`READ_COLUMNS` holds; ``ValueError`` or
    ``TypeError`` when it is malformed (text no add makes, a cron that no longer parses)."""
    id_, session, prompt, fire_at, cron, tz, attempts, *origin, until = row
    return check_stored(
        Wakeup(
            id=id_,
            session=session,
            prompt=prompt,
            fire_at=fire_at,
            cron=cron,
            tz=tz,
            attempts=attempts,
            origin=_origin(*origin),
            until=until,
        )
    )


def _origin(kind: Any, depth: Any, routine: Any, slot: Any, parent: Any) -> Origin | None:
    """The stored origin; None when there is none (older code added it) or it is malformed
    (who asked is shown, never trusted to keep a wake-up: damage there is passed over)."""
    if kind is None:
        return None
    if any(isinstance(text, str) and len(text) > MAX_PROMPT for text in (routine, parent)):
        return None  # read no further than one character past it: cut, not theirs
    try:
        return Origin(kind=kind, depth=depth, routine=routine, slot=slot, parent=parent)
    except (ValueError, TypeError, AttributeError):
        return None


def row_of(wakeup: Wakeup) -> tuple[Any, ...]:
    """``wakeup``'s values, in :data:`WAKEUP_COLUMNS`' order."""
    origin = wakeup.origin
    return (
        wakeup.id,
        wakeup.session,
        wakeup.prompt,
        wakeup.fire_at,
        wakeup.cron,
        wakeup.tz,
        wakeup.attempts,
        *(
            (origin.kind.value, origin.depth, origin.routine, origin.slot, origin.parent)
            if origin is not None
            else (None,) * 5
        ),
        wakeup.until,
    )
