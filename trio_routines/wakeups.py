"""Wake-ups: the pure rules for turns an agent schedules for itself.

Every store keeps pending wake-ups as one ordered list and changes it only through these
functions, each taking the current list and returning the new one. Order matters: "first due"
means the first entry in stored order whose time has come, not the earliest ``fire_at``.

Guardrails (the texts are model-facing, because the agent's ``wake`` tool returns them):
one-shots at least 60 s ahead; at most 20 pending per session; a recurring cron may fire at
most every 10 minutes, judged on the smallest gap between any two consecutive occurrences
(:func:`trio_routines.cron.gaps.shortest_gap`: the whole calendar on the wall clock, plus the
real instants around the zone's offset changes of the coming year), not just the first two;
and the operator's limits on what turns schedule (:mod:`trio_routines.wakelimits`: a rate
per session, a chain depth), which the request carries.
"""

from __future__ import annotations

import logging
import math
import re
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta

import attrs

from .cron import cron_error, next_run, parse_cron, wakeup_seed
from .cron.gaps import shortest_gap
from .errors import InvalidWakeup
from .instants import format_iso, truncate_ms
from .names import is_unicode
from .origins import asked_by as asked_by
from .origins import origin_line as origin_line
from .records import Origin, Wakeup
from .text import cut
from .wakelimits import (
    DEFAULT_LIMITS,
    WakeLimits,
    check_depth,
    check_rate,
    check_room,
    expired,
    expired_line,
    plan_until,
)

log = logging.getLogger("trio_routines")

MIN_DELAY = timedelta(seconds=60)
MAX_PENDING_PER_SESSION = 20
MIN_RECURRING_GAP = timedelta(minutes=10)
GAP_HORIZON = timedelta(days=366)  # offset changes this far ahead are checked on real time
MAX_ATTEMPTS = 120
POLL_INTERVAL = 30.0  # seconds between polls, and the delay of a busy one-shot's retry
#: The poll intervals taken, in seconds: a shorter one reads the store in a busy loop, a longer
#: one leaves due wake-ups (and a dead replica's claims) waiting for more than a day.
POLL_RANGE = (0.05, 86_400.0)

_DELAY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?|\.[0-9]+)\s*([smhd])\s*$", re.IGNORECASE)
_UNIT = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@attrs.frozen(kw_only=True)
class WakeupRequest:
    """What a caller asks for: a one-shot at ``fire_at``, or a recurring one by ``cron`` (in
    ``tz``), whose first fire the cron decides (a ``fire_at`` given with it is not read)."""

    session: str
    prompt: str
    fire_at: datetime | None = None
    cron: str | None = None
    tz: str | None = None
    #: Who asks (see :func:`asked_by`); stored with the wake-up. None: unknown.
    origin: Origin | None = None
    #: The operator's limits on self-scheduled turns (:mod:`trio_routines.wakelimits`).
    limits: WakeLimits = DEFAULT_LIMITS
    #: When the session's wake-up turns of the last hour started (a store's
    #: :class:`~trio_routines.wakelimits.WakeTurns`), for the rate limit.
    recent: tuple[datetime, ...] = ()
    #: When a recurring wake-up ends (None: :attr:`WakeLimits.lifetime` from now).
    until: datetime | None = None


