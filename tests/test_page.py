"""The status page, server side: the pure renderer, and the page on a real loopback server.

The browser's view of the same page is in ``test_page_browser.py``.
"""

from __future__ import annotations

import collections
import http.client
import json
import re
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import attrs
import pytest
import trio

from trio_routines.cron import next_run
from trio_routines.http import expected as expected_module
from trio_routines.http import make_app, serve_http
from trio_routines.http.expected import COUNT, ExpectedSlots
from trio_routines.http.page import CSP, gather
from trio_routines.http.render import describe, main_html, routine_html
from trio_routines.http.signin import COOKIE, cookie_value
from trio_routines.http.views import (
    MAX_MARKS,
    SESSIONS_SHOWN,
    WINDOW,
    Mark,
    PageView,
    RoutineView,
    timeline,
)
from trio_routines.instants import format_iso
from trio_routines.records import Fire, Origin, OriginKind, Outcome
from trio_routines.replicas import ReplicaInfo
from trio_routines.routines import Routine
from trio_routines.scheduler import Scheduler
from trio_routines.testing import Hang, MemoryStore, ScriptedAgent
from trio_routines.wakeups import WakeupRequest

NOW = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)
HOSTILE = "<svg onload=alert(1)>\"'&\x1b[31m"
REASON = "</script><script>alert('x')</script>\"\x07 & more"
TOKEN = "page-token-5d1e"


def fire(slot: datetime, outcome: Outcome | None, ms: int | None = 40) -> Fire:
    return Fire(slot=slot, fired_at=slot + timedelta(milliseconds=12), outcome=outcome, ms=ms)


# -- the pure renderer ---------------------------------------------------------------------


def test_timeline_marks_claims_and_missed_slots() -> None:
    hours = [NOW.replace(minute=0, second=0) - timedelta(hours=h) for h in range(5, -1, -1)]
    fires = [fire(hours[1], Outcome.COMPLETED), fire(hours[3], Outcome.FAILED)]
    marks, since = timeline(hours, fires, NOW)
    # Before the oldest kept claim nothing is known; after it, a slot without a claim is missed.
    assert [(m.slot, m.kind) for m in marks] == [
        (hours[1], "completed"),
        (hours[2], "missed"),
        (hours[3], "failed"),
        (hours[4], "missed"),
    ]  # hours[5] is half a minute old: its claim may be on its way
    end = NOW.replace(second=0) + timedelta(minutes=1)  # the axis ends with the minute
    assert since == hours[1] - (end - hours[1]) / 20  # fitted to the marks, a little room first


def test_timeline_never_calls_a_fresh_slot_missed() -> None:
    fresh = NOW - timedelta(seconds=30)  # due half a minute ago: its claim may be on its way
    older = NOW - timedelta(minutes=5)
    marks, _ = timeline([older, fresh], [fire(older, Outcome.COMPLETED)], NOW)
    assert [m.kind for m in marks] == ["completed"]


def test_timeline_without_history_shows_no_missed_slots() -> None:
    slots = [NOW - timedelta(hours=h) for h in (3, 2, 1)]
    end = NOW.replace(second=0) + timedelta(minutes=1)
    assert timeline(slots, [], NOW) == ((), end - timedelta(hours=24))


def test_timeline_keeps_the_last_50_slots_and_starts_at_the_oldest() -> None:
    slots = [NOW - timedelta(minutes=m) for m in range(120, 0, -1)]
    fires = [fire(slot, Outcome.COMPLETED) for slot in slots]
    marks, since = timeline(slots, fires, NOW)
    assert len(marks) == MAX_MARKS
    assert marks[-1].slot == slots[-1]
    assert marks[0].slot == slots[-MAX_MARKS]
    end = NOW.replace(second=0) + timedelta(minutes=1)
    assert since == slots[-MAX_MARKS] - (end - slots[-MAX_MARKS]) / 20


def test_timeline_draws_claims_off_the_grid_and_running_ones() -> None:
    odd = NOW - timedelta(minutes=7, milliseconds=5)
    marks, _ = timeline([], [fire(odd, None)], NOW)
    assert [(m.slot, m.kind) for m in marks] == [(odd, "running")]


