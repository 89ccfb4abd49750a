"""What only the state directory store does: its bytes, its fsyncs, its locks, real races."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from wakeupstate import pending

from trio_routines.claims import SPARE_CLAIM, parse_claim
from trio_routines.errors import StateFault
from trio_routines.instants import slot_name
from trio_routines.records import ClaimStatus, Outcome
from trio_routines.stores.directory import DirectoryStore
from trio_routines.wakeups import WakeupRequest

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
WORKER = Path(__file__).with_name("dirstore_worker.py")
T0_WORKER = datetime(2026, 7, 7, tzinfo=UTC)  # dirstore_worker.py's T0


async def test_claim_and_settle_bytes_match_the_original(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    await store.claim("daily", T0, T0 + timedelta(minutes=150))
    path = tmp_path / "schedule" / "claims" / "daily" / "2026-07-07T10-00-00-000Z"
    assert path.read_bytes() == b'{"firedAt":"2026-07-07T12:30:00.000Z"}'
    await store.settle("daily", T0, Outcome.COMPLETED, 4210.4)  # type: ignore[arg-type]
    assert path.read_bytes() == (
        b'{"firedAt":"2026-07-07T12:30:00.000Z","outcome":"completed","ms":4210}'
    )
    await store.settle("daily", T0, Outcome.INTERRUPTED)
    assert path.read_bytes() == b'{"firedAt":"2026-07-07T12:30:00.000Z","outcome":"interrupted"}'


async def test_output_is_the_claim_files_last_key_and_only_when_given(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    await store.claim("daily", T0, T0, replica="host-a:1")
    path = tmp_path / "schedule" / "claims" / "daily" / "2026-07-07T10-00-00-000Z"
    await store.settle("daily", T0, Outcome.COMPLETED, 12, output="Done.\n\x1b[1m")
    assert path.read_bytes() == (
        b'{"firedAt":"2026-07-07T10:00:00.000Z","outcome":"completed","ms":12,'
        b'"replica":"host-a:1","output":"Done.\\n\\u001b[1m"}'
    )
    # An older reader (the original, trio_routines before output) reads the same record: a
    # JSON object whose keys it knows, and one it passes over.
    record = json.loads(path.read_text())
    assert {k: record[k] for k in ("firedAt", "outcome", "ms")} == {
        "firedAt": "2026-07-07T10:00:00.000Z",
        "outcome": "completed",
        "ms": 12,
    }
    await store.settle("daily", T0, Outcome.COMPLETED, 12)  # no output: the bytes of before
    assert path.read_bytes() == (
        b'{"firedAt":"2026-07-07T10:00:00.000Z","outcome":"completed","ms":12,"replica":"host-a:1"}'
    )


@pytest.mark.parametrize(
    ("stored", "read"),
    [
        ('"output":42', None),  # not text: passed over
        ('"output":["x"]', None),
        ('"output":""', None),
        ('"output":"a\\u0000b\\udcff"', "a\ufffdb\ufffd"),  # what no store can hold
        ('"output":"' + "x" * 70_000 + '"', "x" * 65_536),  # hand-edited past the bound
    ],
)
async def test_a_hand_edited_output_reads_bounded_and_never_fails(
    tmp_path: Path, stored: str, read: str | None
) -> None:
    directory = tmp_path / "schedule" / "claims" / "daily"
    directory.mkdir(parents=True)
    (directory / "2026-07-07T10-00-00-000Z").write_text(
        '{"firedAt":"2026-07-07T10:00:00.000Z","outcome":"completed",' + stored + "}"
    )
    store = DirectoryStore(tmp_path)
    (fire,) = await store.history("daily")
    assert (fire.outcome, fire.output) == (Outcome.COMPLETED, read)


async def test_the_original_state_reads_back(tmp_path: Path) -> None:
    directory = tmp_path / "schedule" / "claims" / "每日简报"
    directory.mkdir(parents=True)
    (directory / "2026-07-07T09-00-00-000Z").write_text(
        '{"firedAt":"2026-07-07T09:00:01.000Z","outcome":"completed","ms":12}'
    )
    (directory / "2026-07-07T10-00-00-000Z").write_text("")  # crashed between create and stamp
    (tmp_path / "schedule" / "wakeups.json").write_text(
        '[{"id":"5f0c","session":"chat","prompt":"p","fireAt":"2026-07-07T11:00:00.000Z"}]'
    )
    store = DirectoryStore(tmp_path)
    fires = await store.history("每日简报")
    assert [(f.outcome, f.ms) for f in fires] == [(Outcome.COMPLETED, 12), (None, None)]
    assert [w.id for w in await store.list_wakeups()] == ["5f0c"]


async def test_a_taken_claim_is_fsynced_with_its_directory_without_syncfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    claim_dir = tmp_path / "schedule" / "claims" / "daily"
    claim = claim_dir / slot_name(T0)
    synced: list[tuple[int, bool]] = []  # each fsync's inode, and whether the claim was named
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append((os.fstat(fd).st_ino, claim.exists()))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    store = DirectoryStore(tmp_path, syncfs=None)
    await store.claim("daily", T0, T0)
    # every directory created on the way, the claim file (named first: the slot is decided
    # before anything is flushed), then the directory that names it
    assert (os.stat(claim).st_ino, True) in synced
    assert synced[-1] == (os.stat(claim_dir).st_ino, True)
    assert (os.stat(claim_dir.parent).st_ino, False) in synced  # the new daily/ entry


async def test_a_taken_claim_is_reported_only_after_a_syncfs_of_its_file_system(
    tmp_path: Path,
) -> None:
    flushed: list[tuple[str, list[str]]] = []

    def syncfs(fd: int) -> None:
        where = os.readlink(f"/proc/self/fd/{fd}")
        flushed.append((where, sorted(os.listdir(where))))

    store = DirectoryStore(tmp_path, syncfs=syncfs)
    assert (await store.claim("daily", T0, T0)).taken
    # one flush, after the claim was written, through a descriptor of its directory
    assert flushed == [(str(store.claim_dir("daily")), [slot_name(T0)])]
    await store.settle("daily", T0, Outcome.COMPLETED, 3)
    assert len(flushed) == 2  # the settle is made durable the same way
    assert store.flushes == 2


async def test_settle_never_recreates_a_pruned_claim(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    await store.claim("daily", T0, T0)
    (store.claim_dir("daily") / slot_name(T0)).unlink()
    await store.settle("daily", T0, Outcome.COMPLETED, 5)
    assert list(store.claim_dir("daily").iterdir()) == []


async def test_foreign_files_are_neither_counted_nor_pruned(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path, keep=2)
    directory = store.claim_dir("daily")
    directory.mkdir(parents=True)
    (directory / ".DS_Store").write_text("x")
    (directory / (slot_name(T0 + timedelta(hours=9)) + ".tmp")).write_text("{}")
    for hour in range(4):
        assert (await store.claim("daily", T0 + timedelta(hours=hour), T0)).taken
    names = sorted(p.name for p in directory.iterdir())
    assert names == [
        ".DS_Store",
        slot_name(T0 + timedelta(hours=2)),
        slot_name(T0 + timedelta(hours=3)),
        slot_name(T0 + timedelta(hours=9)) + ".tmp",
    ]


async def test_a_file_where_the_claims_directory_should_be(tmp_path: Path) -> None:
    (tmp_path / "schedule" / "claims").mkdir(parents=True)
    (tmp_path / "schedule" / "claims" / "daily").write_text("oops")
    store = DirectoryStore(tmp_path)
    with pytest.raises(StateFault, match="ENOTDIR"):
        await store.claim("daily", T0, T0)
    with pytest.raises(StateFault, match="ENOTDIR"):
        await store.latest_fire("daily")
    assert (tmp_path / "schedule" / "claims" / "daily").read_text() == "oops"


async def test_a_claim_that_is_no_file_is_reported_and_read_as_unsettled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = DirectoryStore(tmp_path)
    await store.claim("daily", T0, T0)
    await store.settle("daily", T0, Outcome.COMPLETED, 3)
    squatter = store.claim_dir("daily") / slot_name(T0 + timedelta(hours=1))
    squatter.mkdir()
    history = await store.history("daily")
    assert [(f.slot, f.outcome) for f in history] == [
        (T0, Outcome.COMPLETED),
        (T0 + timedelta(hours=1), None),  # the name holds the slot; there is no content
    ]
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"{squatter} is a directory, not a regular file" in warning
    assert (await store.latest_fire("daily")) == history[-1]
    await store.settle("daily", T0 + timedelta(hours=1), Outcome.INTERRUPTED)  # refused, logged
    assert squatter.is_dir()
    assert list(squatter.iterdir()) == []


@pytest.mark.parametrize(
    ("content", "warning"),
    [
        ('[{"id": ', "corrupt state file"),
        ('{"id": "x"}', "is not an array"),
        (
            '[{"id":"good","session":"s","prompt":"p","fireAt":"2026-07-07T12:00:00.000Z"},'
            '{"id":7,"session":"s","prompt":"p","fireAt":"2026-07-07T12:00:00.000Z"},'
            '{"id":"badcron","session":"s","prompt":"p","fireAt":"2026-07-07T12:00:00.000Z",'
            '"cron":"61 * * * *"}]',
            "dropping a malformed wake-up entry",
        ),
        (  # longer than any add makes: edited by hand
            '[{"id":"good","session":"s","prompt":"p","fireAt":"2026-07-07T12:00:00.000Z"},'
            '{"id":"long","session":"s","prompt":"' + "p" * 65_537 + '",'
            '"fireAt":"2026-07-07T12:00:00.000Z"}]',
            "dropping a malformed wake-up entry",
        ),
    ],
)
async def test_unusable_wakeups_are_warned_about_and_kept_aside(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str, warning: str
) -> None:
    path = tmp_path / "schedule" / "wakeups.json"
    path.parent.mkdir(parents=True)
    path.write_text(content)
    store = DirectoryStore(tmp_path)
    good = ["good"] if "good" in content else []
    assert [w.id for w in await store.list_wakeups()] == good  # taken over on first use
    assert any(warning in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert not path.exists()
    (aside,) = path.parent.glob("wakeups.json.corrupt-*")
    assert aside.read_text() == content  # the original bytes survive the take-over
    added = await store.add_wakeup(
        WakeupRequest(session="s", prompt="new", fire_at=T0 + timedelta(hours=1)), T0
    )
    assert pending(tmp_path) == [*good, added.id]
    assert [w.id for w in await DirectoryStore(tmp_path).list_wakeups()] == [*good, added.id]


async def test_temp_files_have_unpredictable_names_and_never_follow_a_link(
    tmp_path: Path,
) -> None:
    store = DirectoryStore(tmp_path)
    victim = tmp_path / "victim"
    victim.write_text("precious")
    before = victim.stat().st_mtime_ns
    schedule = tmp_path / "schedule"
    schedule.mkdir()
    for name in ("wakeups.json.tmp", "wakeups.journal.tmp"):  # names a store could guess
        (schedule / name).symlink_to(victim)
    for hour in (1, 2):  # the first creates the journal: a temp file renamed into place
        await store.add_wakeup(
            WakeupRequest(session="s", prompt="p", fire_at=T0 + timedelta(hours=hour)), T0
        )
    assert victim.read_text() == "precious"
    assert victim.stat().st_mtime_ns == before
    assert not (schedule / "wakeups.journal").is_symlink()
    assert len(await store.list_wakeups()) == 2
    assert sorted(p.name for p in schedule.iterdir()) == [
        "wakeups.journal",
        "wakeups.journal.tmp",
        "wakeups.json.tmp",
        "wakeups.lock",
    ]


def race(*commands: list[str]) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), *command],
            stdin=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command in commands
    ]
    for proc in procs:  # all started: let them go at once
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.close()
    for proc in procs:
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()


@pytest.mark.slow
async def test_eight_processes_claim_two_hundred_slots_each_exactly_once(tmp_path: Path) -> None:
    turns = tmp_path / "turns"
    state = tmp_path / "state"
    race(*[["claim", str(state), "race", "200", str(turns)] for _ in range(8)])
    taken = turns.read_text().splitlines()
    assert len(taken) == len(set(taken)) == 200
    store = DirectoryStore(state)
    history = await store.history("race")
    assert len(history) == 200
    assert all(f.outcome is None for f in history)


@pytest.mark.slow
async def test_two_replicas_herds_take_each_slot_once_through_spares_both_make(
    tmp_path: Path,
) -> None:
    # Two processes, each with its writer process making spares for the same routines, claim
    # every routine's slot of three minutes at once: each slot once, its file whole and naming
    # its taker, however the spares were made and taken between them.
    turns = tmp_path / "turns"
    state = tmp_path / "state"
    for i in range(80):  # routines that have claimed before: their spares are made at boot
        (state / "schedule" / "claims" / f"r{i:03}").mkdir(parents=True)
    race(*[["herd", str(state), "80", "3", str(turns)] for _ in range(2)])
    taken = [line.split() for line in turns.read_text().splitlines()]
    assert sorted((name, slot) for name, slot, _ in taken) == sorted(
        (f"r{i:03}", (T0_WORKER + timedelta(minutes=m)).isoformat())
        for i in range(80)
        for m in range(3)
    )
    for name, slot, replica in taken:
        fire = parse_claim(
            slot_name(datetime.fromisoformat(slot)),
            (
                state / "schedule" / "claims" / name / slot_name(datetime.fromisoformat(slot))
            ).read_text(),
            name,
        )
        assert (fire.fired_at, fire.replica) == (datetime.fromisoformat(slot), replica)
    spares = [path.name for path in (state / "schedule" / "claims").glob("*/.*")]
    assert set(spares) <= {SPARE_CLAIM}  # no temp name left behind


@pytest.mark.slow
async def test_two_processes_add_and_take_wakeups_without_losing_any(tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    state = tmp_path / "state"
    race(["wake", str(state), "60", str(taken)], ["wake", str(state), "60", str(taken)])
    ids = taken.read_text().splitlines()
    assert len(ids) == len(set(ids)) == 120  # every add kept, every take unique
    assert await DirectoryStore(state).list_wakeups() == []


async def test_duplicate_via_the_filesystem_is_reported_with_the_slot(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    await store.claim("daily", T0, T0)
    result = await store.claim("daily", T0, T0)
    assert (result.status, result.newest) == (ClaimStatus.DUPLICATE, slot_name(T0))


async def test_the_index_follows_every_change_of_the_journal(tmp_path: Path) -> None:
    store, other = DirectoryStore(tmp_path), DirectoryStore(tmp_path)
    first = await store.add_wakeup(
        WakeupRequest(session="s", prompt="p", fire_at=T0 + timedelta(hours=1)), T0
    )
    assert [w.id for w in await store.list_wakeups()] == [first.id]
    second = await other.add_wakeup(  # another writer: a line appended
        WakeupRequest(session="s", prompt="p", fire_at=T0 + timedelta(hours=1)), T0
    )
    assert [w.id for w in await store.list_wakeups()] == [first.id, second.id]
    path = tmp_path / "schedule" / "wakeups.journal"
    edited = path.read_text().replace(first.id, "hand-edited-id")
    with path.open("r+") as handle:  # an edit in place: same inode, a shorter file
        handle.write(edited)
        handle.truncate()
    assert [w.id for w in await store.list_wakeups()] == ["hand-edited-id", second.id]
    assert await store.take_due_wakeup(T0) is None  # nothing due: answered without a write
    assert (await store.take_due_wakeup(T0 + timedelta(hours=2))) is not None


def test_a_new_generation_is_read_again_whatever_its_inode_and_size_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A reused inode number and the same size: two generations of the journal with the same
    # key. The header (a random id per generation) tells them apart.
    from trio_routines.stores.directory.wakeupjournal import header

    store = DirectoryStore(tmp_path)
    path = tmp_path / "schedule" / "wakeups.journal"
    path.parent.mkdir(parents=True)
    add = '{"op":"add","n":1,"wakeup":{"id":"%s","session":"s","prompt":"p",'
    add += '"fireAt":"2026-07-07T12:00:00.000Z"}}\n'
    path.write_bytes(header() + (add % "aaaa").encode())
    real_fstat = os.fstat
    inode = path.stat().st_ino

    def reused(fd: int) -> os.stat_result:
        return os.stat_result(list(real_fstat(fd)), {"st_ino": inode})

    monkeypatch.setattr(os, "fstat", reused)
    log = store._wakeups.log
    assert log.refresh()
    assert [w.id for w in log.index] == ["aaaa"]
    path.with_name("next").write_bytes(header() + (add % "bbbb").encode())
    os.replace(path.with_name("next"), path)  # same size, and (here) the same inode number
    assert log.refresh()
    assert [w.id for w in log.index] == ["bbbb"]


async def test_a_wakeup_lock_held_elsewhere_is_a_bounded_wait(tmp_path: Path) -> None:
    import fcntl

    store = DirectoryStore(tmp_path, lock_timeout=0.2)
    request = WakeupRequest(session="s", prompt="p", fire_at=T0 + timedelta(hours=1))
    await store.add_wakeup(request, T0)
    with (tmp_path / "schedule" / "wakeups.lock").open("w") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX)  # a process that hangs while holding it
        with pytest.raises(StateFault, match="stayed locked"):
            await store.add_wakeup(request, T0)
    await store.add_wakeup(request, T0)  # released: works again
    assert len(await store.list_wakeups()) == 2


@pytest.mark.slow
def test_a_boot_reconcile_racing_a_real_settle_never_leaves_interrupted(tmp_path: Path) -> None:
    # Another scheduler boots while this one settles: whichever order the two writes land in,
    # the real outcome must survive (the reconcile writes only an unsettled claim).
    import threading

    store = DirectoryStore(tmp_path)
    slots = [T0 + timedelta(minutes=i) for i in range(600)]
    for slot in slots:
        assert store.claim_sync("daily", slot, slot).taken
    start = threading.Barrier(2)

    def settle_all(outcome: Outcome, if_unsettled: bool) -> None:
        start.wait()
        for slot in slots:
            store.settle_sync("daily", slot, outcome, 5, if_unsettled)

    workers = [
        threading.Thread(target=settle_all, args=(Outcome.COMPLETED, False)),
        threading.Thread(target=settle_all, args=(Outcome.INTERRUPTED, True)),
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert {f.outcome for f in store.history_sync("daily")} == {Outcome.COMPLETED}
