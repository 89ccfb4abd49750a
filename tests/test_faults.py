"""Fault injection: every read and write of the state directory store, failing five ways.

Each test makes exactly one operation on exactly one path fail with ``EACCES``, ``EISDIR``,
``ENOTDIR``, ``ENOSPC`` or ``EIO`` (an ``OSError`` carrying that errno and the path, as the
kernel would report it), checks the documented outcome (reference §4.4, the store contract in
``trio_routines/store.py``), then removes the fault and checks that the store recovers:

* before the claim exists (claims directory, listing, the exclusive create, the stamp and its
  fsyncs): :class:`StateFault`, no claim left behind, the same slot is claimable afterwards;
* settling: a WARNING, no exception, the claim stays unsettled with its stamp, and a later
  settle (or the next boot) records an outcome;
* pruning: a WARNING, and the new claim stands;
* reading the newest claim: StateFault, and ``Scheduler.run`` refuses to boot;
* the wake-up store (lock, load, save): StateFault and nothing pending is lost.

The faults are injected below the store: the store module's ``os`` and ``fcntl`` are replaced
by proxies that fail for the targeted path only (file descriptors are traced back to the path
they were opened for), and ``Path.open``/``Path.unlink``/``Path.mkdir`` are wrapped the same way.
"""

from __future__ import annotations

import errno
import fcntl as real_fcntl
import json
import logging
import os as real_os
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_routines.claims import claim_names
from trio_routines.errors import StateFault
from trio_routines.instants import format_iso, slot_name
from trio_routines.records import ClaimStatus, Outcome
from trio_routines.routines import Routine
from trio_routines.scheduler import Scheduler
from trio_routines.stores import durable, groupcommit, safefile
from trio_routines.stores.directory import (
    DirectoryStore,
    blocking,
    claimfiles,
    settlefiles,
    wakeupfile,
    wakeupjournal,
    wakeuplog,
)
from trio_routines.stores.directory import writes as write_path
from trio_routines.stores.durable import SYNCFS
from trio_routines.testing import ScriptedAgent
from trio_routines.wakeups import WakeupRequest

ERRNOS = [errno.EACCES, errno.EISDIR, errno.ENOTDIR, errno.ENOSPC, errno.EIO]
ERRNO_IDS = [errno.errorcode[code] for code in ERRNOS]

ROUTINE = "daily"
OLD = datetime(2026, 7, 6, 9, tzinfo=UTC)
SLOT = datetime(2026, 7, 7, 9, tzinfo=UTC)
NOW = datetime(2026, 7, 7, 9, 0, 1, tzinfo=UTC)


class Injector:
    """Makes one operation fail for paths matching a predicate, while armed."""

    def __init__(self) -> None:
        self.operation: str | None = None
        self.matches: Callable[[str], bool] = lambda path: False
        self.code = errno.EIO
        self.hits = 0
        self.fds: dict[int, str] = {}

    def arm(self, operation: str, matches: Callable[[str], bool], code: int) -> None:
        self.operation, self.matches, self.code, self.hits = operation, matches, code, 0

    def disarm(self) -> None:
        self.operation = None

    def check(self, operation: str, path: object) -> None:
        if operation != self.operation or path is None:
            return
        text = real_os.fsdecode(path)  # type: ignore[arg-type]
        if self.matches(text):
            self.hits += 1
            raise OSError(self.code, real_os.strerror(self.code), text)


