"""The status page: ``GET /`` and its few helpers under ``/ui/``.

Routes (all below the host's mount point):

* ``GET /`` -- the page: every routine with its schedule, next instant, paused state, a
  timeline of its recent slots and a strip of its last fires; in-flight turns; pending
  wake-ups per session (never their prompts); clock jumps; the store in use.
* ``GET /ui/state`` -- JSON ``{"version", "main", "now"}``: the page's ``<main>`` rendered
  again, which the page's script polls every ``poll`` seconds and swaps in when it changed.
  One renderer serves both, so the first paint and every refresh escape alike.
* ``GET /ui/page.css``, ``GET /ui/page.js`` -- the page's only assets, served from the
  package: no inline script or style, no external asset, so a strict Content-Security-Policy
  holds and the page works offline.
* ``POST /ui/login`` (form field ``token``), ``POST /ui/logout`` -- with a token configured.

Authorization. Without a token the page is served like the API, after its ``Host``/``Origin``
check (and a server binds loopback only). With a token, a browser cannot send a bearer
header by itself, so the login form exchanges the token for a cookie: ``HttpOnly``,
``SameSite=Strict``, its value an HMAC-SHA256 of a fixed label keyed by the token -- never
the token itself, which never appears in a URL either. The cookie is compared in constant time
and accepted only on reads (``GET``/``HEAD``) of the page and of the API; anything that
changes state still needs the bearer header. The assets need nothing: they hold no data.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections import defaultdict
from collections.abc import Awaitable, Collection, Coroutine
from datetime import datetime, timedelta
from importlib import resources
from typing import TypeVar
from urllib.parse import parse_qsl

import attrs
import trio

from ..budgets import budgets_text
from ..cron import next_run
from ..errors import StateFault, TrioRoutinesError
from ..history import day_spent, sessions_spent
from ..ledger import describe_spent
from ..records import Fire, Gap, Wakeup
from ..routines import Routine
from ..scheduler import Scheduler, Statistics
from ..store import GapRecords
from ..stores.directory import DirectoryStore
from ..text import one_line
from .expected import ExpectedSlots
from .render import login_html, main_html, page_html
from .signin import SIGNED_IN, cookie_value, set_cookie
from .views import (
    MAX_MARKS,
    WINDOW,
    InFlight,
    PageView,
    RoutineView,
    soonest_sessions,
    timeline,
    wakeup_group,
)
from .wire import (
    Raw,
    Receive,
    Refusal,
    Response,
    Scope,
    mount_point,
    one_header,
    read_body,
)

T = TypeVar("T")

READ_DEADLINE = 5.0  # seconds: one store read for the page, then "unavailable"
MAX_FORM = 4096  # bytes of a login form
POLL = 5.0  # seconds between the page's refreshes
# The markup of a page is pure work over a snapshot, a few hundred microseconds a routine: it
# runs in a worker thread, one page at a time, so the event loop (fires, probes) goes on.
RENDERS = trio.CapacityLimiter(1)

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
SECURITY = (
    ("content-security-policy", CSP),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
)
HTML = b"text/html; charset=utf-8"
ASSETS = {
    "/ui/page.css": ("page.css", b"text/css; charset=utf-8"),
    "/ui/page.js": ("page.js", b"text/javascript; charset=utf-8"),
    "/ui/icon.svg": ("icon.svg", b"image/svg+xml"),
}
PATHS = frozenset({"/", "/ui/state", "/ui/login", "/ui/logout", *ASSETS})


def is_page(path: str) -> bool:
    return path in PATHS


def base_path(scope: Scope) -> str:
    """The mount point with a final ``/``: the page's links are absolute below it."""
    return mount_point(scope) + "/"


def store_label(scheduler: Scheduler) -> str:
    """The store in use: a directory's path, or a database's host and name (no password)."""
    store = scheduler.store
    if isinstance(store, DirectoryStore):
        return f"state directory {store.root}"
    where = getattr(store, "where", None)
    return str(where) if where else type(store).__name__


def _asset(name: str) -> bytes:
    return resources.files(__package__).joinpath("static", name).read_bytes()


def _html(status: int, text: str, extra: tuple[tuple[str, str], ...] = ()) -> Response:
    return Response(status, Raw(HTML, text.encode("utf-8")), SECURITY + extra)


# -- gathering what the page shows ---------------------------------------------------------------


def _next_due(routine: Routine, stats: Statistics, now: datetime) -> datetime | None:
    """What the routine's loop waits for; without a loop (external clock), the cron's next."""
    if routine.name in stats.next_due:
        return stats.next_due[routine.name]
    if routine.cron is None:
        return None
    try:
        return next_run(routine.cron, routine.tz, now, routine.name)
    except (TrioRoutinesError, ValueError, OverflowError):
        return None


