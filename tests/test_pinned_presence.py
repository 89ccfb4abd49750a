"""Pinned: what a replica's presence asks of its store, and when it asks nothing.

Written for the mutation run of presence.py (docs/mutation.md). The store contract's tests see
a presence through real stores, which answer the same whether or not they were asked a second
time; here a store's part records every call, so a call made for nothing (no key to take or to
let go of, or after the replica left) shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
import trio

from trio_routines.errors import StateFault
from trio_routines.presence import LocalPresence, Presence
from trio_routines.replicas import ReplicaInfo

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)


def info(replica: str = "a") -> ReplicaInfo:
    return ReplicaInfo(replica, "0.1.0", "host", 42, T0, T0)


class Recording(Presence):
    """A store's part that grants every key but those in ``refused``, and records each call."""

    def __init__(self, refused: Sequence[int] = ()) -> None:
        super().__init__(info())
        self.refused = set(refused)
        self.calls: list[tuple[str, list[int]]] = []

    async def _take(self, keys: list[int]) -> list[bool]:
        self.calls.append(("take", list(keys)))
        await trio.lowlevel.checkpoint()
        return [key not in self.refused for key in keys]

    def _let_go(self, keys: list[int]) -> None:
        self.calls.append(("let go", list(keys)))

    async def _leave(self) -> None:
        self.calls.append(("leave", []))
        await trio.lowlevel.checkpoint()


async def test_a_local_presence_grants_each_free_key_once() -> None:
    presence = LocalPresence(info())
    assert await presence.take([1, 2]) == [True, True]
    assert await presence.take([2, 3, 3]) == [False, True, False]
    assert [presence.holds(key) for key in (1, 2, 3, 4)] == [True, True, True, False]


async def test_a_take_of_keys_held_here_already_asks_the_store_nothing() -> None:
    presence = Recording(refused=[2])
    assert await presence.take([1, 2]) == [True, False]
    assert await presence.take([1, 1]) == [False, False]
    assert presence.calls == [("take", [1, 2])]
    assert presence.holds(1)
    assert not presence.holds(2)  # refused by the store: not held here either


async def test_let_go_tells_the_store_only_of_keys_held_each_once() -> None:
    presence = Recording()
    assert await presence.take([1, 2]) == [True, True]
    presence.let_go([7])
    presence.let_go([])
    assert presence.calls == [("take", [1, 2])]
    presence.let_go([2, 7, 2])
    assert presence.calls[1:] == [("let go", [2])]
    assert presence.holds(1)
    assert not presence.holds(2)


async def test_forget_lets_go_here_only_and_the_key_is_asked_for_again() -> None:
    presence = Recording()
    assert await presence.take([1]) == [True]
    presence.forget([1])
    assert not presence.holds(1)
    assert presence.calls == [("take", [1])]  # the store never heard of it
    assert await presence.take([1]) == [True]
    assert presence.calls == [("take", [1]), ("take", [1])]


def test_an_abandoned_decision_lets_go_of_every_key_it_reserved() -> None:
    presence = Recording()
    assert presence.reserve([1, 2]) == [True, True]
    presence.abandoned([])
    assert presence.calls == []
    presence.abandoned([1, 2])
    assert presence.calls == [("let go", [1, 2])]
    assert not presence.holds(1)
    assert not presence.holds(2)


def test_the_stores_answer_must_match_the_keys_reserved() -> None:
    presence = Recording()
    presence.reserve([1, 2])
    with pytest.raises(ValueError, match=r"^1 answers for 2 keys$"):
        presence.granted([1, 2], [True])


async def test_a_presence_that_left_lets_go_once_and_takes_nothing_more() -> None:
    presence = Recording()
    assert await presence.take([1]) == [True]
    await presence.leave()
    assert not presence.holds(1)
    await presence.leave()  # a second stop: the store is not asked again
    assert presence.calls == [("take", [1]), ("leave", [])]
    presence.let_go([1])
    presence.abandoned([1])
    assert presence.calls == [("take", [1]), ("leave", [])]
    with pytest.raises(StateFault) as raised:
        await presence.take([2])
    assert str(raised.value) == "replica a has left its store"
    assert not presence.holds(2)


async def test_orphans_are_let_go_of_each_once_and_keys_held_here_are_kept() -> None:
    # Rows naming this replica that this presence does not hold (granted late to a lost
    # presence of ours): let go of; a key held here now is another turn's, left alone.
    presence = Recording()
    assert await presence.take([1]) == [True]
    presence.let_go_orphans([1, 3, 3, 4])
    presence.let_go_orphans([1])
    assert presence.calls == [("take", [1]), ("let go", [3, 4])]
    assert presence.holds(1)


async def test_a_presence_lost_or_left_lets_go_of_no_orphan() -> None:
    lost = Recording()
    lost.lost.set()
    lost.let_go_orphans([3])
    assert lost.calls == []
    left = Recording()
    await left.leave()
    left.let_go_orphans([3])
    assert left.calls == [("leave", [])]


def test_a_lost_presence_says_where_it_lost_its_holds() -> None:
    presence = Recording()
    presence.held_in = "postgresql://db:5432/app"
    assert str(presence.lost_fault()) == "replica a lost its hold on postgresql://db:5432/app"
