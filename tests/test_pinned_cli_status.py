"""``status`` and ``list`` (``trio_routines.cli.status``), pinned in this process and compared
whole: the routines' table and its JSON, the failing streaks, the replicas and the turns in
flight; on a store whose reads fail (one line each, the rest shown), and from a server's
answers (``--url``)."""

from __future__ import annotations

import argparse
import json
import logging
import socket
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest
from procs import Env

from trio_routines.agent import Usage
from trio_routines.cli import status, table
from trio_routines.cli.client import Server
from trio_routines.cli.parser import build_parser
from trio_routines.cli.status import (
    InFlight,
    RoutineRow,
    cmd_list,
    cmd_status,
    failing_lines,
    in_flight_line,
    replica_lines,
    routine_json,
    routine_lines,
    routine_rows,
)
from trio_routines.converter import history_to_json, wakeup_to_json
from trio_routines.errors import StateFault
from trio_routines.http.paging import PAGE
from trio_routines.ledger import Spent
from trio_routines.records import Fire, Outcome
from trio_routines.replicas import ReplicaInfo, replica_json
from trio_routines.routines import Routine
from trio_routines.testing.memory import MemoryStore
from trio_routines.wakeups import WakeupRequest

NOW = datetime(2026, 7, 7, 8, 30, tzinfo=UTC)
SLOT = datetime(2026, 7, 6, 9, tzinfo=UTC)
NINE = SLOT + timedelta(days=1)


def fire(slot: datetime, outcome: Outcome | None = Outcome.COMPLETED, **more: Any) -> Fire:
    return Fire(slot, slot, outcome, **more)


def daily(name: str = "daily", **more: Any) -> Routine:
    return Routine(name=name, prompt="p", cron="0 9 * * *", **more)


def member(id: str, seen: timedelta, **more: Any) -> ReplicaInfo:
    return ReplicaInfo(
        id=id,
        version="1.2.3",
        host="h",
        pid=7,
        started=datetime(2026, 7, 1, tzinfo=UTC),
        last_seen=NOW - seen,
        **more,
    )


# --- the pure parts --------------------------------------------------------------------------


def test_failing_lines_count_the_runs_and_say_since_when() -> None:
    rows = [
        RoutineRow(daily("fine"), None, [], failing=0, last_success=fire(SLOT)),
        RoutineRow(daily("once"), None, [], failing=1, last_success=fire(SLOT)),
        RoutineRow(daily("never"), None, [], failing=3),
    ]
    assert failing_lines(rows) == [
        "once: failing for 1 run — last success 2026-07-06T09:00Z",
        "never: failing for 3 runs — no success in its history",
    ]
    assert failing_lines([]) == []


def test_the_in_flight_line_counts_turns_and_names_what_runs() -> None:
    assert in_flight_line(None) == (
        "IN FLIGHT  - (no server asked: pass --url or set TRIO_ROUTINES_URL)"
    )
    assert in_flight_line(InFlight("http://h", 0)) == "IN FLIGHT  0 turns on http://h"
    assert (
        in_flight_line(InFlight("http://h", 1, ("a",)))
        == "IN FLIGHT  1 turn on http://h; running on any replica: a"
    )
    assert in_flight_line(InFlight("http://h", 2, ("a", "b"))) == (
        "IN FLIGHT  2 turns on http://h; running on any replica: a, b"
    )
    assert in_flight_line(InFlight("http://h", 1, ("a",), stopping=True)) == (
        "IN FLIGHT  1 turn on http://h (stopping: it starts no new turns); "
        "running on any replica: a"
    )


def test_replica_lines_round_the_seconds_and_never_go_below_zero() -> None:
    assert replica_lines([], NOW) == ["(no live replica)"]
    members = [
        member("a:1", timedelta(seconds=2.6), in_flight=2),
        member("b\x1b:2", timedelta(seconds=-5)),  # a clock ahead of ours
        member("c:3", timedelta(seconds=12)),
    ]
    assert replica_lines(members, NOW) == [
        "replicas (3 live):",
        "  a:1      v1.2.3  started 2026-07-01T00:00:00.000Z  seen 3s ago   2 in flight",
        "  b\\x1b:2  v1.2.3  started 2026-07-01T00:00:00.000Z  seen 0s ago   0 in flight",
        "  c:3      v1.2.3  started 2026-07-01T00:00:00.000Z  seen 12s ago  0 in flight",
    ]


