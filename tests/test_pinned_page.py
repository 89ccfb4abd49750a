"""The status page's helpers and gathering (:mod:`trio_routines.http.page`) pinned: the cookie,
the mount point, the store's label, who asked for a session's wake-ups, a routine's next
instant, the state's JSON and the sign-in cookie's attributes.

Its first test calls a helper directly: mutmut's forced-fail run stops at the first failing
test, and a page served over a real server, all of whose helpers raise, waits for an answer
that never comes.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_routines.agent import Usage
from trio_routines.cron.recent import newest_slots
from trio_routines.errors import StateFault
from trio_routines.http import expected as expected_module
from trio_routines.http import page as page_module
from trio_routines.http.expected import ExpectedSlots
from trio_routines.http.page import (
    HTML,
    SECURITY,
    _next_due,
    _state_json,
    base_path,
    gather,
    handle,
    is_page,
    store_label,
)
from trio_routines.http.render import login_html
from trio_routines.http.signin import COOKIE, cookie_value
from trio_routines.http.views import InFlight, Mark, PageView, asked_by, wakeup_group
from trio_routines.http.wire import Raw, Refusal, Response
from trio_routines.records import Gap, GapReason, Origin, OriginKind, Outcome, Wakeup
from trio_routines.routines import Routine
from trio_routines.scheduler import Scheduler
from trio_routines.scheduler.state import Statistics
from trio_routines.stores.directory import DirectoryStore
from trio_routines.testing import MemoryStore, ScriptedAgent
from trio_routines.wakeups import WakeupRequest

NOW = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)
TOKEN = b"page-token"


def test_the_base_path_ends_with_one_slash() -> None:
    assert base_path({}) == "/"
    assert base_path({"root_path": ""}) == "/"
    assert base_path({"root_path": "/m"}) == "/m/"
    assert base_path({"root_path": "/m//"}) == "/m/"
    assert base_path({"root_path": "/boX"}) == "/boX/"


def test_the_page_s_paths() -> None:
    for path in ("/", "/ui/state", "/ui/login", "/ui/logout", "/ui/page.css", "/ui/icon.svg"):
        assert is_page(path)
    assert not is_page("/ui/")
    assert not is_page("/routines")


def test_the_store_s_label(tmp_path: Path) -> None:
    directory = Scheduler(agent=ScriptedAgent(), store=DirectoryStore(tmp_path), routines=[])
    assert store_label(directory) == f"state directory {tmp_path}"
    assert store_label(Scheduler(agent=ScriptedAgent(), store=MemoryStore(), routines=[])) == (
        "MemoryStore"
    )

    class Placed(MemoryStore):
        where = "db.example:5432/routines"

    assert store_label(Scheduler(agent=ScriptedAgent(), store=Placed(), routines=[])) == (
        "db.example:5432/routines"
    )


def test_who_asked_for_a_wake_up() -> None:
    assert asked_by(None) == "unknown"
    assert asked_by(Origin(kind=OriginKind.ROUTINE, depth=1, routine="daily")) == "routine daily"
    assert asked_by(Origin(kind=OriginKind.WAKEUP, depth=2, parent="w1")) == "wake-up"
    assert asked_by(Origin(kind=OriginKind.HTTP)) == "http"
    assert asked_by(Origin(kind=OriginKind.CLI)) == "cli"


def _wakeup(n: int, origin: Origin | None, until: datetime | None = None) -> Wakeup:
    return Wakeup(
        id=f"w{n}",
        session="chat",
        prompt="p",
        fire_at=NOW + timedelta(minutes=10 - n),
        origin=origin,
        until=until,
    )


def test_a_session_s_group_counts_the_next_who_asked_the_deepest_and_the_last_until() -> None:
    deep = Origin(kind=OriginKind.WAKEUP, depth=3, parent="w0")
    routine = Origin(kind=OriginKind.ROUTINE, depth=1, routine="daily")
    pending = [
        _wakeup(1, routine, until=NOW + timedelta(days=1)),
        _wakeup(2, deep),
        _wakeup(3, None, until=NOW + timedelta(days=2)),
        _wakeup(4, routine),
    ]
    group = wakeup_group("chat", pending)
    assert group.session == "chat"
    assert group.count == 4
    assert group.next_at == NOW + timedelta(minutes=6)
    assert group.origins == (("routine daily", 2), ("unknown", 1), ("wake-up", 1))
    assert group.deepest == 3
    assert group.until == NOW + timedelta(days=2)
    bare = wakeup_group("chat", [_wakeup(1, None)])
    assert (bare.deepest, bare.until, bare.origins) == (0, None, (("unknown", 1),))


def _stats(**next_due: datetime | None) -> Statistics:
    return Statistics(
        armed=(), in_flight=0, next_due=next_due, outcomes={}, clock_jumps=0, stopping=False
    )


def test_a_routine_s_next_instant_is_its_loop_s_or_else_its_cron_s() -> None:
    berlin = Routine(name="b", prompt="p", cron="0 9 * * *", tz="Europe/Berlin")
    assert _next_due(berlin, _stats(), NOW) == datetime(2026, 12, 1, 8, tzinfo=UTC)
    waited = NOW + timedelta(hours=1)
    assert _next_due(berlin, _stats(b=waited), NOW) == waited
    assert _next_due(berlin, _stats(b=None), NOW) is None
    assert _next_due(Routine(name="b", prompt="p"), _stats(), NOW) is None
    never = Routine(name="n", prompt="p", cron="0 0 30 2 *")
    assert _next_due(never, _stats(), NOW) is None


def test_the_state_s_json_carries_the_main_part_its_version_and_now() -> None:
    view = PageView(
        now=NOW,
        routines=(),
        in_flight=(),
        wakeups=(),
        clock_jumps=0,
        store="st\u00e9re",
        stopping=False,
        poll=5.0,
    )
    payload = _state_json(view)
    assert payload.isascii()
    body = json.loads(payload)
    assert set(body) == {"version", "main", "now"}
    assert "st\u00e9re" in body["main"]
    assert body["version"] == hashlib.sha256(body["main"].encode("utf-8")).hexdigest()[:16]
    assert body["now"] == "2026-11-30T12:00:30+00:00"


# -- the routes, called directly -------------------------------------------------------------


def _scheduler(store: MemoryStore | None = None, **options: Any) -> Scheduler:
    return Scheduler(agent=ScriptedAgent(), store=store or MemoryStore(), **options)


def _request(method: str, *headers: tuple[bytes, bytes], **more: object) -> dict[str, Any]:
    return {"type": "http", "method": method, "headers": list(headers), **more}


async def _route(
    path: str,
    method: str = "GET",
    body: bytes = b"",
    *headers: tuple[bytes, bytes],
    token: bytes | None = TOKEN,
    authorized: bool = True,
    scheduler: Scheduler | None = None,
    expected: ExpectedSlots | None = None,
    **more: object,
) -> Response:
    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body}

    return await handle(
        scheduler or _scheduler(),
        token,
        authorized,
        _request(method, *headers, **more),
        method,
        path,
        receive,
        expected,
    )


FORM = (b"content-type", b"Application/X-WWW-Form-Urlencoded ; charset=ascii")


def _refused(excinfo: pytest.ExceptionInfo[Refusal]) -> tuple[int, Any, tuple[Any, ...]]:
    answer = excinfo.value.response
    return answer.status, answer.body, answer.headers


async def test_sign_in_with_the_token_sets_the_cookie_below_the_mount_point() -> None:
    body = b"token=" + TOKEN + b"&other="
    scheduler = _scheduler(now=lambda: NOW)
    answer = await _route(
        "/ui/login", "POST", body, FORM, root_path="/m", scheme="https", scheduler=scheduler
    )
    value = cookie_value(TOKEN, int(NOW.timestamp()) + 43200)  # it holds for twelve hours
    cookie = f"{COOKIE}={value}; Path=/m/; Max-Age=43200; HttpOnly; SameSite=Strict"
    assert answer == Response(
        303, Raw(HTML, b""), (("location", "/m/"), ("set-cookie", cookie + "; Secure"))
    )
    # Without a token there is nothing to sign in to: back to the page, no cookie.
    answer = await _route("/ui/login", "POST", b"", FORM, token=None)
    assert answer == Response(303, Raw(HTML, b""), (("location", "/"),))


async def test_a_wrong_or_missing_token_is_the_form_again_with_its_note() -> None:
    scheduler = _scheduler()
    for body in (b"token=nope", b"other=1", b"token="):
        answer = await _route("/ui/login", "POST", body, FORM, scheduler=scheduler)
        page = login_html(scheduler.now(), "/", wrong=True)
        assert answer == Response(401, Raw(HTML, page.encode()), SECURITY), body


async def test_a_sign_in_form_of_another_kind_or_not_ascii_is_refused() -> None:
    why = "send the sign-in form (application/x-www-form-urlencoded)"
    for kind in [(), ((b"content-type", b"text/plain; a=application/x-www-form-urlencoded"),)]:
        with pytest.raises(Refusal) as refused:
            await _route("/ui/login", "POST", b"token=x", *kind)
        assert _refused(refused) == (415, {"error": why}, ())
    for body in (b"token=\xff", b"token=%ff"):
        with pytest.raises(Refusal) as refused:
            await _route("/ui/login", "POST", body, FORM)
        assert _refused(refused) == (400, {"error": "the form is not valid"}, ())


async def test_a_form_without_the_token_never_signs_in_whatever_the_token() -> None:
    scheduler = _scheduler()
    answer = await _route("/ui/login", "POST", b"other=1", FORM, token=b"XXXX", scheduler=scheduler)
    page = login_html(scheduler.now(), "/", wrong=True)
    assert answer == Response(401, Raw(HTML, page.encode()), SECURITY)


async def test_the_page_and_its_state_search_the_slots_of_the_application_s_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    searches: list[str] = []

    def counted(*args: Any) -> list[datetime]:
        searches.append("search")
        return newest_slots(*args)

    monkeypatch.setattr(expected_module, "newest_slots", counted)
    scheduler = _gathering(await _stored())
    for path in ("/", "/ui/state"):
        expected = ExpectedSlots()
        for _ in range(2):
            answer = await _route(path, scheduler=scheduler, expected=expected)
            assert answer.status == 200
        assert searches == ["search"], path  # the second render remembered the first's
        searches.clear()


async def test_sign_out_clears_the_cookie() -> None:
    answer = await _route("/ui/logout", "POST", root_path="/m/")
    cleared = f"{COOKIE}=; Path=/m/; Max-Age=0; HttpOnly; SameSite=Strict"
    assert answer == Response(303, Raw(HTML, b""), (("location", "/m/"), ("set-cookie", cleared)))


async def test_each_route_says_which_methods_it_takes() -> None:
    for path, method, allowed in [
        ("/ui/page.css", "POST", "GET, HEAD"),
        ("/ui/login", "GET", "POST"),
        ("/ui/logout", "GET", "POST"),
        ("/", "DELETE", "GET, HEAD"),
        ("/ui/state", "PUT", "GET, HEAD"),
    ]:
        with pytest.raises(Refusal) as refused:
            await _route(path, method)
        said = {"error": f"use {allowed.replace(', ', ' or ')} here"}
        assert _refused(refused) == (405, said, (("allow", allowed),)), path
    answer = await _route("/ui/page.css", "HEAD")
    assert (answer.status, answer.headers) == (200, SECURITY)


async def test_the_page_and_its_state_unauthorized_and_authorized() -> None:
    scheduler = _scheduler()
    with pytest.raises(Refusal) as refused:
        await _route("/ui/state", authorized=False, scheduler=scheduler)
    assert _refused(refused) == (401, {"error": "sign in on the status page first"}, ())
    form = await _route("/", authorized=False, scheduler=scheduler)
    page = login_html(scheduler.now(), "/", wrong=False)
    assert form == Response(401, Raw(HTML, page.encode()), SECURITY)
    state = await _route("/ui/state", scheduler=scheduler)
    assert (state.status, state.body.kind, state.headers) == (200, b"application/json", SECURITY)
    shown = await _route("/", "HEAD", scheduler=scheduler)
    assert (shown.status, shown.body.kind, shown.headers) == (200, HTML, SECURITY)


# -- what the page gathers -------------------------------------------------------------------

MINUTELY = Routine(name="minutely", prompt="p", cron="* * * * *", tz="Europe/Berlin")
ON_DEMAND = Routine(name="on-demand", prompt="p")
HOLE = NOON_SLOT = datetime(2026, 11, 30, 11, 30, tzinfo=UTC)
SLOTS = [NOON_SLOT + timedelta(minutes=m) for m in range(-40, 26) if m != 0]  # 65, a hole
FELL = Gap(HOLE, HOLE, 1, GapReason.OVERLAP)


class Plain:
    """A store without the optional gaps and usage ledger."""

    HIDDEN = frozenset({"record_gap", "gaps", "record_usage", "usage_since"})

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name in Plain.HIDDEN:
            raise AttributeError(name)
        return getattr(self.inner, name)


async def _stored() -> MemoryStore:
    store = MemoryStore()
    for slot in SLOTS:
        await store.claim("minutely", slot, slot)
        await store.settle("minutely", slot, Outcome.COMPLETED, 5, usage=Usage(10))
    await store.record_gap("minutely", FELL)
    await store.record_usage("routine", "minutely", NOW - timedelta(hours=1), Usage(1500))
    await store.add_wakeup(
        WakeupRequest(session="chat", prompt="p", fire_at=NOW + timedelta(hours=1)), NOW
    )
    return store


def _gathering(store: Any) -> Scheduler:
    return Scheduler(
        agent=ScriptedAgent(),
        store=store,
        routines=[MINUTELY, ON_DEMAND],
        external_clock=True,
        now=lambda: NOW,
    )


async def test_a_routine_of_a_scheduler_with_its_own_clock_is_never_shown_external() -> None:
    # Nothing armed (a run that ended while its server drains, a routine being re-armed):
    # still not an external clock's, which only the scheduler's mode says.
    own = Scheduler(
        agent=ScriptedAgent(), store=await _stored(), routines=[MINUTELY], now=lambda: NOW
    )
    assert own.statistics().next_due == {}
    (minutely,) = (await gather(own)).routines
    assert minutely.external is False


async def test_the_page_gathers_the_files_the_last_reload_could_not_load(tmp_path: Path) -> None:
    (tmp_path / "new.md").write_text("---\ncolour: red\n---\nx\n")
    scheduler = _scheduler()
    await scheduler.reload_routines(tmp_path)
    assert (await gather(scheduler)).broken_files == (str(tmp_path / "new.md"),)


async def test_the_page_gathers_the_last_fires_the_gaps_and_what_was_spent() -> None:
    store = await _stored()
    await store.set_paused("minutely", True)
    view = await gather(_gathering(store), poll=2.5)
    minutely, on_demand = view.routines
    assert minutely.tz == "Europe/Berlin"
    assert (minutely.paused, minutely.external, on_demand.paused, on_demand.external) == (
        True,
        True,
        False,
        False,
    )
    assert minutely.recent == tuple((await store.history("minutely"))[-50:])
    assert [m for m in minutely.marks if m.kind == "missed" and m.slot < SLOTS[-1]] == [
        Mark(HOLE, "missed", gap=FELL)
    ]
    assert minutely.spent == "1.5k in"
    assert (view.clock_jumps, view.stopping, view.poll) == (0, False, 2.5)
    assert (view.wakeups_problem, view.replicas_problem) == (None, None)
    (chat,) = view.wakeups
    assert (chat.session, chat.over_budget, chat.spent) == ("chat", "", "")


async def test_without_gaps_or_a_ledger_the_claims_say_what_was_spent() -> None:
    view = await gather(_gathering(Plain(await _stored())))
    minutely, _ = view.routines
    assert [m for m in minutely.marks if m.kind == "missed" and m.slot < SLOTS[-1]] == [
        Mark(HOLE, "missed")
    ]
    assert minutely.spent == "650 in"  # 10 by each of the 65 claims
    (chat,) = view.wakeups
    assert (chat.over_budget, chat.spent) == ("", "")


async def test_faults_and_stalls_show_in_place_of_what_could_not_be_read(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(page_module, "READ_DEADLINE", 0.5)
    store = await _stored()
    store.fail("history", StateFault("disk\ngone"), times=1)
    store.fail("paused", StateFault("no"), times=1)
    store.fail("usage_since", StateFault("ledger\nbroken"))
    view = await gather(_gathering(store))
    minutely = view.routines[0]
    assert (minutely.problem, minutely.paused, minutely.spent) == (
        "disk gone",
        False,
        "unknown (ledger broken)",
    )
    assert view.wakeups[0].spent == "unknown (ledger broken)"
    store.fail("usage_since", StateFault("ledger"), times=0)
    for call in ("usage_since", "list_wakeups", "replicas"):
        store.hang(call)
    # One read not answered in time: the render asks the store nothing more (it asked read
    # after read, each its deadline: minutes for a page of a few dozen routines).
    unread = "not read: the store did not answer within 0.5 s"
    view = await gather(_gathering(store))
    assert view.routines[0].spent == "unknown (usage timed out after 0.5 s)"
    assert view.wakeups_problem == f"wake-ups {unread}"
    assert view.replicas_problem == f"replicas {unread}"
    store.hangs.discard("list_wakeups")
    store.hangs.discard("usage_since")
    view = await gather(_gathering(store))  # a render of its own: the store asked again
    assert view.wakeups_problem is None
    assert view.replicas_problem == "replicas timed out after 0.5 s"  # the last read: its own
    assert [group.spent for group in view.wakeups] == [""]  # read: nothing spent
    # With no routine to read first, the sessions' spending is the read that times out.
    store.hang("usage_since")
    alone = Scheduler(
        agent=ScriptedAgent(), store=store, routines=[], external_clock=True, now=lambda: NOW
    )
    view = await gather(alone)
    assert [group.spent for group in view.wakeups] == ["unknown (usage timed out after 0.5 s)"]
    assert view.replicas_problem == f"replicas {unread}"


async def test_a_turn_in_flight_shows_since_when_to_the_second(autojump_clock: Any) -> None:
    scheduler = _gathering(MemoryStore())
    with scheduler.agent.hold("chat"):
        await trio.sleep(90.6)
        with scheduler.agent.hold("new"):
            view = await gather(scheduler)
    since = datetime(2026, 11, 30, 11, 58, 59, tzinfo=UTC)  # 90.6 s before, to the second
    assert view.in_flight == (InFlight("chat", since), InFlight("new", NOW))


@pytest.mark.parametrize(
    ("measured", "shown"),
    [
        (datetime(2026, 7, 7, 8, 59, 59, 998_000, tzinfo=UTC), datetime(2026, 7, 7, 9, tzinfo=UTC)),
        (datetime(2026, 7, 7, 9, 0, 0, 499_999, tzinfo=UTC), datetime(2026, 7, 7, 9, tzinfo=UTC)),
        (
            datetime(2026, 7, 7, 9, 0, 0, 500_000, tzinfo=UTC),
            datetime(2026, 7, 7, 9, 0, 1, tzinfo=UTC),
        ),
    ],
)
def test_a_turn_s_start_is_shown_to_the_nearest_second(measured: datetime, shown: datetime) -> None:
    # Measured back from now by Trio's clock, a turn of the 09:00 slot reads a hair before it.
    assert page_module._to_second(measured) == shown
