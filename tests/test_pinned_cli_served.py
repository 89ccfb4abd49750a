"""``list`` and ``status`` as a server answers them (``trio_routines.cli.served``), pinned in
this process with ``Server.get`` answering from a table: the rows, wake-ups, replicas and turns
in flight built from each answer, and every answer of the wrong shape refused in one line."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.test_pinned_cli_status import URL, answering
from trio_routines.agent import Usage
from trio_routines.cli.client import Server
from trio_routines.cli.output import CliError
from trio_routines.cli.served import (
    HIDDEN,
    ServedView,
    served_in_flight,
    served_replicas,
    served_view,
)
from trio_routines.cli.status import RoutineRow, routine_json
from trio_routines.converter import history_to_json, wakeup_from_json
from trio_routines.http.paging import PAGE
from trio_routines.ledger import Spent
from trio_routines.records import Fire, Outcome
from trio_routines.replicas import ReplicaInfo
from trio_routines.routines import Routine

SERVER = Server(URL, token=None)
NOT_OURS = f"{URL}: the answer is not a trio_routines server's"
WAKEUP = {"id": "w1", "session": "chat", "fireAt": "2099-01-01T00:00:00.000Z"}


def recent(days: int, outcome: Outcome = Outcome.COMPLETED) -> Fire:
    """A claim settled an hour less than ``days`` days before now (the last 24 hours count
    what it spent)."""
    slot = datetime.now(UTC).replace(microsecond=0) - timedelta(days=days, hours=-1)
    return Fire(slot, slot, outcome, 5, usage=Usage(10 * days + 1, 1))


async def view(monkeypatch: pytest.MonkeyPatch, answers: dict[str, Any]) -> ServedView:
    answering(monkeypatch, {"/wakeups": []} | answers)
    return await served_view(SERVER)


async def refusal(monkeypatch: pytest.MonkeyPatch, answers: dict[str, Any]) -> str:
    with pytest.raises(CliError) as refused:
        await view(monkeypatch, answers)
    assert refused.value.__suppress_context__
    return str(refused.value)


async def test_the_rows_are_built_from_the_listing_and_each_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    twelve = [recent(n, Outcome.FAILED if n < 3 else Outcome.COMPLETED) for n in range(12, 0, -1)]
    pending = [  # one instant: in the order of their ids, as a server lists them
        {**WAKEUP, "id": "w0", "session": "new"},  # a server without a ledger
        {**WAKEUP, "sessionSpent24h": {"inputTokens": 1, "outputTokens": 2, "costs": {"USD": 0.5}}},
        {**WAKEUP, "id": "w2", "session": "idle", "sessionSpent24h": None},  # unreadable there
    ]
    answers = {
        "/routines": [
            {
                "name": "da ily",
                "cron": "0 9 * * *",
                "tz": "Europe/Berlin",
                "catchup": "2h",
                "next": "2026-07-07T07:00:00.000Z",
                "running": True,
                "paused": False,
            },
            {"name": "held", "cron": "0 9 * * *", "next": "2026-07-07T07:00:00Z", "paused": True},
            {"name": "odd", "catchup": 7200, "paused": "yes", "running": "yes", "next": None},
            {"name": "spent", "spent24h": {"inputTokens": 5, "outputTokens": 6, "costs": {}}},
            {"name": "unknown", "spent24h": None},
        ],
        "/wakeups": pending,
        "/routines/da%20ily/history": history_to_json(twelve),
        "/routines/held/history": [],
        "/routines/odd/history": history_to_json([recent(1), recent(3)]),
        "/routines/spent/history": history_to_json([recent(1)]),
        "/routines/unknown/history": history_to_json([recent(1)]),
    }
    asked = answering(monkeypatch, answers)
    before = datetime.now(UTC)
    served = await served_view(SERVER)
    assert before <= served.now <= datetime.now(UTC)
    assert asked == [
        "/routines",
        f"/wakeups?limit={PAGE}",
        "/routines/da%20ily/history",
        "/routines/held/history",
        "/routines/odd/history",
        "/routines/spent/history",
        "/routines/unknown/history",
    ]
    daily = Routine(
        name="da ily", prompt=HIDDEN, cron="0 9 * * *", tz="Europe/Berlin", catchup=7200.0
    )
    assert served.rows == [
        RoutineRow(
            daily,
            datetime(2026, 7, 7, 7, tzinfo=UTC),
            twelve[-10:],
            None,
            False,
            2,
            twelve[-3],
            Spent(11, 1),  # the claims of the last 24 hours, from a server without a ledger
        ),
        RoutineRow(Routine(name="held", prompt=HIDDEN, cron="0 9 * * *"), None, [], None, True),
        RoutineRow(
            Routine(name="odd", prompt=HIDDEN),
            None,
            [recent(1), recent(3)],
            spent=Spent(11, 1),
            last_success=recent(3),
        ),
        RoutineRow(
            Routine(name="spent", prompt=HIDDEN),
            None,
            [recent(1)],
            spent=Spent(5, 6),
            last_success=recent(1),
        ),
        RoutineRow(
            Routine(name="unknown", prompt=HIDDEN), None, [recent(1)], last_success=recent(1)
        ),
    ]
    assert served.running == ("da ily",)
    assert served.wakeups == [wakeup_from_json({**shown, "prompt": HIDDEN}) for shown in pending]
    assert served.wakeups[0].prompt == HIDDEN
    assert served.wakeups_json == pending
    assert served.wakeups_json is not pending
    assert served.session_spent == {"chat": Spent(1, 2, (("USD", 0.5),))}


@pytest.mark.parametrize(
    ("answers", "why"),
    [
        ({"/routines": [{"name": "x", "next": 5}]}, "not an instant: '5'"),
        ({"/routines": [{"name": "x", "next": "soon"}]}, "not an instant: 'soon'"),
        (
            {"/routines": [{"name": "x", "next": "x" * 60}]},
            f"not an instant: {'x' * 40!r}",
        ),
        (
            {"/routines": [{"name": "x", "spent24h": "a lot" * 20}]},
            f"not what a routine spent: {'a lot' * 8!r}",
        ),
        (
            {"/routines": [], "/wakeups": [{**WAKEUP, "sessionSpent24h": "z" * 50}]},
            f"not what a session spent: {'z' * 40!r}",
        ),
        ({"/routines": [{"cron": "0 9 * * *"}]}, "no 'name' where one was expected"),
        ({"/routines": [{"name": "../x"}]}, None),
        ({"/routines": [], "/wakeups": [{"session": "s"}]}, None),
        # Not Python's words ('str' object has no attribute 'get'): what was expected.
        (
            {"/routines": "not a list"},
            "a value of another kind where an object or a list was expected",
        ),
    ],
)
async def test_a_listing_of_the_wrong_shape_is_one_line(
    monkeypatch: pytest.MonkeyPatch, answers: dict[str, Any], why: str | None
) -> None:
    answers.setdefault("/routines/x/history", [])
    said = await refusal(monkeypatch, answers)
    if why is None:
        assert said.startswith(f"{NOT_OURS} (")
    else:
        assert said == f"{NOT_OURS} ({why})"


async def test_a_history_of_the_wrong_shape_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    said = await refusal(
        monkeypatch, {"/routines": [{"name": "x"}], "/routines/x/history": {"a": 1}}
    )
    assert said == f"{NOT_OURS} (a history must be an array)"


async def test_the_turns_in_flight_are_the_health_checks_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for health, said in (
        ({"inFlight": 3}, (3, False)),  # a server that does not say whether it stops
        ({"inFlight": 0, "ok": False}, (0, False)),
        ({"inFlight": 2, "stopping": True}, (2, True)),
        ({"inFlight": 2, "stopping": False}, (2, False)),
    ):
        asked = answering(monkeypatch, {"/healthz": health})
        assert await served_in_flight(SERVER) == said
        assert asked == ["/healthz"]
    for health in (
        {"inFlight": True},
        {"inFlight": "3"},
        {"ok": True},
        [3],
        None,
        {"inFlight": 1, "stopping": "yes"},
        {"inFlight": 1, "stopping": None},
    ):
        answering(monkeypatch, {"/healthz": health})
        with pytest.raises(CliError) as refused:
            await served_in_flight(SERVER)
        assert str(refused.value) == NOT_OURS


def member(**more: Any) -> dict[str, Any]:
    return {
        "id": "h:1",
        "version": "1.2",
        "host": "h",
        "pid": 1,
        "started": "2026-07-01T00:00:00.000Z",
        "lastSeen": "2026-07-07T09:00:00.000Z",
        "inFlight": 2,
    } | more


async def test_the_replicas_are_read_whole_and_alive_unless_said_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    answers = [
        member(),
        member(id=7, version=2, host=3, pid="9", inFlight="0", alive=False),
        member(alive="no"),
        member(alive=True),
    ]
    asked = answering(monkeypatch, {"/replicas": answers})
    first = ReplicaInfo(
        id="h:1",
        version="1.2",
        host="h",
        pid=1,
        started=datetime(2026, 7, 1, tzinfo=UTC),
        last_seen=datetime(2026, 7, 7, 9, tzinfo=UTC),
        in_flight=2,
        alive=True,
    )
    assert await served_replicas(SERVER) == [
        first,
        ReplicaInfo("7", "2", "3", 9, first.started, first.last_seen, 0, False),
        ReplicaInfo("h:1", "1.2", "h", 1, first.started, first.last_seen, 2, False),
        first,
    ]
    assert asked == ["/replicas"]


@pytest.mark.parametrize(
    ("shown", "why"),
    [
        ({"id": "x"}, "no 'version' where one was expected"),
        (member(started=None), "an instant is missing"),
        (member(lastSeen="yesterday"), "not an instant: 'yesterday'"),
        (member(pid="one"), None),
        (member(inFlight=None), None),
    ],
)
async def test_a_replica_of_the_wrong_shape_is_one_line(
    monkeypatch: pytest.MonkeyPatch, shown: dict[str, Any], why: str | None
) -> None:
    answering(monkeypatch, {"/replicas": [shown]})
    with pytest.raises(CliError) as refused:
        await served_replicas(SERVER)
    said = str(refused.value)
    assert refused.value.__suppress_context__
    if why is None:
        assert said.startswith(f"{NOT_OURS} (")
    else:
        assert said == f"{NOT_OURS} ({why})"
    answering(monkeypatch, {"/replicas": None})
    with pytest.raises(CliError, match=r"^http://127"):
        await served_replicas(SERVER)


async def test_a_claim_the_server_marks_running_is_running_in_the_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As on the state itself: an open claim a live replica runs is no crash's.
    settled, open_claim = recent(2), Fire(recent(1).slot, recent(1).slot)
    answers = {
        "/routines": [{"name": "daily", "cron": "0 9 * * *", "next": None, "paused": False}],
        "/routines/daily/history": history_to_json(
            [settled, open_claim], running={open_claim.slot}
        ),
    }
    (row,) = (await view(monkeypatch, answers)).rows
    assert row.running == frozenset({open_claim.slot})
    assert routine_json(row)["recent"] == ["completed", "running"]
