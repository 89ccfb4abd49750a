"""The wake-up tools pinned whole (tools.py): the definitions as the model reads them, each
answer's text, and ``until`` carried from the call to the wake-up (see docs/mutation.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from scheduler_rig import T0

from trio_routines import Scheduler
from trio_routines.errors import StateFault
from trio_routines.records import Wakeup
from trio_routines.testing import MemoryStore, ScriptedAgent, WallClock
from trio_routines.tools import CANCEL, LIST, SCHEDULE, call_tool, definitions, limits_text
from trio_routines.wakelimits import WakeLimits

SCHEDULE_TEXT = (
    "Schedule a later turn of this conversation: you will be woken with `prompt` as the "
    'message. Give `in` for once (a delay such as "30m", "2h", "1d", or seconds as a number) '
    "or `cron` (with an optional IANA `tz`) to repeat. Limits: one-shots at least 60 s ahead; "
    "recurring ones at most every 10 minutes; at most 20 pending per session; at most 12 "
    "self-scheduled turns per session in any hour, and chains of wake-ups set by wake-ups at "
    "most 16 deep; a recurring one ends at its `until`, by default (and at the latest) 30 "
    "days after it was scheduled."
)
PLAIN = [
    {
        "name": "schedule_wakeup",
        "description": SCHEDULE_TEXT,
        "parameters": {
            "type": "object",
            "properties": {
                "prompt": {
                    "type": "string",
                    "description": "What the woken turn should do, written to yourself.",
                },
                "in": {
                    "type": ["string", "number"],
                    "description": 'Once, after this delay: "90s", "30m", "1.5h", "2d", or a '
                    "number of seconds.",
                },
                "cron": {
                    "type": "string",
                    "description": 'Repeat on this 5-field cron, e.g. "0 9 * * 1-5".',
                },
                "tz": {
                    "type": "string",
                    "description": 'The cron\'s time zone, e.g. "Europe/Berlin" (default UTC).',
                },
                "until": {
                    "type": "string",
                    "description": "With `cron`: stop repeating after this ISO 8601 instant "
                    'with its zone, e.g. "2026-07-31T18:00:00Z".',
                },
            },
            "required": ["prompt"],
            "additionalProperties": False,
        },
    },
    {
        "name": "list_wakeups",
        "description": "List the wake-ups this conversation has pending: id, when, what.",
        "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
    },
    {
        "name": "cancel_wakeup",
        "description": (
            "Cancel a pending wake-up of this conversation by its id (what the text of a "
            "recurring wake-up's turn calls unwake)."
        ),
        "parameters": {
            "type": "object",
            "properties": {"id": {"type": "string", "description": "The id schedule_wakeup gave."}},
            "required": ["id"],
            "additionalProperties": False,
        },
    },
]


def test_the_definitions_whole() -> None:
    assert definitions() == PLAIN
    with pytest.raises(ValueError, match=r"^give the scheduler or the limits, not both$"):
        definitions(scheduler=object(), limits=WakeLimits())


def test_the_limits_without_a_rate_or_a_depth_whole() -> None:
    assert limits_text(WakeLimits(rate=None, depth=None)) == (
        "one-shots at least 60 s ahead; recurring ones at most every 10 minutes; at most 20 "
        "pending per session; no limit on self-scheduled turns per hour, and no limit on "
        "chains of wake-ups set by wake-ups; a recurring one ends at its `until`, by default "
        "(and at the latest) 30 days after it was scheduled"
    )


def scheduler() -> tuple[Scheduler, MemoryStore]:
    store = MemoryStore()
    return Scheduler(agent=ScriptedAgent(), store=store, routines=[], now=WallClock(T0)), store


async def test_a_recurring_wake_up_keeps_the_until_the_model_gave() -> None:
    sched, store = scheduler()
    arguments = {"prompt": "p", "cron": "0 9 * * *", "tz": "Europe/Berlin"}
    until = "2026-07-10T12:00:00Z"
    text = await call_tool(sched, "chat", SCHEDULE, {**arguments, "until": until})
    (wakeup,) = await store.list_wakeups()
    assert wakeup.until == datetime.fromisoformat(until)
    assert text == (
        f'Scheduled {wakeup.id}: recurring (cron "0 9 * * *" Europe/Berlin until '
        "2026-07-10T12:00:00.000Z), next at 2026-07-08T07:00:00.000Z: p — cancel it with "
        f'cancel_wakeup(id="{wakeup.id}") if it is no longer needed.'
    )


@pytest.mark.parametrize(
    "until", ["2026-07-10T12:00Z", "2026-07-10 14:00+02", "2026-07-10T14:00+0200"]
)
async def test_the_until_may_be_written_as_a_person_writes_an_instant(until: str) -> None:
    sched, store = scheduler()
    arguments = {"prompt": "p", "cron": "0 9 * * *", "until": until}
    text = await call_tool(sched, "chat", SCHEDULE, arguments)
    (wakeup,) = await store.list_wakeups()
    assert wakeup.until == datetime(2026, 7, 10, 12, tzinfo=UTC), text


@pytest.mark.parametrize(
    ("arguments", "answer"),
    [
        (
            {"prompt": "p", "in": "30m", "until": "2026-07-10T12:00:00Z"},
            "schedule_wakeup: `until` goes with `cron` only (a one-shot fires once).",
        ),
        (
            {"prompt": "p", "cron": "0 9 * * *", "until": "next week"},
            "schedule_wakeup: `until` must be an ISO 8601 instant with its zone, such as "
            '"2026-07-31T18:00:00Z".',
        ),
        (
            {"prompt": "p", "in": "soon"},
            'schedule_wakeup: could not read `in`; use a unit like "30m", "2h", "1d", or a '
            "number of seconds.",
        ),
        (
            {"prompt": "p", "in": "30m", "x": 1, "y": 2},
            "schedule_wakeup: unknown argument(s) x, y; this tool takes: prompt, in, cron, tz, "
            "until.",
        ),
        (
            "{not json",
            'schedule_wakeup: the arguments are not valid JSON; send an object such as {"prompt": '
            "...}.",
        ),
        ([1, 2], "schedule_wakeup: the arguments must be a JSON object."),
        (
            '{"prompt": "p", "in": "30m", "in": "1d"}',
            "schedule_wakeup: the arguments name the key 'in' twice; send each once.",
        ),
    ],
)
async def test_a_wrong_schedule_call_is_answered_whole(arguments: Any, answer: str) -> None:
    sched, store = scheduler()
    assert await call_tool(sched, "chat", SCHEDULE, arguments) == answer
    assert await store.list_wakeups() == []


async def test_a_wrong_cancel_call_is_answered_whole() -> None:
    sched, _ = scheduler()
    give = "cancel_wakeup: give `id`, as schedule_wakeup or list_wakeups showed it."
    assert await call_tool(sched, "chat", CANCEL, {"id": ""}) == give
    assert await call_tool(sched, "chat", CANCEL, {"id": 5}) == give
    assert await call_tool(sched, "chat", CANCEL, {"id": "x", "other": 1}) == (
        "cancel_wakeup: unknown argument(s) other; this tool takes: id."
    )
    assert await call_tool(sched, "chat", LIST, {"session": "other"}) == (
        "list_wakeups: unknown argument(s) session; this tool takes no arguments."
    )
    assert await call_tool(sched, "chat", CANCEL, {"id": "café"}) == (
        'cancel_wakeup: no pending wake-up "café" for this conversation (already fired, '
        "cancelled, or never scheduled here); list_wakeups shows what is pending."
    )


async def test_a_store_that_does_not_answer_is_said_whole() -> None:
    sched, store = scheduler()
    store.fail("list_wakeups", StateFault("down"), times=1)
    assert await call_tool(sched, "chat", LIST, {}) == (
        "list_wakeups: the scheduler could not read its store just now; try again later."
    )
    store.fail("remove_wakeup", StateFault("down"), times=1)
    assert await call_tool(sched, "chat", CANCEL, {"id": "w-1"}) == (
        "cancel_wakeup: the scheduler's store did not confirm this just now; try again (a "
        "second cancel of the same id is harmless)."
    )


class Kept:
    """An API of one's own (``WakeupApi``) holding wake-ups as they were stored."""

    def __init__(self, wakeups: list[Wakeup]) -> None:
        self.wakeups = wakeups

    async def add_wakeup(self, session: str, prompt: str, **_: Any) -> Wakeup:
        raise AssertionError("not asked here")

    async def list_wakeups(self, session: str | None = None) -> list[Wakeup]:
        return [w for w in self.wakeups if session is None or w.session == session]

    async def remove_wakeup(self, wakeup_id: str, session: str) -> bool:
        return False


async def test_the_listing_shows_each_wake_up_on_its_line() -> None:
    kept = Kept(
        [
            Wakeup(id="a", session="chat", prompt="once", fire_at=T0 + timedelta(hours=1)),
            # Stored before wake-ups had an end, in no zone.
            Wakeup(id="b", session="chat", prompt="daily", fire_at=T0, cron="0 9 * * *"),
        ]
    )
    assert await call_tool(kept, "chat", LIST, {}) == (
        "2 pending (at most 20):\n"
        "- a: next at 2026-07-07T11:30:00.000Z: once\n"
        '- b: recurring (cron "0 9 * * *"), next at 2026-07-07T10:30:00.000Z: daily'
    )


async def test_a_tool_name_that_is_no_text_is_an_unknown_tool() -> None:
    made, _ = scheduler()
    answer = await call_tool(made, "chat:1", ["unwake"], {})  # type: ignore[arg-type]
    assert answer == (
        "unknown tool \"['unwake']\": the tools are schedule_wakeup, list_wakeups, cancel_wakeup."
    )
