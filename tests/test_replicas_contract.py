"""The replicas part of the store contract, over every store: joining, holds, who is alive."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio

from trio_routines.errors import InvalidOption, StateFault
from trio_routines.presence import Presence
from trio_routines.records import Outcome
from trio_routines.replicas import (
    ReplicaInfo,
    check_replica,
    claim_key,
    default_replica,
    key,
    session_key,
    stored_replica,
)
from trio_routines.store import Replicated, Store
from trio_routines.stores import DirectoryStore

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)


def info(replica: str) -> ReplicaInfo:
    return ReplicaInfo(replica, "0.1.0", "host", 42, T0, T0)


async def test_a_hold_is_granted_once_across_members_and_freed_by_release(
    store_factory: Callable[..., Store],
) -> None:
    first, second = store_factory(), store_factory()
    assert isinstance(first, Replicated)
    assert isinstance(second, Replicated)
    a = await first.join(info("a"))
    b = await second.join(info("b"))
    claim, session = claim_key("r", T0), session_key("routine:r")
    assert await a.take([claim, session]) == [True, True]
    assert await b.take([session, claim]) == [False, False]
    assert await a.take([session]) == [False]  # held here already: never granted twice
    await a.release([claim, session])
    assert await b.take([claim, claim]) == [True, False]  # listed twice: taken once
    assert await a.take([claim]) == [False]
    await b.leave()
    assert await a.take([claim]) == [True]  # leaving lets every hold go
    await a.leave()
    await first.aclose()
    await second.aclose()


async def test_a_sessions_hold_is_seen_by_every_member_and_by_a_reader(
    store_factory: Callable[..., Store],
) -> None:
    # What status and GET /routines say runs "on any replica": a turn of the session holds it.
    first, second, reader = store_factory(), store_factory(), store_factory()
    assert isinstance(first, Replicated)
    assert isinstance(second, Replicated)
    assert isinstance(reader, Replicated)
    a = await first.join(info("a"))
    b = await second.join(info("b"))
    chat, other = "chat:1", "routine:r"
    assert await first.sessions_held([chat, other]) == [False, False]
    assert await first.sessions_held([]) == []
    assert await a.take([session_key(chat)]) == [True]
    for store in (first, second, reader):  # the holder, another member, one never joined
        assert await store.sessions_held([other, chat, chat]) == [False, True, True]
    assert await b.take([session_key(other)]) == [True]
    assert await reader.sessions_held([chat, other]) == [True, True]
    await a.release([session_key(chat)])
    assert await second.sessions_held([chat, other]) == [False, True]
    await b.leave()  # leaving lets its holds go, for every reader
    assert await first.sessions_held([chat, other]) == [False, False]
    await a.leave()
    for store in (first, second, reader):
        await store.aclose()


async def held_claim(store: Store, member: Presence, routine: str, slot: datetime) -> None:
    """Claim ``slot`` as a scheduler of ``member`` does, holding the claim."""
    if getattr(store, "claims_take_holds", False):  # the claim is held by its replica
        holds = (member.holder, (session_key(f"routine:{routine}"),))
        result = await store.claim(routine, slot, slot, replica=member.replica, holds=holds)  # type: ignore[call-arg]
    elif getattr(store, "claims_live_with_replica", False):  # alive while its replica is
        result = await store.claim(routine, slot, slot, replica=member.replica)  # type: ignore[call-arg]
    else:
        assert await member.take([claim_key(routine, slot)]) == [True]
        result = await store.claim(routine, slot, slot, replica=member.replica)  # type: ignore[call-arg]
    assert result.taken


async def test_an_open_claim_is_alive_while_its_replica_holds_it(
    store_factory: Callable[..., Store],
) -> None:
    first, second = store_factory(), store_factory()
    assert isinstance(first, Replicated)
    assert isinstance(second, Replicated)
    a = await first.join(info("a"))
    b = await second.join(info("b"))
    later = T0 + timedelta(minutes=1)
    await held_claim(first, a, "r", T0)
    await held_claim(first, a, "q", T0)
    # Seen by every member; a slot never claimed has no holder.
    assert await second.claims_alive([("r", T0), ("r", later), ("q", T0)]) == [True, False, True]
    assert await first.claims_alive([("r", T0)]) == [True]
    # Settled: no holder any more (the scheduler lets go of the claim's hold after its settle).
    await first.settle("r", T0, Outcome.COMPLETED, 5)
    await a.release([claim_key("r", T0)])
    assert await second.claims_alive([("r", T0), ("q", T0)]) == [False, True]
    # Its replica gone, its open claim is dead.
    await a.leave()
    assert await second.claims_alive([("q", T0)]) == [False]
    await b.leave()
    await first.aclose()
    await second.aclose()


async def test_a_live_member_id_is_refused_and_free_again_once_it_left(
    store_factory: Callable[..., Store],
) -> None:
    first, second = store_factory(), store_factory()
    assert isinstance(first, Replicated)
    assert isinstance(second, Replicated)
    a = await first.join(info("node-1:7"))
    with pytest.raises(StateFault, match="'node-1:7' is in use by a live replica"):
        await second.join(info("node-1:7"))
    members = await second.replicas()
    assert [(m.id, m.alive, m.version, m.host, m.pid) for m in members] == [
        ("node-1:7", True, "0.1.0", "host", 42)
    ]
    await a.beat(3, T0 + timedelta(seconds=30))
    (seen,) = await second.replicas()
    assert (seen.in_flight, seen.last_seen) == (3, T0 + timedelta(seconds=30))
    await a.leave()
    assert await second.replicas() == []  # a clean leave removes the record
    again = await second.join(info("node-1:7"))
    await again.leave()
    await first.aclose()
    await second.aclose()


async def test_a_claim_keeps_its_replica_through_its_settle(store: Store) -> None:
    from trio_routines.records import Outcome

    await store.claim("r", T0, T0, replica="node-1:7")
    await store.settle("r", T0, Outcome.COMPLETED, 5)
    (fire,) = await store.history("r")
    assert (fire.outcome, fire.replica) == (Outcome.COMPLETED, "node-1:7")
    latest = await store.latest_fire("r")
    assert latest is not None
    assert latest.replica == "node-1:7"


def test_replica_ids_are_one_visible_line_of_bounded_length() -> None:
    assert check_replica("web-1:4242") == "web-1:4242"
    assert ":" in default_replica()
    for bad in ("", "x" * 129, "a\nb", "a\x1bb"):
        with pytest.raises(InvalidOption):
            check_replica(bad)
    assert stored_replica("ok") == "ok"
    assert stored_replica(7) is None
    assert stored_replica("a\nb") is None


def test_keys_are_stable_63_bit_and_apart_by_kind() -> None:
    assert key("session", "x") == key("session", "x")
    assert key("session", "x") != key("claim", "x")
    assert claim_key("r", T0) != claim_key("r", T0 + timedelta(milliseconds=1))
    assert all(0 <= key("k", str(n)) < 2**63 for n in range(200))
    # Fixed across processes and releases: other replicas compute the same keys.
    assert session_key("routine:r") == key("session", "routine:r") == 3026001249204088241
    assert claim_key("daily", datetime(2026, 7, 7, 9, tzinfo=UTC)) == 514973568066290583
    assert key("replica", "") == 513780108664010949
    assert key("k", "é\udcff") == 5633339457938612783  # a lone surrogate, as a name may hold
    assert key("session", "x") == key("session", "x")  # the shared hasher is never consumed


async def test_ten_thousand_fires_at_once_hold_twenty_thousand_keys(
    store_factory: Callable[..., Store],
) -> None:
    # PostgreSQL's lock table holds 6,400 advisory locks by default: holds must not be locks.
    first, second = store_factory(), store_factory()
    assert isinstance(first, Replicated)
    assert isinstance(second, Replicated)
    member = await first.join(info("herd"))
    other = await second.join(info("other"))
    slots = [T0 + timedelta(minutes=n) for n in range(10_000)]
    keys = [claim_key("r", slot) for slot in slots] + [session_key(f"s{n}") for n in range(10_000)]
    assert await member.take(keys) == [True] * len(keys)
    sample = keys[::1000]
    assert await other.take(sample) == [False] * len(sample)
    await member.release(keys)
    assert await other.take(sample) == [True] * len(sample)
    await other.leave()
    await member.leave()
    await first.aclose()
    await second.aclose()


async def test_hostile_files_in_the_replicas_directory_are_passed_over(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = DirectoryStore(state)
    member = await store.join(info("real"))
    where = state / "schedule" / "replicas"
    (where / "garbage.json").write_text("{not json")
    (where / "deep.json").write_text("[" * 100_000)
    (where / "huge.json").write_text(" " * 100_000)
    os.mkfifo(where / "fifo.json")
    (where / "link.json").symlink_to("/etc/passwd")
    (where / "lying.json").write_text('{"id": "real", "version": "0"}')  # not its file name
    with trio.fail_after(10):  # no read may block on the FIFO
        members = await store.replicas()
    assert [(m.id, m.alive) for m in members] == [("real", True)]
    await member.leave()
    await store.aclose()


@pytest.mark.slow
def test_a_bad_replica_id_is_one_line_and_usage(tmp_path: Path) -> None:
    for bad in ("", "a\tb", "x" * 200):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "trio_routines",
                "list",
                "--replica",
                bad,
                "--state",
                str(tmp_path / "state"),
                "--routines",
                str(tmp_path),
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert "error: argument --replica: a replica id must be" in result.stderr


@pytest.mark.parametrize("folder", ["holds", "holds2"])
async def test_a_planted_link_among_the_holds_is_refused_naming_it(
    tmp_path: Path, folder: str
) -> None:
    state = tmp_path / "state"
    (state / "schedule" / folder).mkdir(parents=True)
    (state / "schedule" / folder / "0f").symlink_to(tmp_path / "elsewhere")
    store = DirectoryStore(state)
    with pytest.raises(StateFault, match=rf"{folder}/0f is a symbolic link — refused"):
        await store.join(info("a"))
    assert not (tmp_path / "elsewhere").exists()  # nothing written through it
    await store.aclose()
