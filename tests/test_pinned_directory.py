"""The state directory store's claims and options, pinned (issue 11): whole messages, defaults.

What a failing claim, flush, settle or prune reports is compared whole: an operator greps for
the errno name and needs the full path of the file that failed. The readiness probe and the
flush-based (``syncfs``) blocking calls are pinned here too.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from oserrors import FailingOS, fail, lock_clock, named

from trio_routines.agent import Usage
from trio_routines.claims import KEEP_CLAIMS
from trio_routines.errors import InvalidOption, StateFault
from trio_routines.instants import format_iso, slot_name
from trio_routines.records import ClaimStatus, Outcome
from trio_routines.stores import safefile
from trio_routines.stores.directory import DirectoryStore, claimfiles
from trio_routines.stores.directory import ready as dirready
from trio_routines.testing import MemoryStore
from trio_routines.wakeups import WakeupRequest

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)
T1 = T0 + timedelta(hours=1)
EIO = "EIO: Input/output error"


def flush_ok(fd: int) -> None:
    """A flush that always succeeds (what a flush makes durable is not looked at here)."""


def flush_failing(fd: int) -> None:
    raise OSError(errno.EIO, os.strerror(errno.EIO))


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def claims(root: Path, routine: str = "daily") -> Path:
    return root / "schedule" / "claims" / routine


def test_repr_names_the_root(tmp_path: Path) -> None:
    assert repr(DirectoryStore(tmp_path / "x")) == f"DirectoryStore({str(tmp_path / 'x')!r})"


# -- ready: the probe ---------------------------------------------------------------------------


async def test_ready_accepts_a_state_directory_its_first_claim_will_create(tmp_path: Path) -> None:
    await DirectoryStore(tmp_path / "state").ready()
    assert os.listdir(tmp_path) == []  # a probe creates nothing


async def test_ready_refuses_a_root_nothing_can_create(tmp_path: Path) -> None:
    root = tmp_path / "a" / "b" / "state"
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(root).ready()
    assert str(raised.value) == f"the state directory {root} cannot be created"


async def test_ready_refuses_a_regular_file_where_a_directory_is(tmp_path: Path) -> None:
    (tmp_path / "schedule").mkdir()
    (tmp_path / "schedule" / "claims").write_text("")
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).ready()
    where = tmp_path / "schedule" / "claims"
    assert str(raised.value) == f"the state directory {where} is not a writable directory"


async def test_ready_names_what_cannot_be_looked_at(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    root = tmp_path / "file"
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(root).ready()
    where = root / "schedule" / "claims"
    assert str(raised.value) == (
        f"the state directory {where} is unusable: ENOTDIR: Not a directory: {where}"
    )


async def test_ready_refuses_a_directory_it_may_not_write_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[tuple[str, int]] = []

    def access(path: str, mode: int) -> bool:  # a read-only directory (we run as root)
        asked.append((str(path), mode))
        return not mode & os.W_OK

    proxy = FailingOS()
    proxy.access = access  # type: ignore[method-assign]
    monkeypatch.setattr(dirready, "os", proxy)
    with pytest.raises(StateFault) as raised:
        await DirectoryStore(tmp_path).ready()
    assert str(raised.value) == f"the state directory {tmp_path} is not a writable directory"
    assert asked == [(str(tmp_path), os.W_OK | os.X_OK)]


async def test_ready_waits_for_the_stores_limiter(tmp_path: Path) -> None:
    limiter = trio.CapacityLimiter(1)
    store = DirectoryStore(tmp_path, limiter=limiter)
    done = trio.Event()

    async def probe() -> None:
        await store.ready()
        done.set()

    async with trio.open_nursery() as nursery:
        async with limiter:
            nursery.start_soon(probe)
            await trio.testing.wait_all_tasks_blocked()
            assert limiter.statistics().tasks_waiting == 1
        await done.wait()


async def test_ready_gives_up_a_hung_probe_when_cancelled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path)
    entered, release = threading.Event(), threading.Event()

    def hung() -> None:  # a file system that does not answer
        entered.set()
        release.wait(30)

    monkeypatch.setattr(store, "_ready", hung)
    returned = trio.Event()

    async def probe(scope: trio.CancelScope) -> None:
        with scope:
            await store.ready()
        returned.set()

    scope = trio.CancelScope()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(probe, scope)
            while not entered.is_set():  # noqa: ASYNC110 -- set by a worker thread
                await trio.sleep(0.001)
            scope.cancel()
            await trio.testing.wait_all_tasks_blocked()
            assert returned.is_set()  # back while the probe's thread still hangs
    finally:
        release.set()


# -- the blocking calls with a flush (syncfs) ---------------------------------------------------


def test_a_blocking_claim_prunes_the_previous_newest_after_its_flush(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path, keep=1, syncfs=flush_ok)
    assert store.claim_sync("daily", T0, T0).taken
    assert store.claim_sync("daily", T1, T1).taken
    assert os.listdir(claims(tmp_path)) == [slot_name(T1)]


def test_a_blocking_claim_whose_flush_fails_is_taken_back_and_named(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path, syncfs=flush_failing)
    with pytest.raises(StateFault) as raised:
        store.claim_sync("daily", T0, T0)
    where = claims(tmp_path)
    assert str(raised.value) == (
        f"could not make the claim {where / slot_name(T0)} durable: {EIO}: {where}"
    )
    assert os.listdir(where) == []


def test_blocking_settles_with_a_flush_pass_every_option(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path, syncfs=flush_ok)
    store.claim_sync("daily", T0, T0)
    spent = Usage(input_tokens=12, output_tokens=3)
    assert store.settle_sync("daily", T0, Outcome.COMPLETED, 4) is True
    # A plain settle writes over the outcome before it; one "if unsettled" never does.
    assert (
        store.settle_sync(
            "daily", T0, Outcome.FAILED, 5, error="boom", output="the end", usage=spent
        )
        is True
    )
    assert store.settle_sync("daily", T0, Outcome.INTERRUPTED, None, if_unsettled=True) is True
    (fire,) = store.history_sync("daily")
    assert (fire.outcome, fire.ms, fire.error) == (Outcome.FAILED, 5, "boom")
    assert (fire.output, fire.usage) == ("the end", spent)


def test_a_blocking_settle_whose_flush_fails_warns_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    DirectoryStore(tmp_path).claim_sync("daily", T0, T0)
    store = DirectoryStore(tmp_path, syncfs=flush_failing)
    assert store.settle_sync("daily", T0, Outcome.COMPLETED, 5) is False
    assert warnings(caplog) == [
        f"daily: could not record the completed outcome of slot {format_iso(T0)}: "
        f"{EIO}: {claims(tmp_path)}"
    ]


async def test_a_settle_whose_flush_fails_warns_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    DirectoryStore(tmp_path).claim_sync("daily", T0, T0)
    store = DirectoryStore(tmp_path, syncfs=flush_failing)
    assert await store.settle("daily", T0, Outcome.FAILED, 5) is False
    assert warnings(caplog) == [
        f"daily: could not record the failed outcome of slot {format_iso(T0)}: {EIO}"
    ]


# -- a claim that cannot be taken back, a prune that cannot run --------------------------------

NEVER = "that slot is now taken but will never run"


def moving_away(root: Path, then: Callable[[int], None]) -> Callable[[int], None]:
    """A flush during which someone moves the claims directory away."""

    def flush(fd: int) -> None:
        os.rename(claims(root), claims(root, "moved"))
        then(fd)

    return flush


@pytest.mark.parametrize("blocking", [True, False])
async def test_a_claim_whose_directory_is_gone_cannot_be_taken_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, blocking: bool
) -> None:
    store = DirectoryStore(tmp_path, syncfs=moving_away(tmp_path, flush_failing))

    async def claim() -> None:
        if blocking:
            store.claim_sync("daily", T0, T0)
        else:
            await store.claim("daily", T0, T0)

    with pytest.raises(StateFault):
        await claim()
    where = claims(tmp_path)
    assert warnings(caplog) == [
        f"daily: could not remove the claim {slot_name(T0)} that is not durable — {NEVER}: "
        f"ENOENT: No such file or directory: {where}"
    ]


def test_a_claim_that_cannot_be_removed_is_reported_as_burned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path, syncfs=flush_failing)
    fail(monkeypatch, claimfiles, "unlink", errno.EIO)
    with pytest.raises(StateFault):
        store.claim_sync("daily", T0, T0)
    path = claims(tmp_path) / slot_name(T0)
    assert warnings(caplog) == [
        f"daily: could not remove the unstamped claim {slot_name(T0)} — {NEVER}: {EIO}: {path}"
    ]
    assert os.listdir(claims(tmp_path)) == [slot_name(T0)]


def test_an_unstamped_claim_that_cannot_be_removed_is_reported_as_burned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path, syncfs=None)
    claims(tmp_path).mkdir(parents=True)  # the only fsync left is the claim's own
    fail(monkeypatch, claimfiles, "unlink", errno.EIO)
    fail(monkeypatch, safefile, "fsync", errno.ENOSPC)
    with pytest.raises(StateFault) as raised:
        store.claim_sync("daily", T0, T0)
    path = claims(tmp_path) / slot_name(T0)
    assert str(raised.value) == (
        f"could not stamp the claim {path}: ENOSPC: No space left on device: {path}"
    )
    assert warnings(caplog) == [
        f"daily: could not remove the unstamped claim {slot_name(T0)} — {NEVER}: {EIO}: {path}"
    ]


@pytest.mark.parametrize("blocking", [True, False])
async def test_a_prune_after_the_flush_that_cannot_open_the_directory_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, blocking: bool
) -> None:
    store = DirectoryStore(tmp_path, keep=1, syncfs=flush_ok)
    store.claim_sync("daily", T0, T0)
    store = DirectoryStore(tmp_path, keep=1, syncfs=moving_away(tmp_path, flush_ok))
    if blocking:
        assert store.claim_sync("daily", T1, T1).taken
    else:
        assert (await store.claim("daily", T1, T1)).taken
    where = claims(tmp_path)
    assert warnings(caplog) == [
        f"could not prune fired-slot claims in {where}: ENOENT: No such file or directory: {where}"
    ]
    assert sorted(os.listdir(claims(tmp_path, "moved"))) == [slot_name(T0), slot_name(T1)]


def test_a_prune_that_fails_warns_with_the_file_and_stops(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = DirectoryStore(tmp_path, keep=1, syncfs=None)
    old = [T0 - timedelta(hours=h) for h in (3, 2, 1)]
    claims(tmp_path).mkdir(parents=True)
    for slot in old:  # three claims where keep=1 allows one: as a larger keep left them
        (claims(tmp_path) / slot_name(slot)).write_text("")
    fail(monkeypatch, claimfiles, "unlink", errno.EIO, named(slot_name(old[0])))
    assert store.claim_sync("daily", T0, T0).status is ClaimStatus.TAKEN
    where = claims(tmp_path)
    assert warnings(caplog) == [
        f"could not prune fired-slot claims in {where}: {EIO}: {where / slot_name(old[0])}"
    ]
    # the first failure ends that prune (the second claim waits for the next one); the
    # previous newest goes in its own prune, after the new claim is durable
    assert sorted(os.listdir(where)) == [slot_name(s) for s in (old[0], old[1], T0)]


# -- options and their defaults -------------------------------------------------------------------


def test_the_options_a_store_was_built_with_and_their_defaults(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    assert (store.keep, store.lock_timeout) == (KEEP_CLAIMS, 10.0)
    assert store._limiter.total_tokens == 16  # worker threads of one store at once
    store = DirectoryStore(tmp_path, keep=3, lock_timeout=0.5)
    assert (store.keep, store.lock_timeout) == (3, 0.5)
    with pytest.raises(ValueError, match=r"^keep must be at least 1$"):
        DirectoryStore(tmp_path, keep=0)


FINITE = " must be a finite number of seconds, more than 0: "


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"keep": "5"}, "keep must be a whole number, at least 1: '5'"),
        ({"keep": True}, "keep must be a whole number, at least 1: True"),
        ({"lock_timeout": -1}, "lock_timeout" + FINITE + "-1"),
        ({"lock_timeout": 0}, "lock_timeout" + FINITE + "0"),
        ({"lock_timeout": "10"}, "lock_timeout" + FINITE + "'10'"),
        ({"limiter": 5}, "limiter must be a trio.CapacityLimiter: 5"),
    ],
)
def test_an_option_no_store_call_could_use_is_refused_as_the_store_is_made(
    tmp_path: Path, options: dict[str, Any], said: str
) -> None:
    with pytest.raises(InvalidOption) as refused:
        DirectoryStore(tmp_path, **options)
    assert str(refused.value) == said
    with pytest.raises(InvalidOption, match=r"^keep must be at least 1$"):
        MemoryStore(keep=0)
    with pytest.raises(InvalidOption, match=r"^keep must be a whole number"):
        MemoryStore(keep=2.5)  # type: ignore[arg-type]


async def test_a_wake_up_writer_waits_ten_seconds_for_the_lock_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = tmp_path / "schedule" / "wakeups.lock"
    lock.parent.mkdir()
    holder = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(holder, fcntl.LOCK_EX)
    slept = lock_clock(monkeypatch, [100.0, 109.99, 110.0])  # lock_within's clock, 10 s on
    request = WakeupRequest(session="s", prompt="p", fire_at=T1)
    try:
        with pytest.raises(StateFault) as raised:
            await DirectoryStore(tmp_path).add_wakeup(request, T0)
    finally:
        os.close(holder)
    assert str(raised.value) == (
        f"the wake-up store {lock} stayed locked for 10s — another process holds it"
    )
    assert slept == [0.005]


async def test_reads_and_settles_create_nothing(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path)
    assert await store.history("daily") == []
    assert await store.latest_fire("daily") is None
    assert await store.settle("daily", T0, Outcome.COMPLETED, 1) is True
    assert await store.list_wakeups() == []
    assert await store.paused() == frozenset()
    assert await store.resumed_at("daily") is None
    await store.set_paused("daily", False)
    assert os.listdir(tmp_path) == []