def test_a_rows_json_has_every_field_it_has_and_no_other() -> None:
    hashed = Routine(
        name="hashed", prompt="p", cron="H 9 * * *", tz="Europe/Berlin", catchup=7200.0
    )
    row = RoutineRow(
        hashed,
        NOW + timedelta(hours=1),
        [fire(SLOT - timedelta(days=1)), fire(SLOT, Outcome.FAILED, replica="r:1")],
        paused=False,
        failing=1,
        last_success=fire(SLOT - timedelta(days=1)),
        spent=Spent(10, 20, (("USD", 0.5),)),
    )
    assert routine_json(row) == {
        "name": "hashed",
        "cron": "H 9 * * *",
        "resolved_cron": hashed.resolved_cron,
        "tz": "Europe/Berlin",
        "next": "2026-07-07T09:30:00.000Z",
        "last": {"slot": "2026-07-06T09:00:00.000Z", "outcome": "failed", "replica": "r:1"},
        "recent": ["completed", "failed"],
        "paused": False,
        "catchup": "2h",
        "spent24h": {"inputTokens": 10, "outputTokens": 20, "costs": {"USD": 0.5}},
        "failing": 1,
        "lastSuccess": "2026-07-05T09:00:00.000Z",
    }
    assert hashed.resolved_cron != hashed.cron
    plain = RoutineRow(daily(), None, [fire(SLOT, None)], paused=True, failing=2)
    assert routine_json(plain) == {
        "name": "daily",
        "cron": "0 9 * * *",
        "next": None,
        "last": {"slot": "2026-07-06T09:00:00.000Z", "outcome": "unreported"},
        "recent": ["unreported"],
        "paused": True,
        "failing": 2,
        "lastSuccess": None,
    }
    adhoc = RoutineRow(Routine(name="adhoc", prompt="p"), None, [])
    assert routine_json(adhoc) == {
        "name": "adhoc",
        "next": None,
        "last": None,
        "recent": [],
        "paused": False,
    }


@pytest.fixture
def ascii_strip(monkeypatch: pytest.MonkeyPatch) -> None:
    """The strip in its ASCII marks, whatever stdout's encoding."""
    monkeypatch.setattr(table, "unicode_out", lambda: False)


@pytest.mark.usefixtures("ascii_strip")
def test_the_table_shows_next_left_last_and_the_strip_of_the_last_ten() -> None:
    eleven = [fire(SLOT - timedelta(days=n), Outcome.FAILED) for n in range(10, 0, -1)]
    rows = [
        RoutineRow(daily(), NOW + timedelta(minutes=30), [fire(SLOT), fire(SLOT, Outcome.FAILED)]),
        RoutineRow(daily("held"), None, [], paused=True),
        RoutineRow(Routine(name="adhoc", prompt="p"), None, []),
        RoutineRow(Routine(name="never", prompt="p", cron="0 0 31 2 *"), None, []),
        RoutineRow(daily("broken"), NOW, [fire(SLOT)], problem="boom"),
        RoutineRow(daily("many"), None, [fire(SLOT - timedelta(days=11)), *eleven]),
    ]
    assert routine_lines(rows, NOW) == [
        "ROUTINE  NEXT               LEFT    LAST                      RECENT      SCHEDULE",
        "daily    2026-07-07T09:00Z  30m00s  2026-07-06T09:00Z failed  +x          cron 0 9 * * *",
        "held     paused             -       -                         -           cron 0 9 * * *",
        "adhoc    -                  -       -                         -           on demand",
        "never    never              -       -                         -           cron 0 0 31 2 *",
        "broken   2026-07-07T08:30Z  0ms     unreadable                +           cron 0 9 * * *",
        "many     never              -       2026-07-05T09:00Z failed  xxxxxxxxxx  cron 0 9 * * *",
    ]


@pytest.mark.usefixtures("ascii_strip")
def test_the_spent_column_comes_with_the_first_turn_that_spent() -> None:
    rows = [
        RoutineRow(daily(), None, [], spent=Spent(1200, 300, (("USD", 0.25),))),
        RoutineRow(daily("idle"), None, []),
    ]
    assert routine_lines(rows, NOW) == [
        "ROUTINE  NEXT   LEFT  LAST  RECENT  SPENT 24H                   SCHEDULE",
        "daily    never  -     -     -       1.2k in, 300 out, 0.25 USD  cron 0 9 * * *",
        "idle     never  -     -     -       -                           cron 0 9 * * *",
    ]


