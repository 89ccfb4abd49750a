"""Property test of the state directory's wake-up store against the rules as a plain list.

Hypothesis drives two store objects on one state directory (two processes, as far as the
store can tell: each keeps its own index and catches up from the journal) through random
adds, takes, deferrals and removals over a handful of sessions (so the per-session cap is hit),
a clock that moves forward, and simulated crashes: a store reopened (a process restarted), a
line torn at the journal's end (a writer killed in the middle of its ``write``), and, with a
tiny compaction slack, new journal generations written all the time.

The model is :mod:`trio_routines.wakeups` on one list (what the memory store does). After every
step, both stores list exactly the model's wake-ups in the model's order, and every take
returned exactly the model's: so nothing is lost, nothing taken twice, nothing reordered.
"""

from __future__ import annotations

import tempfile
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest
import trio
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from trio_routines.errors import InvalidWakeup
from trio_routines.records import Wakeup
from trio_routines.stores.directory import DirectoryStore, wakeuplog
from trio_routines.wakeups import (
    WakeupRequest,
    plan_add,
    plan_defer,
    remove,
    take_first_due,
)

T = TypeVar("T")
T0 = datetime(2026, 7, 7, 9, tzinfo=UTC)
SESSIONS = ["a", "b", "c"]
CRONS = ["0 * * * *", "*/30 * * * *", "15 */2 * * *"]


def run(call: Callable[[], Awaitable[T]]) -> T:
    async def main() -> T:
        return await call()

    return trio.run(main)


def key(w: Wakeup) -> tuple[Any, ...]:
    return (w.id, w.session, w.prompt, w.fire_at, w.cron, w.attempts)


class JournalMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.TemporaryDirectory()
        self.root = Path(self.dir.name)
        self.stores = [self._open(), self._open()]
        self.model: list[Wakeup] = []
        self.now = T0
        self.taken: list[Wakeup] = []  # one-shots taken, for deferrals

    def _open(self) -> DirectoryStore:
        return DirectoryStore(self.root, writer_process=False, lock_timeout=30)

    def teardown(self) -> None:
        self.dir.cleanup()

    @initialize()
    def start(self) -> None:
        pass

    @rule(
        which=st.integers(0, 1),
        session=st.sampled_from(SESSIONS),
        minutes=st.integers(0, 240),
        cron=st.none() | st.sampled_from(CRONS),
    )
    def add(self, which: int, session: str, minutes: int, cron: str | None) -> None:
        fire_at = None if cron else self.now + timedelta(minutes=minutes)
        request = WakeupRequest(session=session, prompt=f"p{minutes}", fire_at=fire_at, cron=cron)
        store = self.stores[which]
        refused: str | None = None
        try:
            added: Wakeup | None = run(lambda: store.add_wakeup(request, self.now))
        except InvalidWakeup as exc:
            added, refused = None, str(exc)
        if refused is not None:
            with pytest.raises(InvalidWakeup) as expected:
                plan_add(self.model, request, self.now)
            assert str(expected.value) == refused  # the same text, its listing included
            return
        assert added is not None
        assert plan_add(self.model, request, self.now, new_id=added.id) == added
        self.model.append(added)

    @rule(which=st.integers(0, 1), minutes=st.integers(0, 90))
    def take(self, which: int, minutes: int) -> None:
        self.now += timedelta(minutes=minutes)
        store = self.stores[which]
        got = run(lambda: store.take_due_wakeup(self.now))
        self.model, expected = take_first_due(self.model, self.now)
        assert got == expected
        if got is not None and got.cron is None:
            self.taken.append(got)

    @precondition(lambda self: bool(self.taken))
    @rule(which=st.integers(0, 1), pick=st.integers(0, 100), minutes=st.integers(1, 60))
    def defer(self, which: int, pick: int, minutes: int) -> None:
        wakeup = self.taken.pop(pick % len(self.taken))
        fire_at = self.now + timedelta(minutes=minutes)
        store = self.stores[which]
        made = run(lambda: store.defer_wakeup(wakeup, fire_at))
        deferred = plan_defer(self.model, wakeup, fire_at)
        assert made == (deferred is not None)
        if deferred is not None:
            self.model.append(deferred)

    @rule(
        which=st.integers(0, 1),
        pick=st.integers(0, 100),
        known=st.booleans(),
        session=st.sampled_from([None, "own", "other"]),
    )
    def cancel(self, which: int, pick: int, known: bool, session: str | None) -> None:
        target = self.model[pick % len(self.model)] if known and self.model else None
        wakeup_id = target.id if target is not None else "no-such-id"
        if session == "own":
            session = target.session if target is not None else "a"
        elif session == "other":
            session = "zz"
        store = self.stores[which]
        removed = run(lambda: store.remove_wakeup(wakeup_id, session))
        self.model, expected = remove(self.model, wakeup_id, session)
        assert removed == expected

    @rule(which=st.integers(0, 1))
    def restart(self, which: int) -> None:
        self.stores[which] = self._open()  # a new process: reads the journal from the start

    @rule(junk=st.binary(min_size=1, max_size=40).map(lambda b: b.replace(b"\n", b" ")))
    def torn_tail(self, junk: bytes) -> None:
        path = self.root / "schedule" / "wakeups.journal"
        if not path.exists():
            return
        data = path.read_bytes()
        if not data.endswith(b"\n"):
            return  # one torn line at a time, as one writer killed leaves it
        with path.open("ab") as handle:  # a writer killed in the middle of its line
            handle.write(b'{"op":"add","n":' + junk)

    @invariant()
    def both_stores_hold_the_model(self) -> None:
        want = [key(w) for w in self.model]
        for store in self.stores:
            assert [key(w) for w in run(store.list_wakeups)] == want


@pytest.mark.slow
def test_the_journal_loses_nothing_and_takes_nothing_twice(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(wakeuplog, "SLACK", 3)  # new generations all the time
    machine = JournalMachine.TestCase
    machine.settings = settings(
        max_examples=max(10, settings().max_examples // 4),
        stateful_step_count=30,
        deadline=None,
    )
    machine().runTest()
