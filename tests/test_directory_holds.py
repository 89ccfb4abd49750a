"""The state directory's holds: where they live, the fence against earlier versions' replicas,
and claims that are alive while the replica they name is (no hold of their own)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio

from trio_routines import Outcome, Routine, Scheduler
from trio_routines.agent import Completed, Event
from trio_routines.errors import StateFault
from trio_routines.instants import format_iso
from trio_routines.presence import Presence
from trio_routines.replicas import ReplicaInfo, claim_key, replica_key, session_key
from trio_routines.scheduler.holds import Holds
from trio_routines.sessions import SessionGate
from trio_routines.stores import DirectoryStore
from trio_routines.stores.directory.holds import DirectoryPresence, keys_alive
from trio_routines.stores.directory.lockfiles import GETLK, OLDER

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
SLOT = datetime(2026, 7, 7, 9, tzinfo=UTC)

# What a replica of an earlier version does at its join: a write lock on one byte of one of
# the 16 files of schedule/holds/ (the file and the byte its replica key picks), held until
# its standard input closes.
EARLIER = """
import fcntl, os, struct, sys
key, folder, files = int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
fd = os.open(os.path.join(sys.argv[1], "schedule", folder, f"{key % files:02x}"),
             os.O_RDWR | os.O_CREAT, 0o644)
lock = struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, key >> 2, 1, 0)
try:
    fcntl.fcntl(fd, fcntl.F_OFD_SETLK, lock)
except OSError:
    print("refused", flush=True)
    sys.exit(0)
