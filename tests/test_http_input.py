"""Wake-up ids and sessions are checked before the store: every store answers the same.

A NUL or an over-long id or session, or an id with a control character, is a 400 with one
line, on the in-memory store, the state directory and PostgreSQL alike (PostgreSQL text cannot
hold a NUL, and used to answer 503 and log an ERROR); nothing is logged at ERROR and nothing
changes. A session with a control character is taken, as every other surface takes it: a
routine's session is its name's, which may hold one.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from test_http import assert_error, serving

from trio_routines.store import Store

BAD_REQUESTS: list[tuple[str, str, Any, str]] = [
    ("DELETE", "/wakeups/\x00?session=chat:1", None, "NUL"),
    ("DELETE", "/wakeups/a\x1b[31mb?session=chat:1", None, "control characters"),
    ("DELETE", "/wakeups/" + "i" * 129 + "?session=chat:1", None, "longer than 128"),
    ("DELETE", "/wakeups/{id}?session=\x00", None, "NUL"),
    ("DELETE", "/wakeups/{id}?session=" + "s" * 513, None, "longer than 512"),
    ("DELETE", "/wakeups/{id}", None, "?session="),
    ("DELETE", "/wakeups/{id}?session=", None, "?session="),
    ("GET", "/wakeups?session=\x00", None, "NUL"),
    ("POST", "/wakeups", {"session": "s" * 513, "prompt": "p", "in": "2h"}, "longer than 512"),
]


async def test_bad_ids_and_sessions_are_400_on_every_store(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    async with serving(store=store) as server:
        added = await server.call(
            "POST", "/wakeups", {"session": "chat:1", "prompt": "p", "in": "2h"}
        )
        assert added.status == 201
        wid = added.json["wakeup"]["id"]
        with caplog.at_level(logging.DEBUG):
            for method, path, body, expected in BAD_REQUESTS:
                reply = await server.call(method, path.replace("{id}", wid), body)
                assert expected in assert_error(reply, 400), (path, reply.raw)
        assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []
        assert [w.id for w in await store.list_wakeups()] == [wid]
        # The same wake-up with its session is removed as before.
        removed = await server.call("DELETE", f"/wakeups/{wid}?session=chat:1")
        assert removed.status == 200
        assert await store.list_wakeups() == []


async def test_delete_without_session_cannot_remove_another_sessions_wakeup() -> None:
    async with serving() as server:
        added = await server.call(
            "POST", "/wakeups", {"session": "victim", "prompt": "p", "in": "2h"}
        )
        wid = added.json["wakeup"]["id"]
        assert_error(await server.call("DELETE", f"/wakeups/{wid}"), 400)
        assert_error(await server.call("DELETE", f"/wakeups/{wid}?session=attacker"), 404)
        assert [w.id for w in await server.store.list_wakeups()] == [wid]


async def test_a_session_with_control_characters_is_listed_and_cancelled_as_any(
    store: Store,
) -> None:
    # A routine named with a line break (legal: names.py) has the session "routine:nl\nx",
    # and its turns' wake-ups that session: the operator lists and cancels them here, as the
    # command line on the state does. Shown escaped: every answer is ASCII JSON.
    session = "routine:nl\nx\x1b[31m\x7f"
    async with serving(store=store) as server:
        added = await server.call(
            "POST", "/wakeups", {"session": session, "prompt": "p", "in": "2h"}
        )
        assert added.status == 201, added.raw
        wid = added.json["wakeup"]["id"]
        assert b"\\n" in added.raw
        assert b"\n" not in added.raw
        listed = await server.call("GET", f"/wakeups?session={session}")  # (the client quotes)
        assert [w["id"] for w in listed.json] == [wid]
        assert listed.json[0]["session"] == session
        other = await server.call("GET", "/wakeups?session=routine:nl")
        assert other.json == []
        removed = await server.call("DELETE", f"/wakeups/{wid}?session={session}")
        assert removed.status == 200, removed.raw
        assert await store.list_wakeups() == []