def test_timeline_leaves_out_a_claim_after_its_end_up_to_the_calendars_last_minute() -> None:
    # A claim of 9999-12-31T23:59 (planted, or stamped by a clock that ran far ahead) made
    # the page's span start past the calendar: every GET / and /ui/state answered 500.
    older = NOW - timedelta(minutes=5)
    ahead = [NOW + timedelta(minutes=2), datetime(9999, 12, 31, 23, 59, tzinfo=UTC)]
    end = NOW.replace(second=0) + timedelta(minutes=1)
    for last in ahead:
        marks, since = timeline([older], [fire(older, Outcome.COMPLETED), fire(last, None)], NOW)
        assert [(m.slot, m.kind) for m in marks] == [(older, "completed")]
        assert since == older - (end - older) / 20
        assert timeline([], [fire(last, None)], NOW) == ((), end - WINDOW)


def test_describe_says_slot_fired_lateness_duration_and_reason() -> None:
    slot = NOW - timedelta(hours=1)
    failed = attrs.evolve(fire(slot, Outcome.FAILED, 1500), fired_at=slot + timedelta(seconds=2))
    failed = attrs.evolve(failed, error="exit status 2: API key expired")
    text = describe(Mark(slot, "failed", failed))
    assert f"slot {format_iso(slot)}" in text
    assert f"fired {format_iso(slot + timedelta(seconds=2))}" in text
    assert "late 2.000 s" in text
    assert "took 1.5 s" in text
    assert "failed" in text
    assert "reason: exit status 2: API key expired" in text
    assert describe(Mark(slot, "missed")) == f"slot {format_iso(slot)} — missed (no claim)"


def _view(**changes: Any) -> RoutineView:
    base = RoutineView(
        name="digest",
        cron="0 9 * * *",
        tz="Europe/Berlin",
        resolved=None,
        next_due=NOW + timedelta(minutes=4, seconds=10),
        paused=False,
        marks=(),
        recent=(),
        since=NOW - timedelta(hours=24),
    )
    return attrs.evolve(base, **changes)


def test_every_state_of_a_routine_reads_without_colour() -> None:
    slot = NOW - timedelta(hours=2)
    outcomes = [Outcome.COMPLETED, Outcome.FAILED, Outcome.SKIPPED, Outcome.INTERRUPTED, None]
    fires = tuple(fire(slot + timedelta(minutes=i), o) for i, o in enumerate(outcomes))
    html = routine_html(_view(recent=fires), NOW)
    strip = re.search(r'<p class="strip"[^>]*>(.*?)</p>', html)
    assert strip is not None
    assert re.findall(r">(.)</span>", strip.group(1)) == ["✓", "✗", "·", "⊘", "▶"]
    assert "in 4 min" in html
    assert "never fired" in routine_html(_view(), NOW)
    assert "never fires again" in routine_html(_view(next_due=None), NOW)
    paused = routine_html(_view(paused=True), NOW)
    assert "paused" in paused
    assert "in 4 min" not in paused
    assert "on demand" in routine_html(_view(cron=None, tz=None, next_due=None), NOW)
    assert "= <code>17 9 * * *</code>" in routine_html(
        _view(cron="H 9 * * *", resolved="17 9 * * *"), NOW
    )