class _Reads:
    """The store reads of one render: each within READ_DEADLINE, and none more once one was
    not answered in time. A stalled store was asked read after read, 5 s each, two a routine:
    minutes for a page of a few dozen routines."""

    def __init__(self) -> None:
        self._stalled = False

    async def read(self, call: str, read: Awaitable[T]) -> tuple[T | None, str | None]:
        """``read`` awaited within READ_DEADLINE: (result, None) or (None, the problem)."""
        if self._stalled:
            if isinstance(read, Coroutine):
                read.close()  # never started: not left to warn that it was never awaited
            await trio.lowlevel.checkpoint()
            return None, f"{call} not read: the store did not answer within {READ_DEADLINE:g} s"
        with trio.move_on_after(READ_DEADLINE):
            try:
                return await read, None
            except StateFault as exc:
                return None, one_line(str(exc))
        self._stalled = True
        return None, f"{call} timed out after {READ_DEADLINE:g} s"


async def _routine_view(
    reads: _Reads,
    scheduler: Scheduler,
    routine: Routine,
    stats: Statistics,
    now: datetime,
    paused: bool,
    expected_slots: ExpectedSlots,
) -> RoutineView:
    found, problem = await reads.read("history", scheduler.store.history(routine.name))
    fires: list[Fire] = found or []
    start = now - WINDOW
    if len(fires) >= MAX_MARKS:
        start = max(start, fires[-MAX_MARKS].slot)
    elif fires:
        start = max(start, fires[0].slot)
    expected = expected_slots.slots(routine, start, now) if fires else ()
    gaps: list[Gap] = []
    if fires and isinstance(scheduler.store, GapRecords):  # why a slot was missed, if known
        gaps = (await reads.read("gaps", scheduler.store.gaps(routine.name)))[0] or []
    marks, since = timeline(expected, fires, now, gaps)
    spent, unread = await reads.read(
        "usage", day_spent(scheduler.store, "routine", routine.name, now, fires)
    )
    return RoutineView(
        name=routine.name,
        cron=routine.cron,
        tz=routine.tz,
        resolved=routine.resolved_cron,
        next_due=_next_due(routine, stats, now),
        external=routine.cron is not None and scheduler.external_clock,  # no loop of ours
        paused=paused,
        marks=marks,
        recent=tuple(fires[-MAX_MARKS:]),
        since=since,
        problem=problem,
        spent=f"unknown ({unread})" if spent is None else describe_spent(spent),
        budget=stats.over_budget.get(routine.name) or budgets_text(routine.budgets),
        over_budget=routine.name in stats.over_budget,
    )


async def _sessions_spent(
    reads: _Reads, scheduler: Scheduler, sessions: Collection[str], now: datetime
) -> dict[str, str]:
    """What each listed session's wake-up turns spent in the last 24 hours, as text (a read
    bounded like the others; ``unknown (why)`` when unreadable; none without a ledger)."""
    found, unread = await reads.read("usage", sessions_spent(scheduler.store, sessions, now))
    if found is None:
        return {session: f"unknown ({unread})" for session in sessions}
    return {
        session: f"unknown ({one_line(str(spent))})"
        if isinstance(spent, StateFault)
        else describe_spent(spent)
        for session, spent in found.items()
    }


async def gather(
    scheduler: Scheduler, poll: float = POLL, expected: ExpectedSlots | None = None
) -> PageView:
    """A snapshot of everything the page shows; every store read bounded by a deadline.

    ``expected`` remembers each timeline's cron slots from one render to the next (see
    :mod:`.expected`); without one, they are searched afresh.
    """
    now = scheduler.now()
    reads = _Reads()
    expected = ExpectedSlots() if expected is None else expected
    # Read from the store, not remembered: another replica may have paused a routine.
    stored, _ = await reads.read("paused", scheduler.store.paused())
    stats = scheduler.statistics()  # one snapshot for every row
    paused = stats.paused if stored is None else stored
    routines = []
    loaded = dict(scheduler.routines)  # a reload during the awaits below changes nothing here
    for name in sorted(loaded):
        routine = loaded[name]
        view = await _routine_view(reads, scheduler, routine, stats, now, name in paused, expected)
        routines.append(view)
        # A first render searches every routine's slots: let fires and probes run between.
        await trio.lowlevel.checkpoint()
    expected.keep_only(loaded.values())
    found, problem = await reads.read("wake-ups", scheduler.store.list_wakeups())
    groups: dict[str, list[Wakeup]] = defaultdict(list)
    for wakeup in found or []:
        groups[wakeup.session].append(wakeup)
    shown, left_out = soonest_sessions(groups)
    clock = trio.current_time()
    flights = tuple(
        InFlight(session, _to_second(now - timedelta(seconds=max(0.0, clock - since))))
        for session, since in sorted(scheduler.agent.held().items())
    )
    spent = await _sessions_spent(reads, scheduler, shown, now)
    members, members_problem = await reads.read("replicas", scheduler.replicas())
    stats = scheduler.statistics()
    return PageView(
        now=now,
        routines=tuple(routines),
        in_flight=flights,
        wakeups=tuple(
            attrs.evolve(
                group,
                over_budget=stats.sessions_over_budget.get(group.session, ""),
                spent=spent.get(group.session, ""),
            )
            for group in (wakeup_group(session, groups[session]) for session in shown)
        ),
        wakeups_left_out=left_out,
        clock_jumps=stats.clock_jumps,
        store=store_label(scheduler),
        stopping=stats.stopping,
        broken_files=stats.broken_files,
        poll=poll,
        wakeups_problem=problem,
        replicas=tuple(m for m in members or () if m.alive),
        replicas_problem=members_problem,
    )


