"""``GET /wakeups`` a page at a time, on a real server on a loopback port: pages in the order
of the wake-ups' instants (then ids), a ``Link`` to the next while more remain, every bad
``limit`` or ``after`` a 400 in one line, and ``list --url`` reading every page."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote_plus

import pytest
from test_http import assert_error, serving

from trio_routines.cli import served
from trio_routines.cli.client import Server as Client
from trio_routines.cli.output import CliError
from trio_routines.http import paging
from trio_routines.http.paging import MAX_PAGE, PAGE, Page, next_link
from trio_routines.instants import format_iso
from trio_routines.records import Wakeup
from trio_routines.testing import MemoryStore

T = datetime(2099, 1, 1, tzinfo=UTC)
NEXT = re.compile(r'^<(?P<url>[^>]+)>; rel="next"$')


def seeded(count: int, sessions: int = 3) -> MemoryStore:
    """A store holding ``count`` wake-ups: ids in an order other than their instants', and
    instants shared by several (the id decides between them)."""
    store = MemoryStore()
    for n in range(count):
        at = T + timedelta(minutes=(n * 7) % 11)
        store.wakeups.append(
            Wakeup(
                id=f"w{(n * 13) % 97:03d}-{n}", session=f"s{n % sessions}", prompt="p", fire_at=at
            )
        )
    return store


class Counting(MemoryStore):
    """Counts its listings of the wake-ups."""

    listed = 0

    async def list_wakeups(self) -> list[Wakeup]:
        self.listed += 1
        return await super().list_wakeups()


def in_order(wakeups: list[Wakeup]) -> list[str]:
    return [w.id for w in sorted(wakeups, key=lambda w: (format_iso(w.fire_at), w.id))]


async def walk(server: Any, path: str) -> tuple[list[list[str]], list[str]]:
    """Every page from ``path`` on, following the links: the ids of each, and the links."""
    pages: list[list[str]] = []
    links: list[str] = []
    while True:
        reply = await server.call("GET", path)
        assert reply.status == 200, reply.raw
        pages.append([entry["id"] for entry in reply.json])
        link = reply.headers.get("link")
        if link is None:
            return pages, links
        links.append(link)
        found = NEXT.match(link)
        assert found is not None, link
        path = unquote_plus(found["url"])  # the test client quotes what it sends
        assert len(pages) <= 100, "the links never end"


async def test_the_pages_follow_each_other_in_order_and_the_last_says_no_more() -> None:
    store = seeded(25)
    async with serving(store=store) as server:
        pages, links = await walk(server, "/wakeups?limit=10")
    assert [len(page) for page in pages] == [10, 10, 5]
    assert [i for page in pages for i in page] == in_order(store.wakeups)
    # Each link keeps the size asked for and names the last entry shown (its instant as the
    # listing shows it, to the millisecond).
    assert all("limit=10&" in link for link in links)
    assert all(link.startswith("</wakeups?limit=10&after=") for link in links)


async def test_a_session_s_pages_keep_to_it_and_a_page_exactly_full_has_no_next() -> None:
    store = seeded(30)
    wanted = [w for w in store.wakeups if w.session == "s1"]
    async with serving(store=store) as server:
        pages, links = await walk(server, "/wakeups?session=s1&limit=5")
        assert [i for page in pages for i in page] == in_order(wanted)
        assert [len(page) for page in pages] == [5, 5]  # ten of s1: no third page
        assert all(link.startswith("</wakeups?session=s1&limit=5&after=") for link in links)
        alone, _ = await walk(server, "/wakeups?session=s1")  # no limit: one page of PAGE
        assert alone == [in_order(wanted)]


async def test_without_a_limit_a_page_holds_page_wake_ups_and_the_link_names_no_limit() -> None:
    store = seeded(PAGE + 3, sessions=PAGE + 3)
    async with serving(store=store) as server:
        pages, links = await walk(server, "/wakeups")
    assert [len(page) for page in pages] == [PAGE, 3]
    assert [i for page in pages for i in page] == in_order(store.wakeups)
    (link,) = links
    assert link.startswith("</wakeups?after=")


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("limit=0", f"limit must be a whole number from 1 to {MAX_PAGE}: '0'"),
        (f"limit={MAX_PAGE + 1}", f"limit must be a whole number from 1 to {MAX_PAGE}: '10001'"),
        ("limit=-5", "limit must be a whole number"),
        ("limit=1e3", "limit must be a whole number"),
        ("limit=%EF%BC%95", "limit must be a whole number"),  # a full-width digit
        ("after=w001", "after must be a wake-up's instant and id"),
        ("after=soon,w001", "after must be a wake-up's instant and id"),
        ("after=2099-01-01T00:00:00Z,", "after must be a wake-up's instant and id"),
        (f"after=2099-01-01T00:00:00Z,{'x' * 129}", "after must be a wake-up's instant and id"),
        ("limit=5&limit=6", "the query parameter 'limit' is repeated"),
    ],
)
async def test_a_bad_limit_or_after_is_one_line_and_reads_nothing(query: str, said: str) -> None:
    store = Counting()
    async with serving(store=store, wakeups=False) as server:  # no wake loop listing them
        before = store.listed
        message = assert_error(await server.call("GET", f"/wakeups?{query}"), 400)
        assert store.listed == before
        assert (await server.call("GET", "/wakeups")).status == 200  # as the same server lists
        assert store.listed == before + 1
    assert message.startswith(said), message
    assert "\n" not in message


async def test_a_page_of_one_and_ids_of_any_form_up_to_their_bound_page_through() -> None:
    store = MemoryStore()
    ids = ["a,b", "x" * 128, "c"]  # a comma in an id (stored by hand), the longest id taken
    for n, wakeup_id in enumerate(ids):
        at = T + timedelta(minutes=n)
        store.wakeups.append(Wakeup(id=wakeup_id, session="s", prompt="p", fire_at=at))
    async with serving(store=store) as server:
        pages, _ = await walk(server, "/wakeups?limit=1")
    assert pages == [[i] for i in ids]


async def test_an_after_past_the_last_is_an_empty_page_and_the_link_is_ascii() -> None:
    store = seeded(4)
    async with serving(store=store) as server:
        reply = await server.call("GET", "/wakeups?after=2100-01-01T00:00:00.000Z,zzz")
        assert (reply.status, reply.json, reply.headers.get("link")) == (200, [], None)
    (last,) = sorted(store.wakeups, key=lambda w: (w.fire_at, w.id))[-1:]
    name, value = next_link("/räume x", "chat:1 ü", Page(limit=2, asked_limit="2"), last)
    assert name == "Link"
    value.encode("ascii")  # a header, whatever the mount point and the session
    assert value.startswith("</r%C3%A4ume%20x/wakeups?session=chat%3A1+%C3%BC&limit=2&after=")


async def test_list_over_http_reads_every_page(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(paging, "PAGE", 7)
    store = seeded(30)
    async with serving(store=store) as server:
        view = await served.served_view(Client(f"http://127.0.0.1:{server.port}", token=None))
    assert [w.id for w in view.wakeups] == in_order(store.wakeups)


def answering(monkeypatch: pytest.MonkeyPatch, wakeups: Any) -> list[str]:
    """A server (``Client.get``) with no routines, whose ``GET /wakeups`` answers
    ``wakeups(path)``; the wake-up paths asked for."""
    asked: list[str] = []

    async def get(_client: Client, path: str) -> Any:
        if path == "/routines":
            return []
        asked.append(path)
        return wakeups(path)

    monkeypatch.setattr(Client, "get", get)
    return asked


CLIENT = Client("http://127.0.0.1:9", token=None)


def entry(n: int) -> dict[str, str]:
    return {"id": f"w{n:06d}", "session": "s", "fireAt": format_iso(T + timedelta(minutes=n))}


@pytest.mark.parametrize(
    ("size", "lists", "asks"),
    [
        (2, [[entry(3), entry(1), entry(2)]], 1),  # longer than asked for, in its store's order
        (2, [[entry(2), entry(1)]], 1),  # not in order
        (2, [[entry(1), entry(2)]] * 2, 2),  # a page's worth, in order: its repeat ends it
        (1, [[entry(1)]] * 2, 2),  # the repeat begins with the entry the next was to follow
        # The list grew past a page between two asks: the whole of it, as sent last.
        (2, [[entry(1), entry(2)], [entry(1), entry(2), entry(3)]], 2),
    ],
)
async def test_a_server_that_does_not_page_is_read_as_it_answers(
    monkeypatch: pytest.MonkeyPatch, size: int, lists: list[list[dict[str, str]]], asks: int
) -> None:
    # An older server answers the whole list whatever the query: taken once, as it came.
    monkeypatch.setattr(paging, "PAGE", size)
    answers = iter(lists)
    asked = answering(monkeypatch, lambda path: next(answers))
    view = await served.served_view(CLIENT)
    # As the pages would have it: in the order of the instants, then of the ids.
    assert [w.id for w in view.wakeups] == sorted(e["id"] for e in lists[-1])
    assert len(asked) == asks


def test_a_missing_key_is_named_cut_to_64_characters() -> None:
    assert served.shape_problem(KeyError("k" * 100)) == f"no {'k' * 64!r} where one was expected"


@pytest.mark.parametrize(
    ("page", "said"),
    [
        ({"not": "a list"}, "the wake-ups are not a list"),
        ([{"id": "w1", "session": "s"}], "a wake-up without its instant and id"),
        (
            [{"id": 5, "session": "s", "fireAt": "2099-01-01T00:00:00.000Z"}],
            "a wake-up without its instant and id",
        ),
        (["w1"], "a wake-up without its instant and id"),
    ],
)
async def test_a_page_of_the_wrong_shape_is_one_line(
    monkeypatch: pytest.MonkeyPatch, page: Any, said: str
) -> None:
    answering(monkeypatch, lambda path: page)
    with pytest.raises(CliError) as refused:
        await served.served_view(CLIENT)
    assert (
        str(refused.value) == f"{CLIENT.url}: the answer is not a trio_routines server's ({said})"
    )


async def test_pages_without_end_are_refused_after_a_store_s_worth(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(paging, "PAGE", 2)
    monkeypatch.setattr(served, "MAX_PENDING", 6)
    counter = iter(range(10**6))
    asked = answering(monkeypatch, lambda path: [entry(next(counter)), entry(next(counter))])
    with pytest.raises(CliError, match=r"more than 12 wake-ups listed\)$"):
        await served.served_view(CLIENT)
    assert len(asked) == 2 * 6 // 2 + 1