def test_hostile_names_reasons_and_crons_are_escaped_everywhere() -> None:
    slot = NOW - timedelta(hours=1)
    failed = fire(slot, Outcome.FAILED)
    failed = attrs.evolve(failed, error=REASON, output=REASON + "\n\x1b[2J" + HOSTILE)
    view = _view(
        name=HOSTILE,
        cron=HOSTILE,
        tz=HOSTILE,
        marks=(Mark(slot, "failed", failed),),
        recent=(failed,),
        problem=REASON,
    )
    page = PageView(
        now=NOW,
        routines=(view,),
        in_flight=(),
        wakeups=(),
        clock_jumps=0,
        store=HOSTILE,
        stopping=False,
        poll=5,
        wakeups_problem=REASON,
    )
    html = main_html(page)
    for raw in ("<svg onload", "<script", "</script", "\x1b", "\x07", "'x'"):
        assert raw not in html
    assert "&lt;svg onload=alert(1)&gt;&quot;&#x27;&amp;\\x1b[31m" in html
    assert "&lt;/script&gt;&lt;script&gt;alert(&#x27;x&#x27;)" in html
    # The kept output: behind a click, escaped, its line breaks kept.
    assert (
        "<pre>&lt;/script&gt;&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&quot;\\x07 "
        "&amp; more\n\\x1b[2J&lt;svg onload=alert(1)&gt;&quot;&#x27;&amp;\\x1b[31m</pre>"
    ) in html
    assert '<details class="output" data-key="&lt;svg onload' in html
    # Every tag in the output is one of ours.
    tags = set(re.findall(r"<([a-zA-Z0-9]+)", html))
    assert tags <= {
        "p", "code", "time", "section", "h2", "h3", "ul", "li", "svg", "g", "circle", "path",
        "rect", "line", "title", "span", "article", "div", "details", "summary", "pre",
    }  # fmt: skip


def test_lone_surrogates_from_the_state_are_shown_escaped_and_the_page_is_utf8() -> None:
    # A state file's JSON can name one ("\\ud800"): no UTF-8 page can carry it as it is.
    lone = chr(0xD800)
    failed = attrs.evolve(fire(NOW - timedelta(hours=1), Outcome.FAILED), error=f"e{lone}")
    failed = attrs.evolve(failed, output=f"o{lone}", replica=f"r{lone}")
    member = ReplicaInfo(
        id="web-1:1", version=f"v{lone}", host=f"h{lone}", pid=1, started=NOW, last_seen=NOW
    )
    page = PageView(
        now=NOW,
        routines=(_view(recent=(failed,), problem=f"p{lone}"),),
        in_flight=(),
        wakeups=(),
        clock_jumps=0,
        store=f"s{lone}",
        stopping=False,
        poll=5,
        replicas=(member,),
    )
    html = main_html(page)
    html.encode("utf-8")  # (a lone surrogate left in it would raise)
    for shown in ("e", "p", "s", "v"):
        assert f"{shown}\\ud800" in html


def test_the_files_the_last_reload_could_not_load_are_named_and_only_then() -> None:
    page = PageView(
        now=NOW,
        routines=(),
        in_flight=(),
        wakeups=(),
        clock_jumps=0,
        store="s",
        stopping=False,
        poll=5,
        broken_files=("routines/new.md", "routines/<b>.md"),
    )
    assert (
        '<p class="problem">2 routine file(s) the last reload could not load: '
        "<code>routines/new.md</code>, <code>routines/&lt;b&gt;.md</code> (skipped, or the "
        "version loaded before kept; the log says why, and the next start refuses them)</p>"
    ) in main_html(page)
    assert "could not load" not in main_html(attrs.evolve(page, broken_files=()))


def test_only_the_newest_kept_output_is_shown_and_none_without_one() -> None:
    old, new = NOW - timedelta(hours=2), NOW - timedelta(hours=1)
    fires = (
        attrs.evolve(fire(old, Outcome.COMPLETED), output="older"),
        attrs.evolve(fire(new, Outcome.COMPLETED), output="newer"),
        fire(NOW, Outcome.COMPLETED),  # kept nothing: the newest that did is shown
    )
    html = routine_html(_view(recent=fires), NOW)
    assert html.count("<details") == 1
    assert "<pre>newer</pre>" in html
    assert "older" not in html
    assert "<details" not in routine_html(_view(recent=(fire(NOW, Outcome.COMPLETED),)), NOW)


# -- the page on a real server --------------------------------------------------------------


@attrs.frozen
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


