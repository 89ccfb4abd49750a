"""The state directory's in-memory index of pending wake-ups (wakeupindex.py), pinned: every
kind of damaged journal entry refused with its whole message and nothing changed, order numbers,
an entry put back among the others (an undone take), and the heaps' clean-up of stale items."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from trio_routines.converter import wakeup_to_json
from trio_routines.records import Wakeup
from trio_routines.stores.directory.wakeupindex import WakeupIndex, add_op, del_op, set_op

T0 = datetime(2026, 7, 7, 9, tzinfo=UTC)
MINUTE = timedelta(minutes=1)


def entry(wakeup_id: str, at: datetime = T0, session: str = "s") -> Wakeup:
    return Wakeup(id=wakeup_id, session=session, prompt="p", fire_at=at)


def held(index: WakeupIndex) -> list[tuple[str, int]]:
    return [(w.id, index.order_of(w.id)) for w in index]


@pytest.mark.parametrize(
    ("op", "message"),
    [
        ([], "a journal entry must be an object"),
        ({"op": "move"}, "unknown journal entry 'move'"),
        ({"op": "del", "id": "zz"}, "del of a wake-up not pending: 'zz'"),
        ({"op": "del", "id": 7}, "del of a wake-up not pending: 7"),
        ({"op": "set"}, "a wake-up entry must be an object"),
        ({"op": "add", "n": 9}, "a wake-up entry must be an object"),
        (set_op(entry("zz")), "set of a wake-up not pending: 'zz'"),
        (set_op(entry("a", session="t")), "set of wake-up 'a' moves it to another session"),
        (add_op(entry("a"), 9), "add of a wake-up already pending: 'a'"),
        (add_op(entry("b"), 0), "add of wake-up 'b' without a valid order number"),
        (add_op(entry("b"), True), "add of wake-up 'b' without a valid order number"),  # type: ignore[arg-type]
        (
            {"op": "add", "n": "2", "wakeup": wakeup_to_json(entry("b"))},
            "add of wake-up 'b' without a valid order number",
        ),
    ],
)
def test_a_damaged_entry_is_refused_whole_and_changes_nothing(op: Any, message: str) -> None:
    index = WakeupIndex()
    index.apply(add_op(entry("a"), 1))
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        index.apply(op)
    assert held(index) == [("a", 1)]
    assert index.next_n == 2
    assert index.due(T0) == [entry("a")]


def test_order_numbers_follow_the_highest_held() -> None:
    index = WakeupIndex()
    assert index.next_n == 1
    index.apply(add_op(entry("a"), 5))
    assert index.next_n == 6
    index.apply(add_op(entry("b"), 3))  # an earlier number never lowers the next
    assert index.next_n == 6


def test_an_entry_put_back_takes_its_place_in_stored_order_and_in_its_session() -> None:
    # Ids against the order numbers' order, so that only the order numbers put them right.
    index = WakeupIndex()
    for n, (wakeup_id, session) in enumerate([("z", "s"), ("y", "s"), ("x", "s"), ("w", "t")], 1):
        index.insert(entry(wakeup_id, T0 + n * MINUTE, session), n)
    for wakeup_id in ("y", "x"):  # taken, then both put back (undone), the later first
        index.apply(del_op(wakeup_id))
    index.insert(entry("x", T0 + 3 * MINUTE), 3)
    assert held(index) == [("z", 1), ("x", 3), ("w", 4)]
    assert [w.id for w in index.of_session("s")] == ["z", "x"]
    index.insert(entry("y", T0 + 2 * MINUTE), 2)
    assert held(index) == [("z", 1), ("y", 2), ("x", 3), ("w", 4)]
    assert [w.id for w in index.of_session("s")] == ["z", "y", "x"]
    assert [w.id for w in index.of_session("t")] == ["w"]
    assert [w.id for w in index.due(T0 + 9 * MINUTE)] == ["z", "y", "x", "w"]


def test_many_changes_after_a_poll_leave_the_due_answers_right() -> None:
    # Every change leaves a stale item in a heap; past a bound they are rebuilt, keeping what
    # was found due as due.
    index = WakeupIndex()
    index.insert(entry("due", T0), 1)
    index.insert(entry("later", T0 + MINUTE), 2)
    assert index.first_due(T0) == entry("due")
    for k in range(1, 1200):
        index.apply(set_op(entry("later", T0 + k * MINUTE)))
    assert index.first_due(T0) == entry("due")
    assert index.due(T0 + 1199 * MINUTE) == [entry("due"), entry("later", T0 + 1199 * MINUTE)]
