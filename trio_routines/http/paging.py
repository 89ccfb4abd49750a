"""``GET /wakeups`` a page at a time: ``?limit=`` and ``?after=``.

A store may hold up to :data:`~trio_routines.wakelimits.MAX_PENDING` wake-ups: listed whole,
that is one answer of 10 MB of JSON at the least (about 100 bytes a wake-up) and hundreds of
MB with long sessions and crons, past the 16 MiB the command line reads of an answer, and a
ledger read for every session listed. So the list comes in pages of :data:`PAGE` wake-ups
unless ``?limit=`` asks for another size (1 to :data:`MAX_PAGE`), in the order of their
instants (then of their ids). An answer that left some out says where the next page begins in
a ``Link: <…>; rel="next"`` header (RFC 8288); its ``after`` is the last entry's instant and
id (``2026-07-07T10:00:00.000Z,<id>``), which a client may also build itself. Each page is
read afresh: a wake-up that fires, is added or moves (a deferral, a recurring one's next
occurrence) between two pages may be missed or shown twice, as in any listing of a store that
changes while it is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from urllib.parse import quote, urlencode

import attrs

from ..instants import format_iso, parse_instant, truncate_ms
from ..records import Wakeup
from .wire import ECHO, MAX_ID, Refusal, Scope, query

#: Wake-ups in one answer unless ``?limit=`` says otherwise.
PAGE = 1000
#: The largest ``?limit=``.
MAX_PAGE = 10_000


@attrs.frozen
class Page:
    """What ``?limit=`` and ``?after=`` ask for."""

    limit: int = PAGE
    after: tuple[datetime, str] | None = None
    #: ``?limit=`` as given (kept in the next page's link), None when absent.
    asked_limit: str | None = None


def page_params(scope: Scope) -> Page:
    """``?limit=`` and ``?after=`` of ``GET /wakeups``, checked: a 400 names the bad one."""
    found = query(scope)
    given = found.get("limit") or None
    limit = PAGE
    if given is not None:
        if not (given.isascii() and given.isdigit() and 1 <= int(given) <= MAX_PAGE):
            raise Refusal(
                400, f"limit must be a whole number from 1 to {MAX_PAGE}: {given[:ECHO]!r}"
            )
        limit = int(given)
    return Page(limit, _cursor(found.get("after") or None), given)


def _cursor(given: str | None) -> tuple[datetime, str] | None:
    if given is None:
        return None
    instant, _, wakeup_id = given.partition(",")  # the instant as the link writes it; an id
    at = parse_instant(instant)
    if at is None or not wakeup_id or len(wakeup_id) > MAX_ID:
        raise Refusal(
            400,
            "after must be a wake-up's instant and id, as the next page's link gives it "
            f"(2026-07-07T10:00:00.000Z,<id>): {given[:ECHO]!r}",
        )
    return truncate_ms(at), wakeup_id


def _key(wakeup: Wakeup) -> tuple[datetime, str]:
    # As the listing shows the instant (to the millisecond): a cursor built from it is exact.
    return truncate_ms(wakeup.fire_at), wakeup.id


def cursor_of(wakeup: Wakeup) -> str:
    """The ``?after=`` of the page that follows ``wakeup``."""
    at, wakeup_id = _key(wakeup)
    return f"{format_iso(at)},{wakeup_id}"


def one_page(pending: Sequence[Wakeup], page: Page) -> tuple[list[Wakeup], Wakeup | None]:
    """The wake-ups of ``page`` in order, and the last of them when more follow (else None)."""
    ordered = sorted(pending, key=_key)
    if page.after is not None:
        after = page.after
        ordered = [wakeup for wakeup in ordered if _key(wakeup) > after]
    shown = ordered[: page.limit]
    return shown, (shown[-1] if len(ordered) > page.limit else None)


def next_link(mount: str, session: str | None, page: Page, last: Wakeup) -> tuple[str, str]:
    """The ``Link`` header that names the page after ``last``: ASCII whatever the mount point
    and the session (percent-encoded), as a header must be."""
    params = {"session": session, "limit": page.asked_limit, "after": cursor_of(last)}
    given = urlencode({key: value for key, value in params.items() if value is not None})
    return "Link", f'<{quote(mount)}/wakeups?{given}>; rel="next"'