def parse_delay(value: object) -> float | None:
    """Seconds for a one-shot delay: ``"90s"``, ``"30m"``, ``"1.5h"``, ``"2d"`` or a number.

    A bare number written as text (``"120"``) is refused on purpose: its unit is a guess.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        try:
            seconds = float(value)
        except OverflowError:  # an int too large for a float
            return None
    elif isinstance(value, str):
        match = _DELAY.match(value)
        if match is None:
            return None
        seconds = float(match[1]) * _UNIT[match[2].lower()]
    else:
        return None
    if not math.isfinite(seconds) or seconds <= 0:
        return None
    return seconds


def _describe(wakeup: Wakeup, *, prompt: bool = True) -> str:
    """One pending wake-up of a refusal's listing: with the start of its prompt, for the model
    of its own session; without (``prompt=False``), for a surface that shows no prompts."""
    # A cron parses (so it is printable), but it may be long: cut, as a quoted value is.
    kind = f' (recurring "{cut(wakeup.cron)}")' if wakeup.cron is not None else ""
    described = f"{wakeup.id}{kind} at {format_iso(wakeup.fire_at)}"
    if not prompt:
        return described
    text = wakeup.prompt if len(wakeup.prompt) <= 60 else wakeup.prompt[:60] + "…"
    return f"{described}: {text}"


#: The longest prompt a wake-up keeps, in characters (an HTTP body's 64 KiB).
MAX_PROMPT = 64 * 1024
#: The longest session name a wake-up resumes, in characters (as the HTTP surface takes).
MAX_SESSION = 512
#: The longest id a stored wake-up may have, in characters (ours are 36: a UUID).
MAX_ID = 128
#: The longest text of each field a wake-up keeps, in characters: a stored entry over one is
#: damage (no add makes it), read no further than one character past it (PostgreSQL).
MOST = {"id": MAX_ID, "session": MAX_SESSION, "prompt": MAX_PROMPT}
MOST |= {"cron": MAX_PROMPT, "tz": MAX_PROMPT}
#: The longest cron and zone an add takes: each field named one by one is under 500 (longer
#: repeats itself, in the store's room and every listing), a zone's name under 40. Stored
#: entries up to :data:`MOST` are still read.
MAX_CRON, MAX_TZ = 1024, 256
ADD_MOST = MOST | {"cron": MAX_CRON, "tz": MAX_TZ}


def storable(text: str | None) -> bool:
    """Whether every store can hold ``text`` as it is: no NUL (PostgreSQL text cannot), and
    valid Unicode (no lone surrogate). An id or session that is not can match nothing."""
    return text is None or ("\x00" not in text and is_unicode(text))


def check_request(request: WakeupRequest) -> None:
    """Refuse, the same way on every store and from every caller, text that some store could
    not hold, and a field longer than :data:`ADD_MOST` lets it be (a prompt: what an HTTP body
    holds; the tool, the API and the command line take no more)."""
    for field in ("session", "prompt", "cron", "tz"):
        value = getattr(request, field)
        if value is not None and not isinstance(value, str):  # the embedding API's caller's
            raise InvalidWakeup(f"the {field} must be text, not {type(value).__name__}.")
        if not storable(value):
            raise InvalidWakeup(
                f"the {field} must be text without NUL characters or undecodable bytes."
            )
    problem = _too_long(request, ("session", "prompt", "cron", "tz"), ADD_MOST)
    if problem is not None:
        raise InvalidWakeup(problem)
    if request.cron is None and request.tz is not None:  # a store's caller's: said, not dropped
        raise InvalidWakeup("tz goes with cron only.")


def _too_long(
    entry: WakeupRequest | Wakeup, fields: tuple[str, ...], most: dict[str, int] = MOST
) -> str | None:
    """Which of ``fields`` of ``entry`` is longer than ``most`` lets it be, said."""
    for field in fields:
        value = getattr(entry, field)
        if isinstance(value, str) and len(value) > most[field]:
            return (
                f"the {field} is too long: at most {most[field]:,} characters, not {len(value):,}."
            )
    return None


#: The refusal of a wake-up whose prompt is empty or blank.
NO_PROMPT = "a wake-up needs a prompt: what should the woken turn do?"


def plan_add(
    pending: Sequence[Wakeup],
    request: WakeupRequest,
    now: datetime,
    new_id: str | None = None,
    *,
    stored: tuple[int, int] | None = None,
) -> Wakeup:
    """The wake-up to append for ``request``, or :class:`InvalidWakeup` with the guardrail text.

    ``pending``: the session's pending wake-ups (others are passed over); ``stored``: how many
    wake-ups the whole store holds pending and their text's bytes (the store's room,
    :func:`~trio_routines.wakelimits.text_bytes`), read under the store's lock for adds
    (None: not checked, the request only)."""
    now = truncate_ms(now)
    check_request(request)
    # Blank is none (the tool refused a blank prompt, the other callers stored it).
    if not request.session.strip():
        raise InvalidWakeup("a wake-up needs a session to resume (none was given).")
    if not request.prompt.strip():
        raise InvalidWakeup(NO_PROMPT)
    wakeup_id = new_id or str(uuid.uuid4())
    if request.cron is not None:
        seed = wakeup_seed(request.session, wakeup_id)
        problem = cron_error(request.cron, request.tz, seed)
        if problem is not None:
            raise InvalidWakeup(f"invalid cron/tz: {problem}")
        schedule = parse_cron(request.cron, request.tz, seed)
        first = schedule.next_after(now)
        second = schedule.next_after(first) if first is not None else None
        if first is None or second is None:
            raise InvalidWakeup(
                "this cron never fires (or fires only once) — use `in` for a one-shot."
            )
        gap = shortest_gap(schedule, now, GAP_HORIZON)
        if gap is not None and gap < MIN_RECURRING_GAP:
            minutes = gap // timedelta(minutes=1)
            raise InvalidWakeup(
                "too frequent — a recurring wake must fire at most every 10 minutes (this "
                f"cron fires {minutes} minute{'' if minutes == 1 else 's'} apart at its closest)."
            )
        fire_at = first
    else:
        if request.fire_at is None:
            raise InvalidWakeup("a one-shot wake needs its fire time (`in`).")
        fire_at = truncate_ms(request.fire_at)
        if fire_at < now + MIN_DELAY:
            raise InvalidWakeup("too soon — the minimum wake delay is 60s.")
    until = plan_until(request.cron, request.until, fire_at, now, request.limits)
    check_depth(request.origin, request.limits)
    mine = [w for w in pending if w.session == request.session]
    if len(mine) >= MAX_PENDING_PER_SESSION:
        said = (
            f"too many pending wake-ups for this session ({MAX_PENDING_PER_SESSION}) — "
            "wait for some to fire, or cancel one. Pending: "
        )
        raise InvalidWakeup(
            said + "; ".join(_describe(w) for w in mine),
            public=said + "; ".join(_describe(w, prompt=False) for w in mine),
        )
    wakeup = Wakeup(
        id=wakeup_id,
        session=request.session,
        prompt=request.prompt,
        fire_at=fire_at,
        cron=request.cron,
        tz=request.tz,  # (none without a cron: refused)
        origin=request.origin,
        until=until,
    )
    check_rate(mine, wakeup, request.recent, now, request.limits)
    if stored is not None:  # last: a store that counts after the other checks answers alike
        check_room(stored, wakeup)
    return wakeup


def check_stored(wakeup: Wakeup) -> Wakeup:
    """Refuse a stored recurring entry whose cron no longer parses, and an entry with text no
    add makes (a field longer than :data:`MOST` lets it be, or one no store can hold: a NUL,
    or a lone surrogate, which JSON's ``\\ud800`` escapes can name: edited by hand).

    Such an entry would raise inside every take (or its removal, which writes its id) and
    block each wake-up queued behind it.
    """
    check_stored_text(wakeup)
    problem = stored_cron_problem(wakeup)
    if problem is not None:
        raise ValueError(problem)
    return wakeup


def check_stored_text(wakeup: Wakeup) -> None:
    """The text half of :func:`check_stored`: ``ValueError`` for a field no add makes."""
    fields = ("id", "session", "prompt", "cron", "tz")
    problem = _too_long(wakeup, fields)
    if problem is not None:
        raise ValueError(problem)
    for field in fields:
        check_storable(field, getattr(wakeup, field))


def check_storable(field: str, text: str | None) -> None:
    """``ValueError`` naming ``field`` when ``text`` is no text a store holds."""
    if not storable(text):
        raise ValueError(f"the {field} is not storable text (a NUL, or not valid Unicode)")


def stored_cron_problem(wakeup: Wakeup) -> str | None:
    """The cron half of :func:`check_stored`: why a recurring entry's cron or zone does not
    parse here (a zone this machine does not know, a newer version's cron), or None."""
    if wakeup.cron is None:
        return None
    problem = cron_error(wakeup.cron, wakeup.tz, wakeup_seed(wakeup.session, wakeup.id))
    return None if problem is None else f"invalid cron/tz: {problem}"


def take_first_due(pending: Sequence[Wakeup], now: datetime) -> tuple[list[Wakeup], Wakeup | None]:
    """Take the first due entry in stored order.

    A one-shot leaves the list; a recurring entry is advanced in place to its next occurrence
    after ``now`` (missed occurrences collapse into one) and leaves only after its last, or
    when the next would come after its ``until``. The returned wake-up is the entry as it
    was, with the ``fire_at`` that came due. An expired entry met on the way
    (:func:`~trio_routines.wakelimits.expired`) leaves the list, logged, and is never
    returned: the returned list may be shorter with nothing taken.
    """
    rest = list(pending)
    index = 0
    while index < len(rest):
        wakeup = rest[index]
        if wakeup.fire_at > now:
            index += 1
            continue
        if expired(wakeup, now):
            log.warning("%s", expired_line(wakeup))
            del rest[index]
            continue
        if wakeup.cron is not None:
            upcoming = next_run(wakeup.cron, wakeup.tz, now, wakeup_seed(wakeup.session, wakeup.id))
            if upcoming is None:
                del rest[index]
            elif wakeup.until is not None and upcoming > wakeup.until:
                log.info("%s", _ended_line(wakeup, wakeup.until))
                del rest[index]
            else:
                rest[index] = attrs.evolve(wakeup, fire_at=upcoming, attempts=None)
        else:
            del rest[index]
        return rest, wakeup
    return rest, None


def _ended_line(wakeup: Wakeup, until: datetime) -> str:
    return (
        f"wake-up {wakeup.id} of session {wakeup.session!r}: its last occurrence before its "
        f"until ({format_iso(until)}) fires now; it is removed"
    )


def plan_defer(pending: Sequence[Wakeup], wakeup: Wakeup, fire_at: datetime) -> Wakeup | None:
    """The re-queued copy of a busy one-shot, or ``None`` (dropped): once it hit the retry
    ceiling, or when its session already has the most pending wake-ups it may have.

    The cap is checked again here because a taken one-shot left the list: while its turn ran
    the session may have added wake-ups up to the cap, and its return must not exceed it.
    """
    attempts = (wakeup.attempts or 0) + 1
    if attempts > MAX_ATTEMPTS:
        return None
    if sum(w.session == wakeup.session for w in pending) >= MAX_PENDING_PER_SESSION:
        return None
    return attrs.evolve(wakeup, fire_at=fire_at, attempts=attempts)


def defer_dropped(wakeup: Wakeup) -> str:
    """Why :func:`plan_defer` dropped ``wakeup`` (for the log)."""
    if (wakeup.attempts or 0) + 1 > MAX_ATTEMPTS:
        return "dropped after too many retries (its session busy, or at its rate limit)"
    return (
        f"dropped: it could not wait, its session already has {MAX_PENDING_PER_SESSION} "
        "pending wake-ups (the most it may have)"
    )


def remove(
    pending: Sequence[Wakeup], wakeup_id: str, session: str | None = None
) -> tuple[list[Wakeup], bool]:
    """Drop entries with ``wakeup_id`` (and ``session``, when given); report whether any went.

    An id or session that is not :func:`storable` matches nothing, as in every store."""
    if not (storable(wakeup_id) and storable(session)):
        return list(pending), False
    kept = [
        w for w in pending if not (w.id == wakeup_id and (session is None or w.session == session))
    ]
    return kept, len(kept) != len(pending)