# -- the routes --------------------------------------------------------------------------------


async def _read_form(scope: Scope, receive: Receive) -> dict[str, str]:
    kind = (one_header(scope, b"content-type") or "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Refusal(415, "send the sign-in form (application/x-www-form-urlencoded)")
    body = await read_body(scope, receive, MAX_FORM)
    try:
        pairs = parse_qsl(body.decode("ascii"), keep_blank_values=True, errors="strict")
    except (UnicodeDecodeError, ValueError):
        raise Refusal(400, "the form is not valid") from None
    form = dict(pairs)
    if len(form) != len(pairs):  # which one counts would be a guess (as in a query)
        raise Refusal(400, "the form names a field twice")
    return form


async def handle(
    scheduler: Scheduler,
    token: bytes | None,
    authorized: bool,
    scope: Scope,
    method: str,
    path: str,
    receive: Receive,
    expected: ExpectedSlots | None = None,
) -> Response:
    """Answer one page route. ``authorized``: a bearer token or the page's cookie came along
    (always true without a token); ``expected``: the application's memory of the timelines'
    cron slots."""
    base = base_path(scope)
    if path in ASSETS:
        _require(method, ("GET", "HEAD"))
        name, kind = ASSETS[path]
        return Response(200, Raw(kind, _asset(name)), SECURITY)
    if path == "/ui/login":
        _require(method, ("POST",))
        form = await _read_form(scope, receive)
        given = form.get("token", "").encode("utf-8")
        if token is None or hmac.compare_digest(given, token):
            until = int(scheduler.now().timestamp()) + SIGNED_IN
            value = cookie_value(token, until) if token is not None else ""
            extra = () if token is None else (set_cookie(base, value, SIGNED_IN, scope),)
            return Response(303, Raw(HTML, b""), (("location", base), *extra))
        return _html(401, login_html(scheduler.now(), base, wrong=True))
    if path == "/ui/logout":
        _require(method, ("POST",))
        return Response(303, Raw(HTML, b""), (("location", base), set_cookie(base, "", 0, scope)))
    _require(method, ("GET", "HEAD"))
    if path == "/ui/state":
        if not authorized:
            raise Refusal(401, "sign in on the status page first")
        view = await gather(scheduler, expected=expected)
        payload = await trio.to_thread.run_sync(_state_json, view, limiter=RENDERS)
        return Response(200, Raw(b"application/json", payload), SECURITY)
    if not authorized:
        return _html(401, login_html(scheduler.now(), base, wrong=False))
    view = await gather(scheduler, expected=expected)
    text = await trio.to_thread.run_sync(page_html, view, base, limiter=RENDERS)
    return _html(200, text)


def _state_json(view: PageView) -> bytes:
    main = main_html(view)
    version = hashlib.sha256(main.encode("utf-8")).hexdigest()[:16]
    body = {"version": version, "main": main, "now": view.now.isoformat()}
    return json.dumps(body, ensure_ascii=True).encode("ascii")


def _require(method: str, allowed: tuple[str, ...]) -> None:
    if method not in allowed:
        raise Refusal(405, f"use {' or '.join(allowed)} here", [("allow", ", ".join(allowed))])


def _to_second(instant: datetime) -> datetime:
    """``instant`` to the nearest second: a turn started at 09:00:00.007, measured back from
    now by Trio's clock, reads 08:59:59.998, which cut to the second looked an early fire."""
    return (instant + timedelta(milliseconds=500)).replace(microsecond=0)
