"""The state directory's writer process: a herd written beside the event loop, safely.

Real child processes throughout: the real writer, and the misbehaving ones of tests/writers.py
(one ends before it is up, one dies on its first batch, one never answers, one whose writes
fail with EIO).
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import trio
import trio.testing

from trio_routines import cli
from trio_routines.claims import SPARE_CLAIM
from trio_routines.errors import StateFault
from trio_routines.instants import slot_name
from trio_routines.records import ClaimStatus, Outcome
from trio_routines.stores.directory import DirectoryStore
from trio_routines.stores.directory import writes as write_path
from trio_routines.stores.directory.writer import process as writer
from trio_routines.stores.directory.writer.process import WriterProcess

SLOT = datetime(2026, 7, 7, 9, tzinfo=UTC)
WRITERS = Path(__file__).with_name("writers.py")


def misbehaving(mode: str) -> list[str]:
    return [sys.executable, str(WRITERS), mode]


def child_of(process: WriterProcess) -> subprocess.Popen[bytes]:
    """The child ``process`` runs now (there must be one)."""
    child = process._child
    assert child is not None
    return child


async def up(store: DirectoryStore) -> WriterProcess:
    """Read as many routines as a boot that starts the writer process, and wait until it is up."""
    process = store._writes.process
    assert process is not None
    assert process.started == 0
    for i in range(write_path.PROCESS_AT):
        await store.latest_fire(f"r{i:04}")
    assert process.started == 1
    with trio.fail_after(30):
        while not process.ready():  # noqa: ASYNC110 -- another process, not a Trio task
            await trio.sleep(0.01)
    return process


def hold_replies(monkeypatch: pytest.MonkeyPatch) -> trio.Event:
    """Hold every reply of the writer process back, unread, until the event returned is set."""
    gate = trio.Event()
    receive = writer._receive

    async def held(sock: socket.socket) -> tuple[bytes, list[int]]:
        await gate.wait()
        return await receive(sock)

    monkeypatch.setattr(writer, "_receive", held)
    return gate


def claim_path(root: Path, routine: str, slot: datetime = SLOT) -> Path:
    return root / "schedule" / "claims" / routine / slot_name(slot)


async def test_a_store_reading_few_routines_starts_no_process(tmp_path: Path) -> None:
    async with DirectoryStore(tmp_path) as store:
        for i in range(write_path.PROCESS_AT - 1):
            await store.latest_fire(f"r{i}")
        assert (await store.claim("r0", SLOT, SLOT)).taken
        assert store._writes.process is not None
        assert store._writes.process.started == 0
        assert store._writes.claim_writes.batches == 1  # written by a thread


async def test_a_herd_is_written_by_the_writer_process(tmp_path: Path) -> None:
    names = [f"h{i:04}" for i in range(600)]
    async with DirectoryStore(tmp_path) as store:
        process = await up(store)
        results = {}

        async def fire(name: str) -> None:
            results[name] = await store.claim(name, SLOT, SLOT)
            assert await store.settle(name, SLOT, Outcome.COMPLETED, 1)

        async with trio.open_nursery() as nursery:
            for name in names:
                nursery.start_soon(fire, name)
        assert all(result.taken for result in results.values())
        # 1,200 writes in batches of at most WRITE_BATCH, none by a thread
        assert 2 * 600 // write_path.WRITE_BATCH <= process.batches <= 2 * 600
        assert store._writes.claim_writes.batches == store._writes.settle_writes.batches == 0
        assert store.flushes == 0  # the child flushed each batch itself
        for name in names:
            assert (await store.history(name))[-1].outcome is Outcome.COMPLETED
        # the same decisions as ever
        assert (await store.claim("h0000", SLOT, SLOT)).status is ClaimStatus.DUPLICATE
        earlier = await store.claim("h0000", SLOT - timedelta(minutes=1), SLOT)
        assert earlier.status is ClaimStatus.STALE
        assert earlier.newest == slot_name(SLOT)
        child = child_of(process)
    assert child.wait(30) == 0  # closing the store ends it


def flushes(root: Path) -> list[str]:
    """What a ``flushes`` writer saw after each of its flushes (see tests/writers.py)."""
    log = root.with_name(f"{root.name}.flushes")
    return log.read_text().splitlines() if log.exists() else []


async def test_a_batch_is_answered_once_the_child_flushed_it(tmp_path: Path) -> None:
    # One flush a batch, after its writes and before its answers; none in this process.
    root = tmp_path / "state"
    async with DirectoryStore(root, writer_process=misbehaving("flushes")) as store:
        process = await up(store)
        calls = []

        async def claim(name: str) -> None:
            calls.append(await process.submit("claims", (name, SLOT, SLOT)))

        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(claim, f"c{i}")
        assert [call.value.taken for call in calls] == [True] * 3
        assert process.batches == 1
        assert flushes(root) == ["c0 c1 c2"]
        assert [(call.later, call.flush) for call in calls] == [(None, None)] * 3
        calls.clear()
        async with trio.open_nursery() as nursery:
            for i in range(3):
                nursery.start_soon(claim, f"c{i}")
        # duplicates: nothing was written, so nothing was flushed
        assert [call.value.status for call in calls] == [ClaimStatus.DUPLICATE] * 3
        assert flushes(root) == ["c0 c1 c2"]
        assert await store.settle("c1", SLOT, Outcome.COMPLETED, 1)
        assert flushes(root) == ["c0 c1 c2"] * 2  # a settle is flushed before it is answered
        assert store.flushes == 0


async def test_the_child_prunes_the_newest_claim_only_once_the_new_one_is_flushed(
    tmp_path: Path,
) -> None:
    root = tmp_path / "state"
    async with DirectoryStore(root, keep=1, writer_process=misbehaving("flushes")) as store:
        assert (await store.claim("r0", SLOT, SLOT)).taken  # by a thread: no child yet
        await up(store)
        later = SLOT + timedelta(minutes=1)
        assert (await store.claim("r0", later, later)).taken
        # the flush saw both claims: the one before stayed until the new one was durable
        assert flushes(root) == ["r0 r0"]
        assert [path.name for path in claim_path(root, "r0").parent.iterdir()] == [slot_name(later)]


async def test_a_settle_whose_flush_fails_is_reported_unrecorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with DirectoryStore(tmp_path, writer_process=misbehaving("flush-eio")) as store:
        assert (await store.claim("r0", SLOT, SLOT)).taken  # by a thread, flushed here
        await up(store)
        with caplog.at_level(logging.WARNING, logger="trio_routines"):
            assert not await store.settle("r0", SLOT, Outcome.COMPLETED, 1)
        assert "r0: could not record the completed outcome of slot" in caplog.text
        assert "Input/output error" in caplog.text
        assert claim_path(tmp_path, "r0").exists()  # the claim stays, taken


async def test_the_childs_log_records_are_logged_here(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with DirectoryStore(tmp_path) as store:
        await up(store)
        assert (await store.claim("r0", SLOT, SLOT)).taken
        path = claim_path(tmp_path, "r0")
        path.unlink()
        path.mkdir()  # a directory squats on the claim: not a file to settle
        with caplog.at_level(logging.WARNING, logger="trio_routines"):
            assert not await store.settle("r0", SLOT, Outcome.COMPLETED, 1)
        assert "could not open the claim for slot" in caplog.text
        assert store._writes.settle_writes.batches == 0


async def test_a_settle_locked_by_another_waits_in_a_thread_of_its_own(tmp_path: Path) -> None:
    async with DirectoryStore(tmp_path, lock_timeout=0.2) as store:
        await up(store)
        assert (await store.claim("r0", SLOT, SLOT)).taken
        fd = os.open(claim_path(tmp_path, "r0"), os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # another process's settle, say
            # the child answers Contended; the store waits for the lock up to lock_timeout
            assert not await store.settle("r0", SLOT, Outcome.COMPLETED, 1)
        finally:
            os.close(fd)
        assert await store.settle("r0", SLOT, Outcome.COMPLETED, 1)
        assert (await store.history("r0"))[-1].outcome is Outcome.COMPLETED


@pytest.mark.parametrize(
    ("mode", "fault"),
    [
        # the write fails: the claim was never named, a retry and not a burn
        ("eio", r"could not claim slot .*Input/output error"),
        # the flush fails: the claim the child wrote is removed there
        ("flush-eio", r"^could not make the claim .*r0.* durable: EIO: Input/output error$"),
    ],
)
async def test_a_fault_in_the_childs_writes_or_flush_is_each_claims_fault(
    tmp_path: Path, mode: str, fault: str
) -> None:
    async with DirectoryStore(tmp_path, writer_process=misbehaving(mode)) as store:
        await up(store)
        with pytest.raises(StateFault, match=fault):
            await store.claim("r0", SLOT, SLOT)
        assert not claim_path(tmp_path, "r0").exists()
        assert store._writes.process is not None
        assert store._writes.process.ready()  # a fault of one batch, not of the process


async def test_a_child_that_dies_fails_its_batch_and_threads_write_meanwhile(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with DirectoryStore(tmp_path, writer_process=misbehaving("die")) as store:
        process = await up(store)
        with (
            caplog.at_level(logging.WARNING, logger="trio_routines"),
            pytest.raises(StateFault, match="writer process ended"),
        ):
            await store.claim("r0", SLOT, SLOT)
        assert "writer process ended" in caplog.text
        assert not process.alive
        assert (await store.claim("r1", SLOT, SLOT)).taken  # a thread wrote it
        assert store._writes.claim_writes.batches == 1
        # a batch as large as a herd's starts a new child
        async with trio.open_nursery() as nursery:
            for i in range(write_path.PROCESS_AT):
                nursery.start_soon(store.claim, f"n{i}", SLOT, SLOT)
        assert process.started == 2


async def test_a_child_that_does_not_answer_is_killed_and_its_batch_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(writer, "REPLY_TIMEOUT", 0.3)
    async with DirectoryStore(tmp_path, writer_process=misbehaving("hang")) as store:
        process = await up(store)
        child = child_of(process)
        with pytest.raises(StateFault) as raised:
            await store.claim("r0", SLOT, SLOT)
        assert str(raised.value).startswith(
            "the state directory's writer process did not answer in time while writing 1 claims"
        )
        assert child.wait(30) == -9  # killed
        assert (await store.claim("r0", SLOT, SLOT)).taken  # retried by a thread


@pytest.mark.slow
async def test_a_child_that_never_comes_up_is_given_up_after_a_few_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = DirectoryStore(tmp_path, writer_process=misbehaving("exit"))
    process = store._writes.process
    assert process is not None
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        for start in range(1, write_path.MAX_STARTS + 1):
            store._writes.start_writer()
            assert process.started == start
            child = child_of(process)
            child.wait(30)
            assert not process.ready()  # it ended: stopped, and told
            assert not process.alive
        store._writes.start_writer()
    assert store._writes.process is None  # threads write for good
    assert caplog.text.count("ended before it was up") == write_path.MAX_STARTS
    assert "keeps ending" in caplog.text
    assert (await store.claim("r0", SLOT, SLOT)).taken
    await store.aclose()


async def test_a_batch_the_child_went_away_before_is_written_by_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with DirectoryStore(tmp_path) as store:
        process = store._writes.process
        assert process is not None
        answers: Iterator[bool] = iter([True, False])  # up when asked, gone when sealed
        monkeypatch.setattr(process, "ready", lambda: next(answers))
        assert (await store.claim("r0", SLOT, SLOT)).taken
        assert store._writes.claim_writes.batches == 1
        assert process.batches == 0


@pytest.mark.parametrize("who", ["both", "leader", "joined"])
async def test_a_caller_cancelled_while_its_batch_is_written_gives_up_at_once(
    tmp_path: Path, who: str
) -> None:
    # Its answer may never come (a stopped child, a stalled disk): waiting for it would hold
    # a stop for REPLY_TIMEOUT. The child is given up; a claim it made is burned, never run.
    async with DirectoryStore(tmp_path, writer_process=misbehaving("hang")) as store:
        process = await up(store)
        child = child_of(process)  # never answers
        got: dict[str, object] = {}
        scopes = {name: trio.CancelScope() for name in ("r0", "r1")}

        async def claim(name: str) -> None:
            with scopes[name]:
                try:
                    got[name] = await store.claim(name, SLOT, SLOT)
                except StateFault as exc:
                    got[name] = exc
                return
            got[name] = "cancelled"

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(claim, "r0")  # leads: Trio runs tasks in start order here
                await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(claim, "r1")  # a batch of its own, behind r0's
                await trio.testing.wait_all_tasks_blocked()
                assert process.batches == 2  # both claims in flight
                for name in {"both": ["r0", "r1"], "leader": ["r0"], "joined": ["r1"]}[who]:
                    scopes[name].cancel()
        assert child.wait(30) == -9  # killed
        for name, answer in got.items():
            if scopes[name].cancel_called:
                assert answer == "cancelled"
            else:  # failed with the child, never reported taken
                assert isinstance(answer, StateFault)
                assert "given up" in str(answer)
        assert (await store.claim("r2", SLOT, SLOT)).taken  # the store goes on


async def test_a_caller_cancelled_before_its_batch_is_sent_leaves_it(tmp_path: Path) -> None:
    async with DirectoryStore(tmp_path) as store:
        process = await up(store)
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.claim, "r0", SLOT, SLOT)
                nursery.start_soon(store.claim, "r1", SLOT, SLOT)
                await trio.lowlevel.checkpoint()  # both have joined the batch, still open
                scope.cancel()
        assert process.batches == 1
        # the leader's claim (Trio's order decides which) was sent alone, then given up with
        # the child: made or not, the one that left its batch never was
        made = [claim_path(tmp_path, name).exists() for name in ("r0", "r1")]
        assert made.count(True) <= 1


async def test_closing_the_store_with_a_batch_in_flight_fails_it_and_hangs_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    await up(store)
    gate = hold_replies(monkeypatch)
    faults: list[StateFault] = []

    async def claim(name: str) -> None:
        try:
            await store.claim(name, SLOT, SLOT)
        except StateFault as exc:
            faults.append(exc)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(claim, "r0")
            await trio.testing.wait_all_tasks_blocked()
            await store.aclose()
            gate.set()
    assert len(faults) == 1
    assert "writer process" in str(faults[0])


async def test_replies_waiting_behind_each_other_are_read_one_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with DirectoryStore(tmp_path) as store:
        process = await up(store)
        names = [f"d{i}" for i in range(6)]
        for name in names:
            assert (await store.claim(name, SLOT, SLOT)).taken
        gate = hold_replies(monkeypatch)
        monkeypatch.setattr(process, "max_batch", 2)  # three batches in flight
        batches = process.batches
        results = {}

        async def claim(name: str) -> None:
            results[name] = await store.claim(name, SLOT, SLOT)

        async with trio.open_nursery() as nursery:
            for name in names:
                nursery.start_soon(claim, name)
            await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(0.5)  # the child answers all three: no descriptors, one stream
            gate.set()
        assert process.batches == batches + 3  # a batch is sent as it reaches max_batch
        assert {result.status for result in results.values()} == {ClaimStatus.DUPLICATE}
        assert process.ready()  # no reply was misread


def test_a_short_command_reading_many_routines_starts_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    routines = tmp_path / "routines"
    routines.mkdir()
    for i in range(write_path.PROCESS_AT + 1):
        (routines / f"r{i:03}.md").write_text("---\ncron: 0 9 * * *\n---\nhello\n")
    starts: list[WriterProcess] = []
    monkeypatch.setattr(WriterProcess, "start", lambda process: starts.append(process))
    state = str(tmp_path / "state")
    assert cli.main(["list", "--routines", str(routines), "--state", state]) == 0
    assert len(capsys.readouterr().out.splitlines()) > write_path.PROCESS_AT  # all were read
    assert starts == []


@pytest.mark.parametrize("op", ["claims", "settles"])
async def test_a_batch_the_writer_process_could_not_send_is_written_by_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, op: str
) -> None:
    async with DirectoryStore(tmp_path) as store:
        process = await up(store)
        if op == "settles":
            assert (await store.claim("r0", SLOT, SLOT)).taken
        sent = process.batches
        # up when the write is handed to it, gone by the time its batch is sealed
        answers = iter([True, False])
        monkeypatch.setattr(process, "ready", lambda: next(answers))
        if op == "claims":
            assert (await store.claim("r0", SLOT, SLOT)).taken
        else:
            assert await store.settle("r0", SLOT, Outcome.COMPLETED, 5)
        assert process.batches == sent  # nothing sent: a thread wrote it
        monkeypatch.undo()
        (fire,) = await store.history("r0")
        assert fire.outcome is (Outcome.COMPLETED if op == "settles" else None)


@pytest.mark.parametrize("where", ["working directory", "PYTHONPATH"])
async def test_the_child_runs_this_package_whatever_else_is_on_its_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    # A trio_routines in the working directory, or named by a PYTHONPATH this process did not
    # read (set after it started, as for a process run with -E or -I), another version's
    # checkout say, whose child module would write nothing: the child must run the parent's
    # own code, not that one.
    shadow = tmp_path / "cwd" / "trio_routines" / "stores" / "directory" / "writer"
    shadow.mkdir(parents=True)
    for package in shadow.parents[:4]:
        (package / "__init__.py").write_text("")
    (shadow / "child.py").write_text("import sys\nsys.exit(3)\n")
    if where == "PYTHONPATH":
        monkeypatch.setenv("PYTHONPATH", str(tmp_path / "cwd"))
    else:
        monkeypatch.chdir(tmp_path / "cwd")
    root = tmp_path / "state"
    async with DirectoryStore(root) as store:
        await up(store)
        assert (await store.claim("r0000", SLOT, SLOT)).taken
        assert store._writes.claim_writes.batches == 0  # written by the child, not a thread
    assert claim_path(root, "r0000").exists()


# -- spare claim files (spares.py) ---------------------------------------------------------


def spare_of(root: Path, routine: str) -> Path:
    return root / "schedule" / "claims" / routine / SPARE_CLAIM


async def test_the_routines_a_boot_reads_get_spares_that_their_claims_take(
    tmp_path: Path,
) -> None:
    names = [f"r{i:04}" for i in range(write_path.PROCESS_AT)]
    for name in names:  # routines that have claimed before
        (tmp_path / "schedule" / "claims" / name).mkdir(parents=True)
    async with DirectoryStore(tmp_path) as store:
        await up(store)  # reads r0000 ... r0063; the last read starts the writer process
        with trio.fail_after(30):
            while not all(spare_of(tmp_path, name).exists() for name in names):  # noqa: ASYNC110
                await trio.sleep(0.02)
        made = spare_of(tmp_path, "r0007").stat().st_ino
        assert (await store.claim("r0007", SLOT, SLOT)).taken
        claim = tmp_path / "schedule" / "claims" / "r0007" / slot_name(SLOT)
        assert claim.stat().st_ino == made
        assert store._writes._read == {}  # every name sent


async def test_a_store_whose_threads_write_makes_no_spares_and_keeps_no_names(
    tmp_path: Path,
) -> None:
    async with DirectoryStore(tmp_path, writer_process=False) as store:
        async with trio.open_nursery() as nursery:  # answered together: one call finds none
            for i in range(write_path.PROCESS_AT + 1):
                nursery.start_soon(store.latest_fire, f"r{i:04}")
        assert store._writes._read == {}
        assert (await store.claim("r0000", SLOT, SLOT)).taken
        assert not spare_of(tmp_path, "r0000").exists()


async def test_a_child_killed_while_idle_leaves_the_next_batch_to_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Its socket refuses the request (EPIPE): the child never got it, so nothing was written
    # and a thread writes it, where the send used to be retried on a socket that is always
    # writable until the reply's deadline, and the batch then failed.
    monkeypatch.setattr(writer, "REPLY_TIMEOUT", 20.0)
    async with DirectoryStore(tmp_path) as store:
        process = await up(store)
        child = child_of(process)
        child.kill()
        child.wait(30)
        with caplog.at_level(logging.WARNING, logger="trio_routines"):
            assert (await store.claim("r0", SLOT, SLOT)).taken  # a thread wrote it
        assert "writer process ended" in caplog.text
        assert not process.alive
        assert store._writes.claim_writes.batches == 1


def test_the_child_starts_without_an_event_loop_or_the_store() -> None:
    """The child is started for a herd's claims and again after a stall: it imports what it
    writes with, not Trio nor the store, so that it starts in a fraction of the time."""
    probe = (
        "import sys, trio_routines.stores.directory.writer.child\n"
        "print(sorted(m for m in ('trio', 'trio_routines.store', 'trio_routines.stores.batch',"
        " 'trio_routines.stores.groupcommit', 'trio_routines.stores.directory.store')"
        " if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"