print("held", flush=True)
sys.stdin.read()
"""


def info(replica: str) -> ReplicaInfo:
    return ReplicaInfo(replica, "0.1.0", "host", 42, T0, T0)


def locker(root: Path, key: int, folder: str, files: int) -> subprocess.Popen[str]:
    """Another process holding ``key`` in ``files`` files of ``schedule/<folder>/``."""
    (root / "schedule" / folder).mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-c", EARLIER, str(root), str(key), folder, str(files)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def earlier_replica(root: Path, replica: str) -> subprocess.Popen[str]:
    return locker(root, replica_key(replica), "holds", 16)


def maker(root: Path, routine: str, slot: datetime) -> subprocess.Popen[str]:
    """Another replica of this version making the claim of ``slot``: its hold held."""
    return locker(root, claim_key(routine, slot), "holds2", 64)


def answer(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    return process.stdout.readline().strip()


def end(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.close()
    assert process.wait(timeout=30) == 0
    process.stdout.close()


async def test_an_earlier_versions_live_replica_keeps_this_one_from_joining(
    tmp_path: Path,
) -> None:
    earlier = earlier_replica(tmp_path, "old")
    try:
        assert answer(earlier) == "held"
        store = DirectoryStore(tmp_path)
        with pytest.raises(StateFault) as refused:
            await store.join(info("new"))
        assert str(refused.value) == f"could not join {tmp_path}: {OLDER}"
        assert "\n" not in str(refused.value)
        # Refused, it holds nothing: the earlier replica's hold is the only one there.
        assert keys_alive(tmp_path, None, [replica_key("new")]) == [False]
    finally:
        end(earlier)
    member = await store.join(info("new"))  # the earlier one gone, the join goes through
    assert keys_alive(tmp_path, None, [replica_key("new")]) == [True]
    await member.leave()
    await store.aclose()


async def test_a_joined_replica_keeps_an_earlier_version_from_joining_until_it_leaves(
    tmp_path: Path,
) -> None:
    first, second = DirectoryStore(tmp_path), DirectoryStore(tmp_path)
    a = await first.join(info("a"))
    b = await second.join(info("b"))  # members of this version share the fence
    await a.leave()
    for replica in ("old-1", "old-2", "old-3"):  # keys in different files of the old layout
        earlier = earlier_replica(tmp_path, replica)
        assert answer(earlier) == "refused"
        end(earlier)
    await b.leave()
    earlier = earlier_replica(tmp_path, "old-1")
    assert answer(earlier) == "held"
    end(earlier)
    await first.aclose()
    await second.aclose()


async def test_a_reader_sees_an_earlier_versions_replica_and_its_claim_alive(
    tmp_path: Path,
) -> None:
    # Read between an upgrade and the restart (status, history): the earlier replica runs.
    store = DirectoryStore(tmp_path)
    await store.claim("r", SLOT, SLOT, replica="old")
    earlier = earlier_replica(tmp_path, "old")
    try:
        assert answer(earlier) == "held"
        assert keys_alive(tmp_path, None, [replica_key("old"), replica_key("gone")]) == [
            True,
            False,
        ]
        assert await store.claims_alive([("r", SLOT)]) == [True]
    finally:
        end(earlier)
    assert keys_alive(tmp_path, None, [replica_key("old")]) == [False]
    assert await store.claims_alive([("r", SLOT)]) == [False]
    await store.aclose()


async def test_a_claim_is_alive_while_the_replica_it_names_is(tmp_path: Path) -> None:
    first, second = DirectoryStore(tmp_path), DirectoryStore(tmp_path)
    a = await first.join(info("a"))
    b = await second.join(info("b"))
    await first.claim("r", SLOT, SLOT, replica="a")
    await first.claim("q", SLOT, SLOT)  # made before claims named their replica
    await first.claim("p", SLOT, SLOT, replica="a")
    await first.settle("p", SLOT, Outcome.COMPLETED, 5)
    fifo = tmp_path / "schedule" / "claims" / "f" / "2026-07-07T09-00-00-000Z"
    fifo.parent.mkdir()
    os.mkfifo(fifo)  # planted where a claim would be: read as none, never waited on
    claims = [(name, SLOT) for name in ("r", "q", "p", "f", "never")]
    # No hold is taken for a claim: its replica's is what makes it alive.
    assert keys_alive(tmp_path, None, [claim_key("r", SLOT)]) == [False]
    assert await second.claims_alive(claims) == [True, False, False, False, False]
    assert await DirectoryStore(tmp_path).claims_alive(claims[:1]) == [True]  # not joined
    await a.leave()
    assert await second.claims_alive(claims[:1]) == [False]
    await b.leave()
    await first.aclose()
    await second.aclose()


class Waiting:
    """An agent whose turns wait for ``go``."""

    def __init__(self) -> None:
        self.started = trio.Event()
        self.go = trio.Event()

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        self.started.set()
        await self.go.wait()
        yield Completed()


async def test_a_fire_holds_its_session_in_the_store_and_its_claim_here_only(
    tmp_path: Path,
) -> None:
    routine = Routine(name="r", prompt="p", cron="0 * * * *")
    agent = Waiting()
    store = DirectoryStore(tmp_path)
    scheduler = Scheduler(agent=agent, store=store, routines=[routine], now=lambda: T0)
    other = DirectoryStore(tmp_path)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        fired = []
        done = trio.Event()

        async def fire() -> None:
            fired.append(await scheduler.fire("r", SLOT))
            done.set()

        nursery.start_soon(fire)
        await agent.started.wait()
        keys = [claim_key("r", SLOT), session_key(routine.session)]
        assert keys_alive(tmp_path, None, keys) == [False, True]
        assert await other.claims_alive([("r", SLOT)]) == [True]
        again = await scheduler.fire("r", SLOT)  # held here: a duplicate, the store unasked
        assert (again.claimed, again.reason) == (False, "duplicate")
        agent.go.set()
        await done.wait()
        assert (fired[0].claimed, fired[0].outcome) == (True, Outcome.COMPLETED)
        assert keys_alive(tmp_path, None, keys) == [False, False]
        assert await other.claims_alive([("r", SLOT)]) == [False]
        scheduler.stop(0)
    await other.aclose()
    await store.aclose()


async def test_a_claim_an_earlier_process_made_under_our_id_is_recorded_interrupted(
    tmp_path: Path,
) -> None:
    from trio_routines.scheduler.boot import BOOT_INTERRUPTED
    from trio_routines.scheduler.openclaims import found_by

    store = DirectoryStore(tmp_path)
    # web-1 claimed, then died; a new process takes the same id (a fixed --replica).
    await store.claim("r", SLOT, SLOT, replica="web-1")
    scheduler = Scheduler(
        agent=Waiting(),
        store=store,
        routines=[Routine(name="r", prompt="p", cron="0 0 1 1 *")],  # nothing due
        now=lambda: T0,
        wakeups=False,
        replica="web-1",
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        # Our id's lock is ours now, so the store sees a claim naming web-1 alive: only we
        # know whether it is one of our turns.
        await store.claim("other", SLOT, SLOT, replica="web-1")
        assert await DirectoryStore(tmp_path).claims_alive([("other", SLOT)]) == [True]
        scheduler.stop(0)
    (fire,) = await store.history("r")
    assert (fire.outcome, fire.error) == (
        Outcome.INTERRUPTED,
        found_by(BOOT_INTERRUPTED, "web-1"),
    )
    await store.aclose()


class Plain(Presence):
    """A presence whose store grants every hold and records what it lets go of."""

    def __init__(self, replica: str) -> None:
        super().__init__(info(replica))
        self.gone: list[int] = []

    def _let_go(self, keys: list[int]) -> None:
        self.gone += keys


async def test_a_claim_written_lets_the_store_go_of_its_hold_and_keeps_it_here() -> None:
    presence = Plain("a")
    gate = SessionGate(Waiting())
    holds = Holds(gate, lambda: presence)
    hold = await holds.enter("s", 7)
    assert (hold.claimed, hold.busy) == (True, False)
    hold.let_store_go(7)
    assert presence.gone == [7]  # the store let go of the claim's hold ...
    assert presence.holds(7)  # ... which this process keeps
    again = await holds.enter("t", 7)  # the same slot: a duplicate, here
    assert not again.claimed
    again.release()
    assert presence.gone == [7, session_key("t")]
    hold.let_store_go(7)  # once only
    assert presence.gone == [7, session_key("t")]
    hold.release()
    assert presence.gone == [7, session_key("t"), session_key("s")]  # only the session's
    assert not presence.holds(7)
    assert not gate.busy("s")


async def test_replicas_firing_one_slot_together_run_it_once_and_skip_nothing(
    tmp_path: Path,
) -> None:
    routine = Routine(name="r", prompt="p", cron="* * * * *")
    stores = [DirectoryStore(tmp_path), DirectoryStore(tmp_path)]
    agent = Waiting()
    agent.go.set()
    replicas = [
        Scheduler(agent=agent, store=store, routines=[routine], now=lambda: T0, replica=name)
        for store, name in zip(stores, ("a", "b"), strict=True)
    ]
    fired: list[tuple[str, str | None]] = []

    async def fire(scheduler: Scheduler, slot: datetime) -> None:
        result = await scheduler.fire("r", slot)
        fired.append((result.outcome.value if result.outcome else "", result.reason))

    async with trio.open_nursery() as nursery:
        for scheduler in replicas:
            await nursery.start(scheduler.run)
        for minute in range(20):
            slot = SLOT + timedelta(minutes=minute)
            async with trio.open_nursery() as both:
                for scheduler in replicas:
                    both.start_soon(fire, scheduler, slot)
        for scheduler in replicas:
            scheduler.stop(0)
    assert sorted(set(fired)) == [("", "duplicate"), ("completed", None)]
    assert fired.count(("completed", None)) == 20
    for store in stores:
        await store.aclose()


async def test_a_fire_never_asks_the_state_directory_for_its_claims_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[int] = []
    take = DirectoryPresence._take

    async def recorded(self: DirectoryPresence, keys: list[int]) -> list[bool]:
        asked.extend(keys)
        return await take(self, keys)

    monkeypatch.setattr(DirectoryPresence, "_take", recorded)
    routine = Routine(name="r", prompt="p", cron="0 * * * *")
    agent = Waiting()
    agent.go.set()
    store = DirectoryStore(tmp_path)
    scheduler = Scheduler(agent=agent, store=store, routines=[routine], now=lambda: T0)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        fired = await scheduler.fire("r", SLOT)
        scheduler.stop(0)
    assert (fired.claimed, fired.outcome) == (True, Outcome.COMPLETED)
    assert asked == [session_key(routine.session)]
    await store.aclose()


async def test_a_claim_being_made_is_alive_while_its_hold_is_held(tmp_path: Path) -> None:
    # A claim file is made, then written: between the two it names no replica, and its
    # maker holds its claim's hold until it is written.
    claim = tmp_path / "schedule" / "claims" / "r" / "2026-07-07T09-00-00-000Z"
    claim.parent.mkdir(parents=True)
    claim.touch()
    store = DirectoryStore(tmp_path)
    making = maker(tmp_path, "r", SLOT)
    try:
        assert answer(making) == "held"
        assert await store.claims_alive([("r", SLOT)]) == [True]
    finally:
        end(making)
    assert await store.claims_alive([("r", SLOT)]) == [False]  # its maker died unwritten
    await store.aclose()


async def test_a_claim_written_while_it_was_looked_at_is_judged_by_its_replica(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trio_routines.stores.directory.members import DirectoryMembers

    first, second = DirectoryStore(tmp_path), DirectoryStore(tmp_path)
    a = await first.join(info("a"))
    # Read unwritten, then (its maker let go of its hold meanwhile) written: the second
    # reading decides.
    readings = iter([None, "a", None, "gone"])
    monkeypatch.setattr(DirectoryMembers, "_holder", lambda *_: next(readings))
    assert await second.claims_alive([("r", SLOT)]) == [True]
    assert await second.claims_alive([("r", SLOT)]) == [False]
    await a.leave()
    await first.aclose()
    await second.aclose()


async def test_a_boot_leaves_a_claim_being_made_by_another_replica_alone(
    tmp_path: Path,
) -> None:
    from trio_routines.scheduler.boot import BOOT_INTERRUPTED
    from trio_routines.scheduler.openclaims import found_by

    store = DirectoryStore(tmp_path)
    await store.claim("r", SLOT, SLOT, replica="dead")  # a dead replica's: interrupted
    claim = tmp_path / "schedule" / "claims" / "q" / "2026-07-07T09-00-00-000Z"
    claim.parent.mkdir(parents=True)
    claim.touch()  # made by a live replica, not written yet
    making = maker(tmp_path, "q", SLOT)
    try:
        assert answer(making) == "held"
        scheduler = Scheduler(
            agent=Waiting(),
            store=store,
            routines=[Routine(name=n, prompt="p", cron="0 0 1 1 *") for n in ("r", "q")],
            now=lambda: T0,
            wakeups=False,
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(scheduler.run)
            scheduler.stop(0)
    finally:
        end(making)
    (fire,) = await store.history("r")
    assert (fire.outcome, fire.error) == (
        Outcome.INTERRUPTED,
        found_by(BOOT_INTERRUPTED, scheduler.replica),
    )
    assert claim.read_bytes() == b""  # left to its maker
    await store.aclose()


def test_serve_refuses_in_one_line_beside_an_earlier_versions_replica(tmp_path: Path) -> None:
    state, routines = tmp_path / "state", tmp_path / "routines"
    routines.mkdir()
    (routines / "r.md").write_text('---\ncron: "0 * * * *"\n---\nhello\n')
    earlier = earlier_replica(state, "old")
    try:
        assert answer(earlier) == "held"
        command = [sys.executable, "-m", "trio_routines", "--state", str(state)]
        command += ["--routines", str(routines), "--agent", "echo", "serve"]
        refused = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    finally:
        end(earlier)
    assert refused.returncode == 1
    assert refused.stderr == f"error: could not join {state}: {OLDER}\n"
    assert not (state / "schedule" / "replicas").exists() or not any(
        (state / "schedule" / "replicas").iterdir()
    )  # it published nothing


async def test_a_refused_join_locks_nothing_even_for_a_moment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Had it locked file after file until one refused, the earlier replica's holds in the
    # files locked before would have been refused meanwhile (its fires skipped for nothing).
    import fcntl

    from trio_routines.stores.directory import holds

    calls: list[int] = []
    real = fcntl.fcntl

    def recording(fd: int, command: int, arg: bytes) -> bytes:
        calls.append(command)
        return real(fd, command, arg)  # type: ignore[no-any-return]

    monkeypatch.setattr(holds.fcntl, "fcntl", recording)
    earlier = earlier_replica(tmp_path, "old-3")  # a key in one of the later files
    try:
        assert answer(earlier) == "held"
        with pytest.raises(StateFault, match="earlier version"):
            await DirectoryStore(tmp_path).join(info("new"))
    finally:
        end(earlier)
    assert calls
    assert set(calls) == {GETLK}


@pytest.mark.parametrize("failing", ["open", "listdir"])
async def test_a_fire_whose_claim_fails_says_so_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    import errno

    from oserrors import fail

    from trio_routines.stores import safefile
    from trio_routines.stores.directory import claimfiles

    routine = Routine(name="r", prompt="p", cron="0 * * * *")
    store = DirectoryStore(tmp_path, writer_process=False)
    scheduler = Scheduler(agent=Waiting(), store=store, routines=[routine], now=lambda: T0)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        if failing == "open":  # the claim's own fault names the slot already
            fail(monkeypatch, safefile, "open", errno.ENOSPC, lambda name, *a, **kw: name == ".")
        else:  # a fault of the directory is put in the slot's words
            fail(monkeypatch, claimfiles, "listdir", errno.EIO)
        with pytest.raises(StateFault) as raised:
            await scheduler.fire("r", SLOT)
        scheduler.stop(0)
    text = str(raised.value)
    assert text.startswith(f"could not claim slot {format_iso(SLOT)} of 'r': ")
    assert text.count("could not claim slot") == 1
    await store.aclose()