class FaultyOS:
    """The ``os`` module as the store sees it, with the injector in front of its IO calls.

    Calls relative to a directory descriptor (``dir_fd``) are traced to the full path.
    """

    def __init__(self, injector: Injector) -> None:
        self._faults = injector

    def __getattr__(self, name: str) -> Any:
        return getattr(real_os, name)

    def _path(self, path: Any, dir_fd: int | None = None) -> str | None:
        if isinstance(path, int):
            return self._faults.fds.get(path)
        text = real_os.fsdecode(path)
        if dir_fd is not None and not text.startswith("/"):
            base = self._faults.fds.get(dir_fd)
            return None if base is None else f"{base}/{text}"
        return text

    def open(self, path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        full = self._path(path, dir_fd)
        kind = "create" if flags & real_os.O_EXCL else "open"
        self._faults.check(kind, full)
        if kind == "create":
            self._faults.check("open", full)
        fd = real_os.open(path, flags, mode, dir_fd=dir_fd)
        if full is not None:
            self._faults.fds[fd] = full
        return fd

    def close(self, fd: int) -> None:
        self._faults.fds.pop(fd, None)
        real_os.close(fd)

    def _fd(self, operation: str, fd: int) -> None:
        self._faults.check(operation, self._faults.fds.get(fd))

    def write(self, fd: int, data: bytes) -> int:
        self._fd("write", fd)
        return real_os.write(fd, data)

    def pwrite(self, fd: int, data: bytes, offset: int) -> int:
        self._fd("write", fd)
        return real_os.pwrite(fd, data, offset)

    def read(self, fd: int, size: int) -> bytes:
        self._fd("read", fd)
        return real_os.read(fd, size)

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        self._fd("read", fd)
        return real_os.pread(fd, size, offset)

    def fdatasync(self, fd: int) -> None:
        self._fd("fsync", fd)
        real_os.fdatasync(fd)

    def ftruncate(self, fd: int, length: int) -> None:
        self._fd("truncate", fd)
        real_os.ftruncate(fd, length)

    def fsync(self, fd: int) -> None:
        self._fd("fsync", fd)
        real_os.fsync(fd)

    def listdir(self, path: Any) -> list[str]:
        self._faults.check("listdir", self._path(path))
        return real_os.listdir(path)

    def link(
        self,
        src: Any,
        dst: Any,
        *,
        src_dir_fd: int | None = None,
        dst_dir_fd: int | None = None,
        follow_symlinks: bool = True,
    ) -> None:
        """A file written unnamed, named: as an exclusive create of ``dst``."""
        self._faults.check("create", self._path(dst, dst_dir_fd))
        real_os.link(
            src,
            dst,
            src_dir_fd=src_dir_fd,
            dst_dir_fd=dst_dir_fd,
            follow_symlinks=follow_symlinks,
        )

    def mkdir(self, path: Any, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        self._faults.check("mkdir", self._path(path, dir_fd))
        real_os.mkdir(path, mode, dir_fd=dir_fd)

    def unlink(self, path: Any, *, dir_fd: int | None = None) -> None:
        self._faults.check("unlink", self._path(path, dir_fd))
        real_os.unlink(path, dir_fd=dir_fd)

    def replace(
        self, src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None
    ) -> None:
        self._faults.check("replace", self._path(dst, dst_dir_fd))
        real_os.replace(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    def rename(
        self, src: Any, dst: Any, *, src_dir_fd: int | None = None, dst_dir_fd: int | None = None
    ) -> None:
        self._faults.check("rename", self._path(src, src_dir_fd))
        real_os.rename(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd)

    def syncfs(self, fd: int) -> None:
        """The group-commit flush (the store is built with this as its ``syncfs``)."""
        self._fd("flush", fd)
        assert SYNCFS is not None
        SYNCFS(fd)


class FaultyFcntl:
    def __init__(self, injector: Injector) -> None:
        self._faults = injector

    def __getattr__(self, name: str) -> Any:
        return getattr(real_fcntl, name)

    def flock(self, fd: int, operation: int) -> None:
        self._faults.check("flock", self._faults.fds.get(fd))
        real_fcntl.flock(fd, operation)


@pytest.fixture
def faulty_os(monkeypatch: pytest.MonkeyPatch) -> Iterator[FaultyOS]:
    injector = Injector()
    proxy = FaultyOS(injector)
    for module in (
        write_path,
        blocking,
        claimfiles,
        settlefiles,
        safefile,
        wakeupfile,
        wakeupjournal,
        wakeuplog,
        groupcommit,
        durable,
    ):
        monkeypatch.setattr(module, "os", proxy)
    monkeypatch.setattr(safefile, "fcntl", FaultyFcntl(injector))
    original = Path.mkdir  # the state root itself is made through pathlib

    def mkdir(self: Path, *args: Any, **kw: Any) -> None:
        injector.check("mkdir", str(self))
        original(self, *args, **kw)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    yield proxy
    injector.disarm()


@pytest.fixture
def faults(faulty_os: FaultyOS) -> Injector:
    return faulty_os._faults


# The two ways a claim becomes durable: one group-commit syncfs, or per-file fsyncs.
MODES = ["syncfs", "fsync"]


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    if request.param == "syncfs" and SYNCFS is None:
        pytest.skip("this platform has no syncfs")
    return str(request.param)


def make_store(root: Path, proxy: FaultyOS, mode: str, **kw: Any) -> DirectoryStore:
    return DirectoryStore(root, syncfs=proxy.syncfs if mode == "syncfs" else None, **kw)


@pytest.fixture
def store(tmp_path: Path, faulty_os: FaultyOS, mode: str) -> DirectoryStore:
    built = make_store(tmp_path / "state", faulty_os, mode)
    assert built.claim_sync(ROUTINE, OLD, OLD).taken
    built.settle_sync(ROUTINE, OLD, Outcome.COMPLETED, 5)
    return built


def claims_dir(store: DirectoryStore) -> Path:
    return store.root / "schedule" / "claims" / ROUTINE


def is_claim(store: DirectoryStore, slot: datetime) -> Callable[[str], bool]:
    """The claim of ``slot``, or the unnamed file it is written in before it is named."""
    targets = {str(claims_dir(store) / slot_name(slot)), f"{claims_dir(store)}/."}
    return lambda path: path in targets


def is_claims_dir(store: DirectoryStore) -> Callable[[str], bool]:
    target = str(claims_dir(store))
    return lambda path: path == target


def on_disk(store: DirectoryStore) -> list[str]:
    return sorted(real_os.listdir(claims_dir(store)))


# --- before the claim exists: StateFault, and the slot is not burned ------------------------

BEFORE_CLAIM = {
    # place: (operation, which path, the durability mode it exists in, or None for both)
    "claims-dir-create": ("mkdir", "fresh claims dir", None),
    "claims-list": ("listdir", "claims dir", None),
    "claim-create": ("create", "claim", None),
    "stamp-write": ("write", "claim", None),
    "stamp-fsync": ("fsync", "claim", "fsync"),
    "stamp-dir-fsync": ("fsync", "claims dir", "fsync"),
    "flush": ("flush", "claims dir", "syncfs"),
}


def pairs(places: dict[str, tuple[Any, ...]]) -> list[tuple[str, str]]:
    """(mode, place) for every place that exists in that mode (the last item of its row)."""
    return [(m, place) for place, row in places.items() for m in MODES if row[-1] in (None, m)]


@pytest.mark.parametrize("code", ERRNOS, ids=ERRNO_IDS)
@pytest.mark.parametrize(("mode", "place"), pairs(BEFORE_CLAIM), indirect=["mode"])
def test_a_fault_before_the_claim_raises_and_never_burns_the_slot(
    store: DirectoryStore, faults: Injector, mode: str, place: str, code: int
) -> None:
    operation, which, _ = BEFORE_CLAIM[place]
    routine = ROUTINE
    if which == "fresh claims dir":
        routine = "fresh"
        target = str(store.root / "schedule" / "claims" / routine)
        faults.arm(operation, lambda path: path == target, code)
    elif which == "claims dir":
        faults.arm(operation, is_claims_dir(store), code)
    else:
        faults.arm(operation, is_claim(store, SLOT), code)
    before = on_disk(store)

    with pytest.raises(StateFault) as raised:
        store.claim_sync(routine, SLOT, NOW)
    assert faults.hits >= 1
    assert errno.errorcode[code] in str(raised.value)  # the operator sees which errno
    assert "\n" not in str(raised.value)
    faults.disarm()
    assert on_disk(store) == before  # nothing left behind, not even an empty claim file
    assert store.latest_fire_sync(ROUTINE).slot == OLD  # type: ignore[union-attr]
    assert store.claim_sync(routine, SLOT, NOW).status is ClaimStatus.TAKEN
    fire = store.latest_fire_sync(routine)
    assert fire is not None
    assert (fire.slot, fire.fired_at, fire.outcome) == (SLOT, NOW, None)


# --- settling: a warning, never an exception; the claim stays unsettled ----------------------

SETTLE = {
    "settle-open": ("open", None),
    "settle-read": ("read", None),
    "settle-truncate": ("truncate", None),
    "settle-write": ("write", None),
    "settle-fsync": ("fsync", "fsync"),
    "settle-flush": ("flush", "syncfs"),
}


@pytest.mark.parametrize("code", ERRNOS, ids=ERRNO_IDS)
@pytest.mark.parametrize(("mode", "place"), pairs(SETTLE), indirect=["mode"])
def test_a_settle_fault_warns_and_leaves_the_claim_unsettled_with_its_stamp(
    store: DirectoryStore,
    faults: Injector,
    caplog: pytest.LogCaptureFixture,
    mode: str,
    place: str,
    code: int,
) -> None:
    operation, _ = SETTLE[place]
    assert store.claim_sync(ROUTINE, SLOT, NOW).taken
    matches = is_claims_dir(store) if operation == "flush" else is_claim(store, SLOT)
    faults.arm(operation, matches, code)
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        # never raises, and says it did not write, so that the runtime may retry
        assert store.settle_sync(ROUTINE, SLOT, Outcome.COMPLETED, 42) is False
    assert faults.hits == 1
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert errno.errorcode[code] in warnings[0].getMessage()
    assert format_iso(SLOT) in warnings[0].getMessage()

    faults.disarm()
    fire = store.latest_fire_sync(ROUTINE)
    assert fire is not None
    # The stamp survived the failed write (the boot's catch-up reads it). A failed fsync may
    # (or truncate) may still leave the outcome readable but not durable: both are allowed.
    assert (fire.slot, fire.fired_at) == (SLOT, NOW)
    written = place in ("settle-truncate", "settle-fsync", "settle-flush")
    assert fire.outcome is None or (written and fire.outcome is Outcome.COMPLETED)
    store.settle_sync(ROUTINE, SLOT, Outcome.FAILED, 7)
    fire = store.latest_fire_sync(ROUTINE)
    assert fire is not None
    assert (fire.fired_at, fire.outcome, fire.ms) == (NOW, Outcome.FAILED, 7)


@pytest.mark.parametrize("code", ERRNOS, ids=ERRNO_IDS)
async def test_a_settle_fault_in_a_fire_leaves_an_interrupted_claim_for_the_next_boot(
    store: DirectoryStore, faults: Injector, code: int
) -> None:
    routine = Routine(name=ROUTINE, prompt="p", cron="0 9 * * *")
    agent = ScriptedAgent()
    # A failed settle is retried for up to the grace (real time here: real file IO); keep it
    # short, the retries' own schedule is pinned in test_store_bounds.
    scheduler = Scheduler(
        agent=agent, store=store, routines=[routine], wakeups=False, default_grace=0.5
    )
    faults.arm("write", is_claim(store, SLOT), code)
    # The claim's stamp is a write too: let the claim through, fail only the settle's write.
    original = faults.check
    seen = {"writes": 0}

    def second_write_only(operation: str, path: object) -> None:
        if operation == "write" and path is not None and faults.matches(real_os.fsdecode(path)):  # type: ignore[arg-type]
            seen["writes"] += 1
            if seen["writes"] == 1:
                return
        original(operation, path)

    faults.check = second_write_only  # type: ignore[method-assign]
    result = await scheduler.fire(ROUTINE, SLOT)
    assert result.claimed
    assert result.outcome is Outcome.COMPLETED  # the caller still hears how the turn went
    faults.disarm()
    assert (await store.latest_fire(ROUTINE)).outcome is None  # type: ignore[union-attr]

    booted = Scheduler(
        agent=agent,
        store=store,
        routines=[routine],
        wakeups=False,
        now=lambda: SLOT + timedelta(minutes=5),
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(booted.run)
        booted.stop(0)
    fire = await store.latest_fire(ROUTINE)
    assert fire is not None
    assert (fire.slot, fire.outcome) == (SLOT, Outcome.INTERRUPTED)
    assert len(agent.turns) == 1  # never replayed


# --- pruning: a warning, and the new claim stands -------------------------------------------


@pytest.mark.parametrize("code", ERRNOS, ids=ERRNO_IDS)
def test_a_prune_fault_warns_and_the_claim_stands(
    tmp_path: Path, faults: Injector, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    store = DirectoryStore(tmp_path / "state", keep=2)
    slots = [OLD - timedelta(days=2), OLD - timedelta(days=1), OLD]
    for slot in slots[:2]:
        assert store.claim_sync(ROUTINE, slot, slot).taken
    faults.arm("unlink", is_claim(store, slots[0]), code)
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert store.claim_sync(ROUTINE, slots[2], slots[2]).taken
    assert faults.hits == 1
    (warning,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "could not prune" in warning.getMessage()
    assert errno.errorcode[code] in warning.getMessage()
    kept = claim_names(real_os.listdir(tmp_path / "state" / "schedule" / "claims" / ROUTINE))
    assert kept == [slot_name(slot) for slot in slots]  # one too many, for now
    assert [f.slot for f in store.history_sync(ROUTINE)] == slots[1:]  # the newest it keeps

    faults.disarm()
    assert store.claim_sync(ROUTINE, SLOT, SLOT).taken  # the next claim prunes again
    assert [f.slot for f in store.history_sync(ROUTINE)] == [OLD, SLOT]


# --- reading the newest claim: StateFault, and the boot refuses to run blind -----------------

READS = {
    "newest-list": ("listdir", "claims dir"),
    "newest-read": ("read", "claim"),
}


@pytest.mark.parametrize("code", ERRNOS, ids=ERRNO_IDS)
@pytest.mark.parametrize("place", list(READS))
async def test_a_fault_reading_claims_fails_the_boot_loudly_then_recovers(
    store: DirectoryStore, faults: Injector, place: str, code: int
) -> None:
    operation, which = READS[place]
    matches = is_claims_dir(store) if which == "claims dir" else is_claim(store, OLD)
    routine = Routine(name=ROUTINE, prompt="p", cron="0 9 * * *")
    agent = ScriptedAgent()
    faults.arm(operation, matches, code)

    with pytest.raises(StateFault, match=errno.errorcode[code]):
        await store.latest_fire(ROUTINE)
    with pytest.raises(StateFault, match=errno.errorcode[code]):
        await store.history(ROUTINE)
    scheduler = Scheduler(
        agent=agent, store=store, routines=[routine], wakeups=False, now=lambda: NOW
    )
    with pytest.raises(StateFault, match=errno.errorcode[code]):
        await scheduler.run()  # the boot fails before anything is started
    assert agent.turns == []

    faults.disarm()
    # Booted now, the routine catches up the slot it missed (OLD's successor, SLOT), once.
    scheduler = Scheduler(
        agent=agent, store=store, routines=[routine], wakeups=False, now=lambda: NOW
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        with trio.fail_after(10):
            while scheduler.statistics().outcomes.get("completed") != 1:  # noqa: ASYNC110
                await trio.sleep(0.01)
        scheduler.stop(0)
    assert [t.session for t in agent.turns] == ["routine:daily"]
    assert (await store.latest_fire(ROUTINE)).slot == SLOT  # type: ignore[union-attr]


# --- wake-ups: lock, journal, take-over ---------------------------------------------------

WAKEUPS = {
    "lock-open": ("open", "wakeups.lock"),
    "lock-flock": ("flock", "wakeups.lock"),
    "journal-open": ("open", "wakeups.journal"),
    "load": ("read", "wakeups.journal"),
    "append": ("write", "wakeups.journal"),
}
# Taking over an earlier version's wakeups.json: read it, write the first generation of the
# journal (a temp file named "wakeups.journal.tmp-" and 16 random hex digits, renamed over
# wakeups.journal), then move wakeups.json aside.
TAKE_OVER = {
    "legacy-read": ("read", "wakeups.json"),
    "create-temp": ("open", "wakeups.journal.tmp-"),
    "write-temp": ("write", "wakeups.journal.tmp-"),
    "fsync-temp": ("fsync", "wakeups.journal.tmp-"),
    "rename-temp": ("replace", "wakeups.journal"),
    "move-aside": ("rename", "wakeups.json"),
}


def _entries() -> list[dict[str, Any]]:
    return [
        {"id": "due-one", "session": "s", "prompt": "p", "fireAt": format_iso(NOW)},
        {
            "id": "later-one",
            "session": "s",
            "prompt": "q",
            "fireAt": format_iso(NOW + timedelta(hours=1)),
        },
    ]


def _wakeup_store(tmp_path: Path, *, legacy: bool = False) -> DirectoryStore:
    """A store holding ``_entries()``: in its journal, or (``legacy``) in a wakeups.json."""
    store = DirectoryStore(tmp_path / "state")
    schedule = store.root / "schedule"
    schedule.mkdir(parents=True)
    if legacy:
        (schedule / "wakeups.json").write_text(json.dumps(_entries()))
        return store
    lines = [{"op": "gen", "id": "0" * 32}]
    lines += [{"op": "add", "n": n, "wakeup": w} for n, w in enumerate(_entries(), 1)]
    (schedule / "wakeups.journal").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return store


def _matching(schedule: Path, name: str) -> Callable[[str], bool]:
    target = str(schedule / name)
    if name.endswith("-"):
        return lambda path: path.startswith(target)
    return lambda path: path == target


@pytest.mark.parametrize("code", ERRNOS, ids=ERRNO_IDS)
@pytest.mark.parametrize("place", list(WAKEUPS))
async def test_a_wakeup_store_fault_raises_and_loses_nothing(
    tmp_path: Path, faults: Injector, place: str, code: int
) -> None:
    store = _wakeup_store(tmp_path)
    schedule = store.root / "schedule"
    journal = (schedule / "wakeups.journal").read_bytes()
    operation, name = WAKEUPS[place]
    faults.arm(operation, _matching(schedule, name), code)
    request = WakeupRequest(session="s", prompt="r", fire_at=NOW + timedelta(hours=2))
    calls = [
        lambda: store.take_due_wakeup(NOW),
        lambda: store.add_wakeup(request, NOW),
        lambda: store.remove_wakeup("later-one", "s"),
    ]
    if place in ("load", "journal-open"):
        calls.append(store.list_wakeups)  # reads without the lock
    for call in calls:
        with pytest.raises(StateFault) as raised:
            await call()
        assert errno.errorcode[code] in str(raised.value)
    assert faults.hits >= len(calls)
    faults.disarm()
    assert (schedule / "wakeups.journal").read_bytes() == journal  # untouched
    assert list(schedule.glob("wakeups.journal.tmp*")) == []
    taken = await store.take_due_wakeup(NOW)
    assert taken is not None
    assert taken.id == "due-one"
    assert [w.id for w in await store.list_wakeups()] == ["later-one"]


@pytest.mark.parametrize("code", ERRNOS, ids=ERRNO_IDS)
@pytest.mark.parametrize("place", list(TAKE_OVER))
async def test_a_take_over_fault_raises_and_loses_or_repeats_nothing(
    tmp_path: Path, faults: Injector, place: str, code: int
) -> None:
    store = _wakeup_store(tmp_path, legacy=True)
    schedule = store.root / "schedule"
    operation, name = TAKE_OVER[place]
    faults.arm(operation, _matching(schedule, name), code)
    for call in (lambda: store.take_due_wakeup(NOW), store.list_wakeups):
        with pytest.raises(StateFault) as raised:
            await call()
        assert errno.errorcode[code] in str(raised.value)
    assert faults.hits >= 2
    faults.disarm()
    assert json.loads((schedule / "wakeups.json").read_text()) == _entries()  # still there
    assert list(schedule.glob("wakeups.journal.tmp*")) == []
    taken = await store.take_due_wakeup(NOW)
    assert taken is not None
    assert taken.id == "due-one"
    assert not (schedule / "wakeups.json").exists()
    assert await store.take_due_wakeup(NOW) is None  # taken over once: not again
    assert [w.id for w in await DirectoryStore(store.root).list_wakeups()] == ["later-one"]


@pytest.mark.parametrize("code", ERRNOS, ids=ERRNO_IDS)
async def test_the_wake_loop_logs_a_store_fault_and_fires_the_wakeup_once_repaired(
    tmp_path: Path, faults: Injector, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    store = _wakeup_store(tmp_path)
    target = str(store.root / "schedule" / "wakeups.journal")
    faults.arm("read", lambda path: path == target, code)
    agent = ScriptedAgent()
    scheduler = Scheduler(agent=agent, store=store, now=lambda: NOW, poll_interval=0.05)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        with trio.fail_after(10):
            while not any("wake-up poll failed" in r.getMessage() for r in caplog.records):  # noqa: ASYNC110
                await trio.sleep(0.01)
        assert agent.turns == []
        faults.disarm()
        with trio.fail_after(10):
            while not agent.turns:  # noqa: ASYNC110
                await trio.sleep(0.01)
        scheduler.stop(1)
    assert [t.session for t in agent.turns] == ["s"]
    (error,) = {r.getMessage() for r in caplog.records if r.levelno == logging.ERROR}
    assert errno.errorcode[code] in error


@pytest.mark.parametrize("code", ERRNOS, ids=ERRNO_IDS)
async def test_an_fsync_fault_after_the_append_warns_and_keeps_the_change(
    tmp_path: Path, faults: Injector, caplog: pytest.LogCaptureFixture, code: int
) -> None:
    # The append had already published the change when its fsync failed: raising would tell
    # the scheduler it did not take the wake-up it had taken out of the store, which would then
    # never fire. The change stands and a warning says what is in doubt.
    store = _wakeup_store(tmp_path)
    target = str(store.root / "schedule" / "wakeups.journal")
    faults.arm("fsync", lambda path: path == target, code)
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        taken = await store.take_due_wakeup(NOW)
    assert faults.hits == 1
    assert taken is not None
    assert taken.id == "due-one"
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "could not fsync" in warning
    assert errno.errorcode[code] in warning
    faults.disarm()
    assert [w.id for w in await store.list_wakeups()] == ["later-one"]