@attrs.frozen
class Page:
    port: int
    scheduler: Scheduler
    store: MemoryStore

    async def call(
        self, method: str, path: str, body: bytes | None = None, **headers: str
    ) -> Reply:
        sent = {key.replace("_", "-"): value for key, value in headers.items()}

        def go() -> Reply:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
            try:
                conn.request(method, path, body=body, headers=sent)
                answer = conn.getresponse()
                found = {k.lower(): v for k, v in answer.getheaders()}
                return Reply(answer.status, found, answer.read())
            finally:
                conn.close()

        return await trio.to_thread.run_sync(go)


ROUTINES = [
    Routine(name="hourly", prompt="p", cron="H * * * *"),
    Routine(name="adhoc", prompt="p"),
    Routine(name="never", prompt="p", cron="0 0 31 2 *"),
    Routine(name=HOSTILE, prompt="p", cron="*/5 * * * *"),
]


@asynccontextmanager
async def page_server(
    token: str | None = None, clock: Callable[[], datetime] | None = None
) -> AsyncIterator[Page]:
    store = MemoryStore()
    now = (clock or (lambda: datetime.now(UTC)))().replace(second=0, microsecond=0)
    hour = now.replace(minute=39)  # where "H * * * *" puts the routine named "hourly"
    for back, outcome in ((4, Outcome.COMPLETED), (3, Outcome.FAILED), (2, Outcome.SKIPPED)):
        slot = hour - timedelta(hours=back)
        await store.claim("hourly", slot, slot)
        error = REASON if outcome is Outcome.FAILED else None
        await store.settle("hourly", slot, outcome, 25, error=error)
    await store.claim("adhoc", now - timedelta(minutes=3), now)  # unsettled: running
    await store.set_paused("never", True)
    await store.claim(HOSTILE, now - timedelta(minutes=10), now)
    await store.settle(HOSTILE, now - timedelta(minutes=10), Outcome.INTERRUPTED)
    agent = ScriptedAgent()
    scheduler = Scheduler(
        agent=agent,
        store=store,
        routines=ROUTINES,
        external_clock=True,
        **({} if clock is None else {"now": clock}),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        port = await nursery.start(partial(serve_http, scheduler, "127.0.0.1", 0, token=token))
        yield Page(port, scheduler, store)
        scheduler.stop(grace=0)


def assert_page_headers(reply: Reply) -> None:
    assert reply.headers["content-security-policy"] == CSP
    assert "frame-ancestors 'none'" in CSP
    assert "script-src 'self'" in CSP
    assert "unsafe-inline" not in CSP
    assert reply.headers["cache-control"] == "no-store"
    assert reply.headers["x-content-type-options"] == "nosniff"
    assert reply.headers["x-frame-options"] == "DENY"


async def test_the_page_shows_every_routine_in_flight_turns_and_wakeups() -> None:
    async with page_server() as page:
        agent = page.scheduler.agent.agent
        assert isinstance(agent, ScriptedAgent)
        agent.script(Hang(), session="routine:adhoc")
        assert await page.scheduler.start_run("adhoc")
        reply = await page.call("GET", "/")
        assert reply.status == 200
        assert reply.headers["content-type"] == "text/html; charset=utf-8"
        assert_page_headers(reply)
        html = reply.text
        for name in ("hourly", "adhoc", "never"):
            assert f'<h3 class="name">{name}</h3>' in html
        assert "&lt;svg onload=alert(1)&gt;" in html
        assert "<svg onload" not in html
        assert '<article class="routine paused"><h3 class="name">never</h3>' in html
        assert html.count('<span class="paused">paused</span>') == 1
        assert "never fires again" not in html  # paused says more
        assert "(external clock)" in html  # the scheduler runs no cron loop here
        assert "on demand" in html
        assert 'class="mark o-completed"' in html
        assert 'class="mark o-failed"' in html
        assert 'class="mark o-skipped"' in html
        assert 'class="mark o-interrupted"' in html
        assert 'class="mark o-running"' in html
        assert 'class="mark o-missed"' in html  # the hourly slot after the last claim
        assert "<code>H * * * *</code> = <code>39 * * * *</code>" in html
        assert "<code>routine:adhoc</code> running since" in html
        assert "store <code>MemoryStore</code>" in html
        assert "reason: &lt;/script&gt;&lt;script&gt;alert(&#x27;x&#x27;)" in html
        assert "</script><script>" not in html
        assert 'src="/ui/page.js"' in html
        assert 'href="/ui/page.css"' in html
        page.scheduler.stop(grace=0)


async def test_state_json_carries_the_same_main_and_a_version() -> None:
    frozen = datetime.now(UTC).replace(second=30)  # no minute boundary between the two reads
    async with page_server(clock=lambda: frozen) as page:
        first = await page.call("GET", "/ui/state")
        assert first.status == 200
        assert first.headers["content-type"] == "application/json"
        state = json.loads(first.body)
        assert set(state) == {"version", "main", "now"}
        assert '<h3 class="name">hourly</h3>' in state["main"]
        again = json.loads((await page.call("GET", "/ui/state")).body)
        assert again["version"] == state["version"]  # nothing changed: the page keeps its DOM
        slot = frozen.replace(microsecond=0) - timedelta(seconds=1)
        await page.scheduler.fire("adhoc", slot)  # busy: the old unsettled claim is not held
        changed = json.loads((await page.call("GET", "/ui/state")).body)
        assert changed["version"] != state["version"]


async def test_assets_are_served_from_the_package() -> None:
    async with page_server(token=TOKEN) as page:  # no token needed: they hold no data
        css = await page.call("GET", "/ui/page.css")
        js = await page.call("GET", "/ui/page.js")
        assert css.status == js.status == 200
        assert css.headers["content-type"].startswith("text/css")
        assert js.headers["content-type"].startswith("text/javascript")
        assert b"prefers-color-scheme: dark" in css.body
        assert b"ui/state" in js.body
        assert b"eval(" not in js.body
        assert (await page.call("POST", "/ui/page.js")).status == 405


async def test_a_token_turns_the_page_into_a_sign_in_form_and_a_cookie() -> None:
    async with page_server(token=TOKEN) as page:
        anonymous = await page.call("GET", "/")
        assert anonymous.status == 401
        assert_page_headers(anonymous)
        assert 'action="/ui/login"' in anonymous.text
        assert "hourly" not in anonymous.text
        assert (await page.call("GET", "/ui/state")).status == 401

        form = "application/x-www-form-urlencoded"
        wrong = await page.call("POST", "/ui/login", b"token=nope", content_type=form)
        assert wrong.status == 401
        assert "wrong token" in wrong.text
        assert "set-cookie" not in wrong.headers

        good = await page.call("POST", "/ui/login", f"token={TOKEN}".encode(), content_type=form)
        assert good.status == 303
        assert good.headers["location"] == "/"
        cookie = good.headers["set-cookie"]
        value = cookie.partition(";")[0].removeprefix(f"{COOKIE}=")
        until = int(value.partition(".")[0])
        assert value == cookie_value(TOKEN.encode(), until)
        assert 0 < until - time.time() <= 12 * 3600  # held for twelve hours
        assert "HttpOnly" in cookie
        assert "SameSite=Strict" in cookie
        assert "Path=/;" in cookie
        assert TOKEN not in cookie
        assert all(TOKEN not in v for v in good.headers.values())

        jar = f"{COOKIE}={value}"
        shown = await page.call("GET", "/", cookie=jar)
        assert shown.status == 200
        assert '<h3 class="name">hourly</h3>' in shown.text
        assert (await page.call("GET", "/ui/state", cookie=jar)).status == 200
        assert (await page.call("GET", "/routines", cookie=jar)).status == 200  # a read
        fire = b'{"name": "adhoc", "slot": "2026-01-01T00:00:00.000Z"}'
        refused = await page.call(
            "POST", "/fire", fire, cookie=jar, content_type="application/json"
        )
        assert refused.status == 401  # a cookie never changes state
        forged = f"{COOKIE}={cookie_value(b'another token', until)}"
        assert (await page.call("GET", "/", cookie=forged)).status == 401
        assert (await page.call("GET", "/ui/state", cookie=TOKEN)).status == 401
        bearer = await page.call("GET", "/", authorization=f"Bearer {TOKEN}")
        assert bearer.status == 200

        out = await page.call("POST", "/ui/logout")
        assert out.status == 303
        assert "Max-Age=0" in out.headers["set-cookie"]


async def test_without_a_token_the_page_answers_loopback_names_only() -> None:
    async with page_server() as page:
        assert (await page.call("GET", "/", host="localhost:1")).status == 200
        rebound = await page.call("GET", "/", host="attacker.example")
        assert rebound.status == 421
        assert (await page.call("GET", "/ui/state", host="attacker.example")).status == 421


async def test_the_page_works_below_a_mount_point() -> None:
    scheduler = Scheduler(agent=ScriptedAgent(), store=MemoryStore(), routines=ROUTINES[:1])
    app = make_app(scheduler)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "GET",
        "path": "/scheduler/",
        "root_path": "/scheduler",
        "headers": [(b"host", b"127.0.0.1")],
        "query_string": b"",
    }
    await app(scope, receive, send)
    assert sent[0]["status"] == 200
    html = sent[1]["body"].decode()
    assert 'href="/scheduler/ui/page.css"' in html
    assert 'data-base="/scheduler/"' in html