# --- the rows, read from a store -------------------------------------------------------------


async def test_the_rows_hold_the_next_slot_the_last_ten_and_the_failing_streak() -> None:
    store = MemoryStore()
    for n in range(12, 0, -1):  # twelve days, the newest two failed
        slot = NINE - timedelta(days=n)
        await store.claim("daily", slot, slot)
        await store.settle("daily", slot, Outcome.FAILED if n <= 2 else Outcome.COMPLETED, 5)
    ahead = NOW + timedelta(days=2, hours=3)  # stamped by a clock that ran ahead
    await store.claim("ahead", ahead.replace(hour=9), ahead)
    await store.set_paused("held", True, NOW)
    await store.record_usage("routine", "daily", NOW - timedelta(hours=1), Usage(100, 20))
    await store.record_usage("routine", "daily", NOW - timedelta(hours=25), Usage(7, 7))
    routines = [daily(), daily("ahead"), daily("held"), Routine(name="adhoc", prompt="p")]
    first, second, third, fourth = await routine_rows(store, routines, NOW)
    history = await store.history("daily")
    assert first == RoutineRow(
        routines[0],
        NINE,
        history[-10:],
        None,
        False,
        2,
        history[-3],
        Spent(100, 20),
    )
    assert len(history) == 12
    assert second.next == datetime(2026, 7, 10, 9, tzinfo=UTC)  # the first slot after it
    assert (second.failing, second.last_success, second.spent) == (0, None, Spent())
    assert third == RoutineRow(routines[2], None, [], None, True)
    assert fourth == RoutineRow(routines[3], None, [])


class Alive(MemoryStore):
    """Every open claim of ``daily`` held by a live replica; ``fails``: the holds unreadable."""

    fails = False

    async def claims_alive(self, claims: Sequence[tuple[str, datetime]]) -> list[bool]:
        if self.fails:
            raise StateFault("the holds are unreadable")
        return [routine == "daily" for routine, _ in claims]


