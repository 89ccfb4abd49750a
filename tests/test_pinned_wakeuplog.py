"""The state directory's wake-up store (wakeuplog.py), pinned: a change whose caller gave up
while it was being written is undone, with its whole warning, and the journal says so."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from trio_routines.records import Wakeup
from trio_routines.stores.abandon import Handoff
from trio_routines.stores.directory.wakeupindex import Op, WakeupIndex, add_op, del_op, set_op
from trio_routines.stores.directory.wakeupjournal import line
from trio_routines.stores.directory.wakeuplog import WakeupLog

T0 = datetime(2026, 7, 7, 9, tzinfo=UTC)


def entry(wakeup_id: str, prompt: str = "p") -> Wakeup:
    return Wakeup(id=wakeup_id, session="s", prompt=prompt, fire_at=T0)


def give_up_once_synced(store: WakeupLog, handoff: Handoff) -> Callable[[int], None]:
    """The journal's next syncs give ``handoff`` up once the data is on disk: a caller who left
    while the change was written. Returns the real sync, to put back."""
    real_sync = store.journal.sync

    def sync_then_give_up(fd: int) -> None:
        real_sync(fd)
        handoff.give_up()

    store.journal.sync = sync_then_give_up  # type: ignore[method-assign]
    return real_sync


def test_a_change_given_up_while_written_is_undone_in_the_journal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = WakeupLog(tmp_path, 1.0)
    store.change(Handoff(), lambda index: ([add_op(entry("a"), 1), add_op(entry("b"), 2)], None))
    handoff = Handoff()
    real_sync = give_up_once_synced(store, handoff)

    def plan(index: WakeupIndex) -> tuple[list[Op], str]:
        return [del_op("a"), set_op(entry("b", "q")), add_op(entry("c"), 3)], "planned"

    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert store.change(handoff, plan) == "planned"
    assert [r.getMessage() for r in caplog.records] == [
        f"the wake-up store {store.path}: a change given up by its caller was made after all "
        "(wake-ups a, b, c), and undone"
    ]
    store.journal.sync = real_sync  # type: ignore[method-assign]
    assert [(w, store.index.order_of(w.id)) for w in store.index] == [
        (entry("a"), 1),
        (entry("b"), 2),
    ]
    tail = b"".join(
        line(op)
        for op in [
            del_op("a"),
            set_op(entry("b", "q")),
            add_op(entry("c"), 3),
            del_op("c"),
            set_op(entry("b")),
            add_op(entry("a"), 1),
        ]
    )
    assert store.path.read_bytes().endswith(tail)
    other = WakeupLog(tmp_path, 1.0)  # another process reads the same back
    assert other.refresh()
    assert [(w, other.index.order_of(w.id)) for w in other.index] == [
        (entry("a"), 1),
        (entry("b"), 2),
    ]


def test_a_change_given_up_while_written_without_undo_stays_made_and_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = WakeupLog(tmp_path, 1.0)
    handoff = Handoff()
    give_up_once_synced(store, handoff)
    ops = [add_op(entry("b"), 1), add_op(entry("a"), 2)]
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert store.change(handoff, lambda index: (ops, 7), undo=False) == 7
    assert [r.getMessage() for r in caplog.records] == [
        f"the wake-up store {store.path}: a change given up by its caller was made after all "
        "(wake-ups a, b)"
    ]
    assert [w.id for w in store.index] == ["b", "a"]
    assert store.path.read_bytes().endswith(b"".join(line(op) for op in ops))