@pytest.mark.parametrize("path", ["/ui/login", "/ui/logout"])
async def test_sign_in_routes_take_posts_only(path: str) -> None:
    async with page_server(token=TOKEN) as page:
        reply = await page.call("GET", path)
        assert reply.status == 405
        assert reply.headers["allow"] == "POST"


async def test_a_stalled_store_shows_as_unavailable_not_a_hang(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from trio_routines.http import page as page_module

    monkeypatch.setattr(page_module, "READ_DEADLINE", 0.2)
    async with page_server() as page:

        async def stall(*_args: object) -> list[Fire]:
            await trio.sleep_forever()
            raise AssertionError

        monkeypatch.setattr(page.store, "history", stall)
        reply = await page.call("GET", "/")
        assert reply.status == 200
        assert "history unavailable: history timed out after 0.2 s" in reply.text
        # Its fires are unknown, not none: it may have fired dozens of times.
        assert "never fired" not in reply.text
        assert '<span class="none">unknown</span>' in reply.text


async def test_the_page_reads_every_store(store_factory: Any) -> None:
    store = store_factory()
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    slot = now.replace(minute=0) - timedelta(hours=1)
    assert (await store.claim("hourly", slot, slot)).taken
    await store.settle("hourly", slot, Outcome.FAILED, 30, error="exit status 2: key expired")
    scheduler = Scheduler(
        agent=ScriptedAgent(), store=store, routines=ROUTINES[:1], external_clock=True
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        port = await nursery.start(partial(serve_http, scheduler, "127.0.0.1", 0))
        reply = await Page(port, scheduler, store).call("GET", "/")
        scheduler.stop(grace=0)
    assert reply.status == 200
    assert 'class="mark o-failed"' in reply.text
    assert "reason: exit status 2: key expired" in reply.text
    label = re.search(r"store <code>([^<]*)</code>", reply.text)
    assert label is not None
    kind = type(store).__name__
    if kind == "DirectoryStore":
        assert label.group(1) == f"state directory {store.root}"
    elif kind == "PostgresStore":
        assert label.group(1).startswith("postgresql://127.0.0.1:5432/")
        assert "@" not in label.group(1)  # never a user or a password


async def test_a_sign_in_form_over_its_limit_is_refused_unread() -> None:
    async with page_server(token=TOKEN) as page:
        form = "application/x-www-form-urlencoded"
        big = b"token=" + b"x" * 5000
        reply = await page.call("POST", "/ui/login", big, content_type=form)
        assert reply.status == 413
        assert "set-cookie" not in reply.headers
        wrong_kind = await page.call("POST", "/ui/login", b"{}", content_type="application/json")
        assert wrong_kind.status == 415


async def test_a_sign_in_form_naming_the_token_twice_is_refused() -> None:
    # The last field won: a wrong token, then the right one, signed in.
    async with page_server(token=TOKEN) as page:
        form = "application/x-www-form-urlencoded"
        for body in (f"token=nope&token={TOKEN}", f"token={TOKEN}&token={TOKEN}"):
            reply = await page.call("POST", "/ui/login", body.encode(), content_type=form)
            assert reply.status == 400
            assert json.loads(reply.body) == {"error": "the form names a field twice"}
            assert "set-cookie" not in reply.headers


async def test_the_page_lists_the_live_replicas_and_who_fired_a_slot() -> None:
    async with page_server() as page:
        html = (await page.call("GET", "/")).text
        assert '<h2 id="h-replicas">Replicas</h2>' in html
        replicas = html.split('<ul class="replicas">', 1)[1].split("</ul>", 1)[0]
        assert f"<code>{page.scheduler.replica}</code>" in replicas
        assert "0 in flight" in replicas


def test_describe_names_the_replica_that_fired_it() -> None:
    done = Fire(slot=NOW, fired_at=NOW, outcome=Outcome.COMPLETED, ms=5, replica="web-2:77")
    assert " — by web-2:77" in describe(Mark(NOW, "completed", done))


async def test_a_timeline_s_slot_searches_are_bounded_by_its_marks_not_the_day_s_slots(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: collections.Counter[str | None] = collections.Counter()

    def counting(
        cron: str, tz: str | None, after: datetime, seed: str | None = None
    ) -> datetime | None:
        calls[seed] += 1
        return next_run(cron, tz, after, seed)

    monkeypatch.setattr(expected_module, "next_run", counting)
    crons = {"minutely": "* * * * *", "night": "* 0-5 * * *", "sparse": "*/7 * * * *"}
    store = MemoryStore()
    clock = [NOW]
    for name in crons:
        # Sparse history: two claims 23 hours apart, so the whole day is the timeline's span
        # (a walk of it: 1,380 searches for the every-minute cron).
        for slot in (NOW.replace(second=0) - timedelta(hours=23), NOW.replace(second=0)):
            await store.claim(name, slot, slot)
            await store.settle(name, slot, Outcome.COMPLETED, 5)
    routines = [Routine(name=name, prompt="p", cron=cron) for name, cron in crons.items()]
    scheduler = Scheduler(
        agent=ScriptedAgent(),
        store=store,
        routines=routines,
        external_clock=True,
        now=lambda: clock[0],
    )
    expected = ExpectedSlots()

    async def render() -> dict[str, tuple[Mark, ...]]:
        calls.clear()
        view = await gather(scheduler, expected=expected)
        return {row.name: row.marks for row in view.routines}

    first = await render()
    assert sorted(calls) == sorted(crons)
    assert max(calls.values()) <= 2 * COUNT + 12  # per routine, for any density
    for name, cron in crons.items():
        # The same marks as the walk of every slot of the span would draw.
        fires = await store.history(name)
        start = max(NOW - WINDOW, fires[0].slot)
        every, at = [], next_run(cron, None, start - timedelta(milliseconds=1))
        while at is not None and at <= NOW:
            every.append(at)
            at = next_run(cron, None, at)
        assert first[name] == timeline(every, fires, NOW)[0]
        assert len(first[name]) == MAX_MARKS
    # Refreshes within the minute search nothing; a minute later, one slot each.
    assert await render() == first
    assert sum(calls.values()) == 0
    clock[0] = NOW + timedelta(minutes=1)
    await render()
    assert max(calls.values()) <= 2


async def test_pending_wakeups_show_who_asked_and_the_deepest_chain_escaped() -> None:
    store = MemoryStore()
    origins = [
        Origin(kind=OriginKind.ROUTINE, routine=HOSTILE, slot=NOW, depth=1),
        Origin(kind=OriginKind.WAKEUP, parent="w-1", depth=2),
        Origin(kind=OriginKind.WAKEUP, parent="w-2", depth=5),
        Origin(kind=OriginKind.HTTP),
        None,
    ]
    for origin in origins:
        asked = WakeupRequest(
            session="chat", prompt="p", fire_at=NOW + timedelta(hours=1), origin=origin
        )
        await store.add_wakeup(asked, NOW)
    await store.add_wakeup(
        WakeupRequest(session="quiet", prompt="p", fire_at=NOW + timedelta(hours=1)), NOW
    )
    scheduler = Scheduler(agent=ScriptedAgent(), store=store, external_clock=True, now=lambda: NOW)
    view = await gather(scheduler)
    chat, quiet = view.wakeups
    assert chat.origins == (
        ("http", 1),
        (f"routine {HOSTILE}", 1),
        ("unknown", 1),
        ("wake-up", 2),
    )
    assert (chat.count, chat.deepest) == (5, 5)
    assert (quiet.origins, quiet.deepest) == ((("unknown", 1),), 0)
    html = main_html(view)
    assert (
        "2026-11-30 13:00:30Z</time> · asked by http ×1, routine "
        "&lt;svg onload=alert(1)&gt;&quot;&#x27;&amp;\\x1b[31m ×1, unknown ×1, wake-up ×2 · "
        "chain depth up to 5</li>"
    ) in html
    assert "<svg onload" not in html
    assert "\x1b" not in html
    assert "<code>chat</code>: 5 pending, next <time" in html
    assert "13:00:30Z</time> · asked by unknown ×1</li>" in html


async def test_a_sessions_recurring_wakeups_show_when_the_last_expires() -> None:
    store = MemoryStore()
    for days in (3, 9):
        until = NOW + timedelta(days=days)
        asked = WakeupRequest(session="chat", prompt="p", cron="0 * * * *", until=until)
        await store.add_wakeup(asked, NOW)
    once = WakeupRequest(session="once", prompt="p", fire_at=NOW + timedelta(hours=1))
    await store.add_wakeup(once, NOW)
    scheduler = Scheduler(agent=ScriptedAgent(), store=store, external_clock=True, now=lambda: NOW)
    view = await gather(scheduler)
    chat, single = view.wakeups
    assert chat.until == NOW + timedelta(days=9)
    assert single.until is None
    html = main_html(view)
    assert "· recurring until <time" in html
    assert html.count("recurring until") == 1


async def test_the_page_shows_the_sessions_due_soonest_and_counts_the_rest() -> None:
    # 200,000 pending wake-ups made a page of 42 MB, each render seconds of CPU, and the
    # server's event loop stood still meanwhile.
    store = MemoryStore()
    sessions = SESSIONS_SHOWN + 3
    for n in range(sessions):  # s0000 is due last, s0001 first, then in order
        due = NOW + timedelta(minutes=(n - 1) % sessions + 1)
        for _ in range(1 + (n == 0)):
            asked = WakeupRequest(session=f"s{n:04d}", prompt="p", fire_at=due)
            await store.add_wakeup(asked, NOW)
    scheduler = Scheduler(agent=ScriptedAgent(), store=store, external_clock=True, now=lambda: NOW)
    view = await gather(scheduler)
    assert [group.session for group in view.wakeups] == [
        f"s{n:04d}" for n in range(1, SESSIONS_SHOWN + 1)
    ]
    assert view.wakeups_left_out == (3, 4)  # s0000 (2 wake-ups), s0201, s0202
    html = main_html(view)
    assert html.count("pending, next") == SESSIONS_SHOWN
    assert (
        '<li class="more">and 3 more sessions (4 wake-ups), due later: <code>list</code> '
        "shows them all</li>"
    ) in html
    # As many as it shows: all of them, none said to be left out.
    await store.remove_wakeup((await store.list_wakeups())[0].id)
    for n in (0, SESSIONS_SHOWN + 1, SESSIONS_SHOWN + 2):
        for wakeup in [w for w in await store.list_wakeups() if w.session == f"s{n:04d}"]:
            await store.remove_wakeup(wakeup.id)
    view = await gather(scheduler)
    assert len(view.wakeups) == SESSIONS_SHOWN
    assert view.wakeups_left_out == (0, 0)
    assert 'class="more"' not in main_html(view)