@pytest.mark.usefixtures("ascii_strip")
async def test_an_open_claim_a_live_replica_holds_is_running_and_one_none_holds_unreported(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # As history says it: status called a turn in flight on another replica "unreported".
    store = Alive()
    for name in ("daily", "crashed"):
        await store.claim(name, SLOT, SLOT)
        await store.settle(name, SLOT, Outcome.COMPLETED, 5)
        await store.claim(name, NINE - timedelta(hours=1), NINE - timedelta(hours=1))
    routines = [daily(), Routine(name="crashed", prompt="p", cron="0 * * * *")]
    running, crashed = await routine_rows(store, routines, NOW)
    assert (running.running, crashed.running) == (
        frozenset({NINE - timedelta(hours=1)}),
        frozenset(),
    )
    lines = routine_lines([running, crashed], NOW)
    assert [line.split()[3:6] for line in lines[1:]] == [
        ["2026-07-07T08:00Z", "running", "+>"],
        ["2026-07-07T08:00Z", "unreported", "+?"],
    ]
    assert routine_json(running)["recent"] == ["completed", "running"]
    assert routine_json(running)["last"]["outcome"] == "running"
    assert routine_json(crashed)["recent"] == ["completed", "unreported"]
    store.fails = True
    (unread,) = await routine_rows(store, routines[:1], NOW)
    assert unread.running == frozenset()
    assert capsys.readouterr().err == (
        "which turns of daily run now is unreadable — the holds are unreadable\n"
    )


class NoLedger(MemoryStore):
    """A store that keeps no usage ledger: what its kept claims say is what was spent (a
    protocol's member set to None is one the class does not have)."""

    usage_since = None  # type: ignore[assignment]


async def test_the_next_slot_is_in_the_routines_zone_and_its_hash_and_spent_from_claims() -> None:
    store = NoLedger()
    await store.claim("daily", SLOT, SLOT)
    await store.settle("daily", SLOT, Outcome.COMPLETED, 5, usage=Usage(30, 4))
    old = SLOT - timedelta(days=2)
    await store.claim("daily", old, old)
    await store.settle("daily", old, Outcome.COMPLETED, 5, usage=Usage(900, 900))
    zoned = daily(tz="Europe/Berlin")
    hashed = Routine(name="hashed", prompt="p", cron="H 9 * * *")
    rows = await routine_rows(store, [zoned, hashed], SLOT + timedelta(hours=1))
    assert rows[0].next == datetime(2026, 7, 7, 7, tzinfo=UTC)  # 09:00 in Berlin, in summer
    assert rows[0].spent == Spent(30, 4)
    minute = int(hashed.resolved_cron.split()[0])
    assert rows[1].next == datetime(2026, 7, 7, 9, minute, tzinfo=UTC)
    assert rows[1].spent == Spent()


async def test_unreadable_reads_are_said_and_the_rest_still_shown(
    capsys: pytest.CaptureFixture[str],
) -> None:
    store = MemoryStore()
    await store.set_paused("daily", True, NOW)
    store.fail("paused", StateFault("the pause file is gone"))
    store.fail("history", StateFault("claims torn"), routine="broken")
    store.fail("usage_since", StateFault("ledger torn"), routine="spender")
    await store.record_usage("routine", "broken", NOW - timedelta(hours=1), Usage(5, 5))
    routines = [daily(), daily("broken"), daily("spender")]
    rows = await routine_rows(store, routines, NOW)
    assert [(row.next, row.paused, row.problem, row.spent) for row in rows] == [
        (NINE, False, None, Spent()),
        (NINE, False, "claims torn", Spent(5, 5)),
        (NINE, False, None, Spent()),
    ]
    assert capsys.readouterr().err.splitlines() == [
        "which routines are paused is unreadable — the pause file is gone",
        "what the turns of spender spent is unreadable — ledger torn",
    ]


# --- the commands on a state ------------------------------------------------------------------


class Members(MemoryStore):
    """A store whose list of replicas is ``listed`` (its faults and hangs still apply)."""

    def __init__(self, listed: Sequence[ReplicaInfo] = ()) -> None:
        super().__init__()
        self.listed = list(listed)

    async def replicas(self) -> list[ReplicaInfo]:
        await super().replicas()
        return self.listed


class NoReplicas(MemoryStore):
    """A store that keeps no replicas (as a store of an earlier kind)."""

    def __getattribute__(self, name: str) -> Any:
        if name == "replicas":
            raise AttributeError(name)
        return super().__getattribute__(name)


def on_store(monkeypatch: pytest.MonkeyPatch, store: MemoryStore) -> list[str]:
    """Every state the commands open is ``store``; the states asked for are listed."""
    opened: list[str] = []

    @asynccontextmanager
    async def open_state(state: str, **_: Any) -> AsyncIterator[MemoryStore]:
        opened.append(state)
        yield store

    monkeypatch.setattr(status, "open_state", open_state)
    return opened


def parsed(env: Env, *argv: str) -> argparse.Namespace:
    common = ["--state", str(env.state), "--routines", str(env.routines)]
    return build_parser().parse_args([*argv, *common])


FAR = datetime(2099, 1, 1, tzinfo=UTC)  # a replica seen "later": 0 s ago, whenever this runs


@pytest.mark.usefixtures("ascii_strip")
async def test_status_on_a_state_shows_every_part_in_order(
    env: Env,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.delenv("TRIO_ROUTINES_URL", raising=False)
    env.state.mkdir()  # a state there (else that is said first)
    # The warnings to caplog alone (not to a handler an earlier command set up).
    logger = logging.getLogger("trio_routines")
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setattr(logger, "propagate", True)
    env.routine("adhoc")
    env.routine("never", cron="0 0 31 2 *")
    (env.routines / "broken.md").write_text("no front matter\n")
    alive = attrs.evolve(member("a:1", timedelta(0)), last_seen=FAR)
    store = Members([alive, attrs.evolve(alive, id="dead:2", alive=False)])
    for n in (3, 2, 1):
        await store.claim("adhoc", SLOT - timedelta(days=n), SLOT)
        await store.settle("adhoc", SLOT - timedelta(days=n), Outcome.FAILED, 5)
    opened = on_store(monkeypatch, store)
    assert await cmd_status(parsed(env, "status")) == 0
    assert opened == [str(env.state), str(env.state)]
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "ROUTINE  NEXT   LEFT  LAST                      RECENT  SCHEDULE",
        "adhoc    -      -     2026-07-05T09:00Z failed  xxx     on demand",
        "never    never  -     -                         -       cron 0 0 31 2 *",
        "",
        "(no pending wake-ups)",
        "",
        "adhoc: failing for 3 runs — no success in its history",
        "",
        "replicas (1 live):",
        "  a:1  v1.2.3  started 2026-07-01T00:00:00.000Z  seen 0s ago  0 in flight",
        "",
        "IN FLIGHT  - (no server asked: pass --url or set TRIO_ROUTINES_URL)",
    ]
    assert err == ""
    (skipped,) = [r.getMessage() for r in caplog.records if r.name == "trio_routines"]
    assert skipped.startswith(str(env.routines / "broken.md"))
    assert skipped.endswith(" — skipped")

    store.fail("history", StateFault("claims torn"), routine="adhoc")
    assert await cmd_status(parsed(env, "status")) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[1] == ("adhoc    -      -     unreadable  -       on demand")
    assert "adhoc: failing" not in out
    assert err.splitlines() == ["adhoc: its claims are unreadable — claims torn"]


async def test_status_json_on_a_state_has_no_server_and_the_live_replicas(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TRIO_ROUTINES_URL", raising=False)
    env.routine("adhoc")
    alive = member("a:1", timedelta(seconds=1))
    store = Members([alive, attrs.evolve(alive, id="dead:2", alive=False)])
    wakeup = await store.add_wakeup(WakeupRequest(session="chat", prompt="hello", fire_at=FAR), NOW)
    await store.record_usage("session", "chat", datetime.now(UTC), Usage(3, 4))
    on_store(monkeypatch, store)
    assert await cmd_status(parsed(env, "status", "--json")) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown == {
        "routines": [routine_json(RoutineRow(Routine(name="adhoc", prompt="p"), None, []))],
        "wakeups": [
            {
                **wakeup_to_json(wakeup),
                "sessionSpent24h": {"inputTokens": 3, "outputTokens": 4, "costs": {}},
            }
        ],
        "server": None,
        "replicas": [replica_json(alive)],
    }


async def test_unreadable_replicas_are_said_and_none_shown(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TRIO_ROUTINES_URL", raising=False)
    env.state.mkdir()  # a state there (else that is said first)
    env.routine("adhoc")
    store = Members([member("a:1", timedelta(seconds=1))])
    store.fail("replicas", StateFault("the holds are torn"))
    on_store(monkeypatch, store)
    assert await cmd_status(parsed(env, "status")) == 0
    out, err = capsys.readouterr()
    assert "(no live replica)" in out.splitlines()
    assert err.splitlines() == ["the replicas are unreadable: the holds are torn"]
    assert await cmd_status(parsed(env, "status", "--json")) == 0
    assert json.loads(capsys.readouterr().out)["replicas"] == []


async def test_a_store_that_keeps_no_replicas_shows_none(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TRIO_ROUTINES_URL", raising=False)
    env.state.mkdir()  # a state there (else that is said first)
    env.routine("adhoc")
    on_store(monkeypatch, NoReplicas())
    assert await cmd_status(parsed(env, "status")) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[-3:] == ["(no live replica)", "", in_flight_line(None)]
    assert err == ""


@pytest.mark.usefixtures("ascii_strip")
async def test_list_on_a_state_shows_the_tables_or_says_nothing_is_scheduled(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TRIO_ROUTINES_URL", raising=False)
    env.state.mkdir()  # a state there (else that is said first)
    store = MemoryStore()
    opened = on_store(monkeypatch, store)
    assert await cmd_list(parsed(env, "list")) == 0
    assert opened == [str(env.state)]
    assert capsys.readouterr() == (
        "",
        f"nothing scheduled — no routines in {env.routines}, no pending wake-ups "
        f"(state: {env.state})\n",
    )
    assert await cmd_list(parsed(env, "list", "--json")) == 0
    assert json.loads(capsys.readouterr().out) == {"routines": [], "wakeups": []}

    wakeup = await store.add_wakeup(WakeupRequest(session="chat", prompt="hello", fire_at=FAR), NOW)
    assert await cmd_list(parsed(env, "list")) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[:2] == ["(no routines)", ""]
    assert lines[3].split()[:2] == [wakeup.id, "chat"]
    assert (len(lines), err) == (4, "")
    assert await cmd_list(parsed(env, "list", "--json")) == 0
    assert json.loads(capsys.readouterr().out) == {
        "routines": [],
        "wakeups": [
            wakeup_to_json(wakeup)
            | {"sessionSpent24h": {"inputTokens": 0, "outputTokens": 0, "costs": {}}}
        ],
    }

    env.routine("adhoc")
    store.wakeups.clear()
    assert await cmd_list(parsed(env, "list")) == 0
    assert capsys.readouterr() == (
        "ROUTINE  NEXT  LEFT  LAST  RECENT  SCHEDULE\n"
        "adhoc    -     -     -     -       on demand\n"
        "\n"
        "(no pending wake-ups)\n",
        "",
    )


# --- the commands against a server -------------------------------------------------------------

URL = "http://127.0.0.1:9"  # never reached: Server.get answers here


FIRST_PAGE = "/wakeups"


def answering(monkeypatch: pytest.MonkeyPatch, answers: dict[str, Any]) -> list[str]:
    """``Server.get`` answering each path from ``answers``; the paths asked for, in order.
    The first page of the wake-ups, as the command line asks for it, is ``/wakeups``."""
    asked: list[str] = []

    async def get(_server: Server, path: str) -> Any:
        asked.append(path)
        return answers[FIRST_PAGE if path == f"/wakeups?limit={PAGE}" else path]

    monkeypatch.setattr(Server, "get", get)
    monkeypatch.delenv("TRIO_ROUTINES_URL", raising=False)
    return asked


def served(listing: list[dict[str, Any]], in_flight: int = 0, **more: Any) -> dict[str, Any]:
    answers: dict[str, Any] = {
        "/routines": listing,
        "/wakeups": [],
        "/replicas": [],
        "/healthz": {"ok": True, "inFlight": in_flight},
    }
    for entry in listing:
        answers.setdefault(f"/routines/{entry['name']}/history", [])
    return answers | more


def remote(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args([*argv, "--url", URL])


@pytest.mark.usefixtures("ascii_strip")
async def test_status_from_a_server_shows_its_live_replicas_and_turns_in_flight(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    on_store(monkeypatch, MemoryStore())  # never opened: everything comes from the server
    alive = attrs.evolve(member("a:1", timedelta(0), in_flight=1), last_seen=FAR)
    dead = attrs.evolve(alive, id="dead:2", alive=False)
    answers = served(
        [{"name": "adhoc", "running": True}, {"name": "other", "running": False}],
        in_flight=1,
        **{
            "/replicas": [replica_json(alive), replica_json(dead)],
            "/routines/adhoc/history": history_to_json([fire(SLOT, Outcome.FAILED)]),
        },
    )
    asked = answering(monkeypatch, answers)
    assert await cmd_status(remote("status")) == 0
    assert asked == [
        "/routines",
        f"/wakeups?limit={PAGE}",
        "/routines/adhoc/history",
        "/routines/other/history",
        "/replicas",
        "/healthz",
    ]
    assert capsys.readouterr() == (
        "ROUTINE  NEXT  LEFT  LAST                      RECENT  SCHEDULE\n"
        "adhoc    -     -     2026-07-06T09:00Z failed  x       on demand\n"
        "other    -     -     -                         -       on demand\n"
        "\n"
        "(no pending wake-ups)\n"
        "\n"
        "adhoc: failing for 1 run — no success in its history\n"
        "\n"
        "replicas (1 live):\n"
        "  a:1  v1.2.3  started 2026-07-01T00:00:00.000Z  seen 0s ago  1 in flight\n"
        "\n"
        f"IN FLIGHT  1 turn on {URL}; running on any replica: adhoc\n",
        "",
    )
    assert await cmd_status(remote("status", "--json")) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["server"] == {"url": URL, "inFlight": 1, "running": ["adhoc"], "stopping": False}
    assert shown["replicas"] == [replica_json(alive)]
    assert [r["name"] for r in shown["routines"]] == ["adhoc", "other"]
    assert shown["wakeups"] == []
    # A server that drains its turns says so, and status says it after the count.
    answers["/healthz"] = {"ok": True, "inFlight": 1, "stopping": True}
    assert await cmd_status(remote("status", "--json")) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["server"] == {"url": URL, "inFlight": 1, "running": ["adhoc"], "stopping": True}


async def test_list_from_a_server_shows_its_wakeups_as_it_sent_them(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    on_store(monkeypatch, MemoryStore())
    answering(monkeypatch, served([]))
    assert await cmd_list(remote("list")) == 0
    assert capsys.readouterr() == (
        "",
        f"nothing scheduled — no routines, no pending wake-ups ({URL})\n",
    )
    pending = {
        "id": "w1",
        "session": "chat",
        "fireAt": "2099-01-01T00:00:00.000Z",
        "sessionSpent24h": {"inputTokens": 1, "outputTokens": 2, "costs": {}},
    }
    answering(monkeypatch, served([{"name": "adhoc"}], **{"/wakeups": [pending]}))
    assert await cmd_list(remote("list", "--json")) == 0
    assert json.loads(capsys.readouterr().out) == {
        "routines": [routine_json(RoutineRow(Routine(name="adhoc", prompt="p"), None, []))],
        "wakeups": [pending],
    }
    assert await cmd_list(remote("list")) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert lines[:3] == [
        "ROUTINE  NEXT  LEFT  LAST  RECENT  SCHEDULE",
        "adhoc    -     -     -     -       on demand",
        "",
    ]
    assert lines[4].split()[:2] == ["w1", "chat"]
    assert "1 in, 2 out" in lines[4]
    assert (len(lines), err) == (5, "")


@pytest.mark.usefixtures("ascii_strip")
async def test_unreadable_wake_ups_are_said_and_the_routines_still_shown(
    env: Env, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # They ended `list` and `status` whole: a journal that could not be read hid every routine.
    monkeypatch.delenv("TRIO_ROUTINES_URL", raising=False)
    env.state.mkdir()  # a state there (else that is said first)
    env.routine("adhoc")
    store = MemoryStore()
    store.fail("list_wakeups", StateFault("the journal is torn"))
    on_store(monkeypatch, store)
    said = "the pending wake-ups are unreadable — the journal is torn\n"
    for command in ("list", "status"):
        run = cmd_list if command == "list" else cmd_status
        assert await run(parsed(env, command)) == 0
        out, err = capsys.readouterr()
        assert out.splitlines()[:4] == [
            "ROUTINE  NEXT  LEFT  LAST  RECENT  SCHEDULE",
            "adhoc    -     -     -     -       on demand",
            "",
            "(the pending wake-ups are unreadable)",
        ]
        assert err == said
        assert await run(parsed(env, command, "--json")) == 0
        out, err = capsys.readouterr()
        assert json.loads(out)["wakeups"] is None  # unreadable: not none pending
        assert [r["name"] for r in json.loads(out)["routines"]] == ["adhoc"]
        assert err == said
    (env.routines / "adhoc.md").unlink()  # not "nothing scheduled": it may not be so
    assert await cmd_list(parsed(env, "list")) == 0
    assert capsys.readouterr() == ("(no routines)\n\n(the pending wake-ups are unreadable)\n", said)
    # A store that answers no read (not reached, no tables yet) ends the command in one line.
    store.fail("paused", StateFault("no connection"))
    for run in (cmd_list, cmd_status):
        with pytest.raises(StateFault, match=r"^the journal is torn$"):
            await run(parsed(env, "list"))
    assert capsys.readouterr() == ("", "")


@pytest.mark.parametrize("command", ["list", "status"])
async def test_a_store_that_answers_no_read_is_said_unreadable_as_a_whole(
    env: Env, command: str
) -> None:
    # A PostgreSQL server nobody listens for: the wake-ups are read first, but it is the
    # state that is unreadable, and the line says where and why, not "the wake-ups".
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (env.routines / "daily.md").write_text("---\ncron: '0 9 * * *'\n---\nhello\n")
    argv = [command, "--state", f"postgresql://postgres@127.0.0.1:{port}/test"]
    args = build_parser().parse_args([*argv, "--routines", str(env.routines)])
    with pytest.raises(StateFault) as caught:
        await (cmd_list if command == "list" else cmd_status)(args)
    said = str(caught.value)
    assert said.startswith(f"the state in postgresql://127.0.0.1:{port}/test is unreadable: ")
    assert said.endswith(" — is the server up and the URL right?")
    assert "wake-ups" not in said
