"""The state directory's wake-up store (wakeuplog.py), pinned: changes. One whose caller gave
up while it was being written is undone, with its whole warning, and the journal says so; one
given up before is not made; an undo, an append or an fsync that fails is reported whole."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from trio_routines.converter import dumps
from trio_routines.errors import StateFault
from trio_routines.records import Wakeup
from trio_routines.stores.abandon import Handoff
from trio_routines.stores.directory.wakeupindex import Op, WakeupIndex, add_op, del_op, set_op
from trio_routines.stores.directory.wakeupjournal import line
from trio_routines.stores.directory.wakeuplog import WakeupLog

T0 = datetime(2026, 7, 7, 9, tzinfo=UTC)
EIO = "EIO: Input/output error"


def entry(wakeup_id: str, prompt: str = "p") -> Wakeup:
    return Wakeup(id=wakeup_id, session="s", prompt=prompt, fire_at=T0)


def eio(*_: object) -> None:
    raise OSError(errno.EIO, os.strerror(errno.EIO))


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


@pytest.mark.parametrize(
    ("plan", "undone"),
    [
        (  # a wake-up added, then set again in the same change: its add is undone last
            [add_op(entry("c"), 3), set_op(entry("c", "q"))],
            [set_op(entry("c")), del_op("c")],
        ),
        (  # a wake-up set, then removed: it comes back as it was, in its place
            [set_op(entry("b", "q")), del_op("b")],
            [add_op(entry("b", "q"), 2), set_op(entry("b"))],
        ),
    ],
    ids=["add-then-set", "set-then-del"],
)
def test_a_given_up_change_touching_one_wakeup_twice_is_undone_step_by_step(
    tmp_path: Path, plan: list[Op], undone: list[Op]
) -> None:
    store = WakeupLog(tmp_path, 1.0)
    store.change(Handoff(), lambda index: ([add_op(entry("a"), 1), add_op(entry("b"), 2)], None))
    handoff = Handoff()
    give_up_once_synced(store, handoff)
    store.change(handoff, lambda index: (plan, None))
    assert store.path.read_bytes().endswith(b"".join(line(op) for op in plan + undone))
    assert [(w, store.index.order_of(w.id)) for w in store.index] == [
        (entry("a"), 1),
        (entry("b"), 2),
    ]


def test_a_given_up_change_that_cannot_be_undone_is_an_error_naming_it_whole(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = WakeupLog(tmp_path, 1.0)
    store.change(Handoff(), lambda index: ([add_op(entry("a"), 1)], None))
    handoff = Handoff()
    give_up_once_synced(store, handoff)
    real_append = store.journal.append

    def append_once(fd: int, data: bytes) -> None:  # the change lands; its undo does not
        store.journal.append = eio  # type: ignore[method-assign]
        real_append(fd, data)

    store.journal.append = append_once  # type: ignore[method-assign]
    ops = [add_op(entry("c"), 2), del_op("a")]
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert store.change(handoff, lambda index: (ops, "made")) == "made"
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (
            logging.ERROR,
            f"the wake-up store {store.path}: a change given up by its caller was made after "
            f"all (wake-ups a, c) and could not be undone: could not write the wake-up store "
            f"{store.path}: {EIO} — the change made: {dumps(ops)}",
        )
    ]
    assert [w.id for w in store.index] == ["c"]  # the change stands, as the journal says
    assert store.path.read_bytes().endswith(b"".join(line(op) for op in ops))


def test_an_append_that_fails_is_a_fault_naming_it_even_when_the_cut_fails_too(
    tmp_path: Path,
) -> None:
    store = WakeupLog(tmp_path, 1.0)
    store.change(Handoff(), lambda index: ([add_op(entry("a"), 1)], None))
    before = store.path.read_bytes()
    store.journal.append = eio  # type: ignore[method-assign]
    store.journal.cut = eio  # type: ignore[method-assign]
    with pytest.raises(StateFault) as raised:
        store.change(Handoff(), lambda index: ([add_op(entry("b"), 2)], None))
    assert str(raised.value) == f"could not write the wake-up store {store.path}: {EIO}"
    assert [w.id for w in store.index] == ["a"]
    assert store.path.read_bytes() == before


def test_an_fsync_that_fails_after_the_append_is_one_named_warning_and_the_change_stands(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = WakeupLog(tmp_path, 1.0)
    store.change(Handoff(), lambda index: ([add_op(entry("a"), 1)], None))
    store.journal.sync = eio  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        store.change(Handoff(), lambda index: ([add_op(entry("b"), 2)], None))
    assert [r.getMessage() for r in caplog.records] == [
        f"wrote the wake-up store {store.path} but could not fsync it: {EIO}"
    ]
    assert [w.id for w in store.index] == ["a", "b"]
    assert store.path.read_bytes().endswith(line(add_op(entry("b"), 2)))


def test_a_change_whose_caller_gave_up_before_it_is_not_made(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = WakeupLog(tmp_path, 1.0)
    store.change(Handoff(), lambda index: ([add_op(entry("a"), 1)], None))
    before = store.path.read_bytes()
    handoff = Handoff()
    assert handoff.give_up()
    with caplog.at_level(logging.DEBUG, logger="trio_routines"):
        assert store.change(handoff, lambda index: ([del_op("a")], "left")) == "left"
    assert caplog.records == []
    assert store.path.read_bytes() == before
    assert [w.id for w in store.index] == ["a"]
