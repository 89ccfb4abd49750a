"""The parent's end of the writer process, pinned: how a child is started, stopped and reaped.

Real child processes, but cheap ones where the child's own work does not matter: a
``python -c`` that sleeps (never up, and deaf to its socket closing, as a child stuck in a
stalled disk's write is) stands in for the writer while the parent's side is looked at
through ``/proc``.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import trio_routines
from tests.test_pinned_writerwire import open_fds
from tests.test_writer import SLOT, child_of, misbehaving, up
from trio_routines.errors import StateFault
from trio_routines.stores.directory import DirectoryStore
from trio_routines.stores.directory import writes as write_path
from trio_routines.stores.directory.writer import process as writer
from trio_routines.stores.directory.writer.call import Call
from trio_routines.stores.directory.writer.process import WriterProcess

PACKAGE = str(Path(trio_routines.__file__).resolve().parent.parent)
SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]  # never up, never ends


def process(tmp_path: Path, argv: list[str] | None = None) -> WriterProcess:
    return WriterProcess(tmp_path, 7, 0.25, max_batch=256, argv=argv)


def proc(pid: int, name: str) -> list[str]:
    """``/proc/PID/NAME`` (environ, cmdline), waited for: it reads empty until the exec is done."""
    for _ in range(3000):
        raw = Path(f"/proc/{pid}/{name}").read_bytes()
        if raw:
            return [entry.decode() for entry in raw.split(b"\0")[:-1]]
        time.sleep(0.01)
    raise AssertionError(f"/proc/{pid}/{name} stayed empty")


def environ(pid: int) -> dict[str, str]:
    return dict(entry.split("=", 1) for entry in proc(pid, "environ"))


@pytest.mark.parametrize("inherited", [None, "/elsewhere"])
def test_a_child_is_given_this_process_module_path_and_its_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inherited: str | None
) -> None:
    if inherited is None:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    else:
        monkeypatch.setenv("PYTHONPATH", inherited)
    started = process(tmp_path, SLEEPER)
    started.start()
    try:
        pid = child_of(started).pid
        given = environ(pid)
        assert json.loads(given[writer.PATH_VARIABLE]) == writer.child_path()
        assert given["TRIO_ROUTINES_WRITER_ENCODING"] == (
            f"{sys.getfilesystemencoding()}/{sys.getfilesystemencodeerrors()}"
        )
        assert given.get("PYTHONPATH") == inherited  # left as it was: -I ignores it
        assert (Path(PACKAGE) / "trio_routines" / "__init__.py").is_file()
        *command, fd, root, keep, lock_timeout = proc(pid, "cmdline")
        assert command == SLEEPER
        assert (root, keep, lock_timeout) == (str(tmp_path), "7", "0.25")
        assert os.path.exists(f"/proc/{pid}/fd/{fd}")  # its end of the socket, passed on
        assert started.alive
        assert started.started == 1
    finally:
        started.stop("was told to stop by the test")
        started.reap(30)
    assert not started.alive


def test_the_child_runs_isolated_and_sets_its_path_before_importing() -> None:
    executable, isolated, dash_x, utf8, dash_c, bootstrap = writer.command()
    assert (executable, isolated, dash_c) == (sys.executable, "-I", "-c")
    assert (dash_x, utf8) == ("-X", f"utf8={sys.flags.utf8_mode}")  # -I drops PYTHONUTF8
    assert bootstrap.index("sys.path[:]") < bootstrap.index("import main")
    assert f"os.environ.pop({writer.PATH_VARIABLE!r})" in bootstrap
    assert not writer.PATH_VARIABLE.startswith("PYTHON")  # -I would drop it


def package_at(entry: Path) -> Path:
    (entry / "trio_routines").mkdir(parents=True)
    return entry


def test_the_child_path_is_this_process_own_when_it_finds_this_package(tmp_path: Path) -> None:
    root, other = tmp_path / "root", tmp_path / "other"
    root.mkdir()
    other.mkdir()  # no trio_routines in it
    path = ["/stdlib", str(other), str(root), "/site"]
    assert writer.child_path(path, root) == path


def test_the_child_path_leaves_relative_entries_out(tmp_path: Path) -> None:
    # "" and "lib" name the working directory as it is when the child imports: not this
    # process's, whatever it imported from there.
    root = package_at(tmp_path / "root")
    assert writer.child_path(["", "/stdlib", "lib", str(root)], root) == ["/stdlib", str(root)]


def test_the_child_path_names_this_package_last_when_it_lacks_it(tmp_path: Path) -> None:
    # Found through an import hook (an editable install): no other copy on the path, so the
    # standard library keeps its place before it.
    root = tmp_path / "root"
    assert writer.child_path(["/stdlib", "/site"], root) == ["/stdlib", "/site", str(root)]


def test_the_child_path_names_this_package_before_another_copy(tmp_path: Path) -> None:
    # Another trio_routines before this process's (a path changed since it imported): this
    # process's own comes just before it, once, and the rest keep their order.
    root, other = package_at(tmp_path / "root"), package_at(tmp_path / "other")
    path = ["/stdlib", str(other), str(root), "/site", str(root)]
    assert writer.child_path(path, root) == ["/stdlib", str(root), str(other), "/site"]
    lacking = ["/stdlib", str(other), "/site"]
    assert writer.child_path(lacking, root) == ["/stdlib", str(root), str(other), "/site"]
    after = ["/stdlib", str(root), str(other)]  # the other copy after it: nothing moves
    assert writer.child_path(after, root) == after


def test_the_child_path_knows_this_package_through_a_link(tmp_path: Path) -> None:
    root = package_at(tmp_path / "root")
    (tmp_path / "link").symlink_to(root)
    path = ["/stdlib", str(tmp_path / "link"), "/site"]
    assert writer.child_path(path, root) == ["/stdlib", str(root), "/site"]
    other = package_at(tmp_path / "other")
    shadowed = [str(other), str(tmp_path / "link")]
    assert writer.child_path(shadowed, root) == [str(root), str(other)]


def test_the_child_path_passes_over_what_is_no_string(tmp_path: Path) -> None:
    # A host may put a Path on sys.path; imports pass over it, and so does the child's path
    # (JSON could not carry it: the store's read that starts the child raised TypeError).
    root = package_at(tmp_path / "root")
    path: list[Any] = ["/stdlib", Path("/plugins"), b"/bytes", str(root)]
    assert writer.child_path(path, root) == ["/stdlib", str(root)]


def test_a_child_that_cannot_be_started_leaves_no_socket_open(tmp_path: Path) -> None:
    before = open_fds()
    failed = process(tmp_path, [str(tmp_path / "no-such-program")])
    with pytest.raises(FileNotFoundError):
        failed.start()
    assert not open_fds() - before  # no descriptor left open
    assert not failed.alive
    assert failed.started == 0


def test_a_child_not_yet_up_is_not_ready_and_one_that_ends_is_stopped(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    quiet = process(tmp_path, SLEEPER)  # never says it is up
    quiet.start()
    assert not quiet.ready()
    assert quiet.alive
    quiet.stop("was told to stop by the test")
    assert not quiet.ready()  # stopped: not ready, and no read of a closed socket
    quiet.reap(30)
    ends = process(tmp_path, [sys.executable, "-c", "pass"])
    ends.start()
    child = child_of(ends)
    child.wait(30)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        assert not ends.ready()
    assert caplog.messages == [
        "the state directory's writer process ended before it was up; a new one starts"
    ]
    assert not ends.alive
    assert not ends.ready()  # asked again: still not, and not told twice
    assert len(caplog.messages) == 1
    ends.reap(30)


async def test_a_child_that_says_it_is_up_stays_ready(tmp_path: Path) -> None:
    real = process(tmp_path)
    real.start()
    try:
        sock = real._sock
        assert sock is not None
        with trio.fail_after(30):
            await trio.lowlevel.wait_readable(sock)  # READY is waiting, not yet read
        child = child_of(real)
        assert real.ready()  # the first look finds it
        assert real.ready()  # remembered: READY is read once, never again
        assert child.poll() is None
    finally:
        real.stop()  # no reason: an idle child exits by itself once its socket closes
    assert child.wait(30) == 0


def test_stop_without_a_reason_lets_the_child_end_itself_and_with_one_kills_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    stubborn = process(tmp_path, SLEEPER)
    stubborn.start()
    child = child_of(stubborn)
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        stubborn.stop()
    assert caplog.messages == []
    assert child.poll() is None  # asked to go (its socket closed), not killed
    stubborn.start()  # a new child; the old one is still being waited for
    second = child_of(stubborn)
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        stubborn.stop("did not answer in time")
    assert caplog.messages == [
        "the state directory's writer process did not answer in time; a new one starts"
    ]
    assert second.wait(30) == -signal.SIGKILL
    assert child.poll() is None
    stubborn.reap(0.2)  # the first is still there after the timeout: killed
    assert child.wait(30) == -signal.SIGKILL


def test_a_new_start_forgets_children_that_have_ended(tmp_path: Path) -> None:
    ending = process(tmp_path, [sys.executable, "-c", "pass"])
    ending.start()
    first = child_of(ending)
    ending.stop()
    first.wait(30)
    ending.start()  # the first has ended: not kept to be reaped
    assert ending._ended == []
    ending.stop("was told to stop by the test")
    assert len(ending._ended) == 1
    ending.reap(30)
    assert ending._ended == []


def test_stdin_is_never_the_callers(tmp_path: Path) -> None:
    saved = os.dup(0)
    read, write = os.pipe()
    os.dup2(read, 0)  # this process's stdin is a pipe now: the child must not get it
    try:
        started = process(tmp_path, SLEEPER)
        started.start()
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read, write):
            os.close(fd)
    try:
        assert os.readlink(f"/proc/{child_of(started).pid}/fd/0") == "/dev/null"
    finally:
        started.stop("was told to stop by the test")
        started.reap(30)


def test_a_reply_that_does_not_match_its_batch_is_refused(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    decoder = process(tmp_path)

    def reply(values: list[object], records: list[object]) -> bytes:
        return pickle.dumps((values, {}, records))

    with pytest.raises(ValueError, match=r"^1 answers, not 2$"):
        decoder._decode(reply([True], []), 2)
    with caplog.at_level(logging.DEBUG, logger="trio_routines"):
        values, errors = decoder._decode(reply([True], [(logging.WARNING, "100% of %s")]), 1)
    assert (values, errors) == ([True], {})
    assert caplog.messages == ["100% of %s"]  # the child's text, logged as it is
    assert caplog.records[0].levelno == logging.WARNING


def hold_after(monkeypatch: pytest.MonkeyPatch, then: Callable[[int], None]) -> None:
    """Let each reply be read, then do ``then(n)`` (n counting the replies from 1)."""
    receive = writer._receive  # type: ignore[attr-defined]  # the name tests hold replies by
    count = 0

    async def held(sock: socket.socket) -> bytes:
        nonlocal count
        count += 1
        got = await receive(sock)
        then(count)
        return got

    monkeypatch.setattr(writer, "_receive", held)


async def claims_of(store: DirectoryStore, names: list[str]) -> dict[str, object]:
    """Each claim's result, or the error it raised, all submitted at once."""
    results: dict[str, object] = {}

    async def claim(name: str) -> None:
        try:
            results[name] = await store.claim(name, SLOT, SLOT)
        except StateFault as exc:
            results[name] = exc

    async with trio.open_nursery() as nursery:
        for name in names:
            nursery.start_soon(claim, name)
    return results


FAULT = (
    "the state directory's writer process {why} while writing {n} claims: not recorded (a claim"
    " it made stays taken, unrun, and is recorded interrupted at the next boot)"
)


async def test_a_reply_that_fails_fails_every_batch_behind_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with DirectoryStore(tmp_path) as store:
        writer_process = await up(store)
        monkeypatch.setattr(writer_process, "max_batch", 2)  # batches of 2, 2 and 1 in flight

        def second_fails(count: int) -> None:
            if count == 2:
                raise EOFError("the writer process closed its socket")

        hold_after(monkeypatch, second_fails)
        results = await claims_of(store, ["a", "b", "c", "d", "e"])
    faults = [str(result) for result in results.values() if isinstance(result, StateFault)]
    why = "ended (the writer process closed its socket)"
    assert faults == [FAULT.format(why=why, n=2)] * 3  # the last one's leader was waiting
    assert sum(getattr(result, "taken", False) for result in results.values()) == 2


async def test_a_batch_whose_turn_comes_after_a_stop_fails_as_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with DirectoryStore(tmp_path) as store:
        writer_process = await up(store)
        monkeypatch.setattr(writer_process, "max_batch", 2)  # batches of 2 and 1 in flight

        def stop_after_first(count: int) -> None:
            if count == 1:
                writer_process.stop()  # as the store's close does, between two replies

        hold_after(monkeypatch, stop_after_first)
        results = await claims_of(store, ["a", "b", "c"])
    faults = [str(result) for result in results.values() if isinstance(result, StateFault)]
    assert faults == [FAULT.format(why="was stopped", n=1)]
    assert sum(getattr(result, "taken", False) for result in results.values()) == 2


async def test_requests_larger_than_the_socket_takes_are_sent_as_it_drains(
    tmp_path: Path,
) -> None:
    names = [f"a-routine-with-a-long-name-{i:04}" for i in range(600)]
    async with DirectoryStore(tmp_path) as store:
        writer_process = await up(store)
        sock = writer_process._sock
        assert sock is not None
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # a batch is ~20 KiB
        results = await claims_of(store, names)
        assert writer_process.batches == 3  # 256 + 256 + 88
    assert all(getattr(result, "taken", False) for result in results.values())


async def test_closing_a_socket_a_reply_is_awaited_on_wakes_its_reader(tmp_path: Path) -> None:
    async with DirectoryStore(tmp_path, writer_process=misbehaving("hang")) as store:
        writer_process = await up(store)
        results: dict[str, object] = {}
        with trio.fail_after(writer.REPLY_TIMEOUT / 2):  # not the reply's own timeout
            async with trio.open_nursery() as nursery:

                async def claim() -> None:
                    results.update(await claims_of(store, ["a"]))

                nursery.start_soon(claim)
                await trio.testing.wait_all_tasks_blocked()
                writer_process.stop("was told to stop by the test")  # its reader hears at once
    assert str(results["a"]).startswith("the state directory's writer process ended (")


class Stuck:
    """A child that outlives even SIGKILL (in the kernel, on a stalled disk): every wait for
    it times out."""

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.killed = 0

    def wait(self, timeout: float) -> int:
        self.waits.append(timeout)
        raise subprocess.TimeoutExpired("writerchild", timeout)

    def kill(self) -> None:
        self.killed += 1

    def poll(self) -> None:
        return None


def test_reap_kills_what_outlives_its_timeout_and_keeps_what_outlives_the_kill(
    tmp_path: Path,
) -> None:
    reaper = process(tmp_path, SLEEPER)
    stuck = [Stuck(), Stuck()]
    ended = process(tmp_path, [sys.executable, "-c", "pass"])
    ended.start()
    exited = child_of(ended)
    exited.wait(30)
    reaper._ended = [stuck[0], exited, stuck[1]]  # type: ignore[list-item]
    reaper.reap(5.0)  # (the stand-ins time out at once: no test time is spent)
    assert [child.killed for child in stuck] == [1, 1]
    for child in stuck:  # each waited for twice (before and after the kill), never for ever
        assert len(child.waits) == 2
        assert all(0 < timeout <= 5.0 for timeout in child.waits)
    kept: list[object] = list(reaper._ended)
    assert kept == stuck  # kept for the next reap
    ended.stop()


class Clock:
    """``time.monotonic`` for the reaper: a wait that times out has taken its whole timeout."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now


class SlowStuck(Stuck):
    """A :class:`Stuck` child whose every wait takes its whole timeout on ``clock``; with
    ``reaper``, its first wait hands the reaper a child stopped meanwhile (as ``stop`` does from
    the event loop while a reap runs in its thread)."""

    def __init__(self, clock: Clock, reaper: WriterProcess | None = None) -> None:
        super().__init__()
        self.clock = clock
        self.reaper = reaper

    def wait(self, timeout: float) -> int:
        self.clock.now += timeout
        if self.reaper is not None:
            self.reaper._ended.append(Stuck())  # type: ignore[arg-type]
            self.reaper = None
        return super().wait(timeout)


def test_reap_waits_until_one_deadline_and_keeps_a_child_stopped_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    monkeypatch.setattr(writer, "time", clock)
    reaper = process(tmp_path, SLEEPER)
    first, second = SlowStuck(clock, reaper), SlowStuck(clock)
    reaper._ended = [first, second]  # type: ignore[list-item]
    reaper.reap(5.0)
    # One deadline per round: the first child's wait used it up, the second gets none left.
    assert first.waits == [5.0, 5.0]
    assert second.waits == [0.0, 0.0]
    # A child stopped during the reap is kept beside those that outlived the kill.
    kept: list[object] = list(reaper._ended)
    assert kept[1:] == [first, second]
    stopped = kept[0]
    assert isinstance(stopped, Stuck)
    assert (stopped.killed, stopped.waits) == (0, [])  # not this reap's: left for the next


class Owner:
    """A writer process as a :class:`~trio_routines.stores.directory.writer.call.Call` sees
    it: what it was told."""

    def __init__(self) -> None:
        self.given_up = 0

    def give_up_soon(self) -> None:
        self.given_up += 1


@pytest.mark.parametrize(
    ("in_flight", "owned", "gives_up"),
    [(False, True, 0), (True, True, 1), (True, False, 0)],
    ids=["unsent", "sent", "no-writer-process"],
)
def test_a_caller_that_leaves_gives_the_child_up_only_once_its_batch_was_sent(
    in_flight: bool, owned: bool, gives_up: int
) -> None:
    owner = Owner()
    call = Call(("r0", SLOT, SLOT), owner if owned else None)  # type: ignore[arg-type]
    call.task = object()  # type: ignore[assignment] # parked (a stand-in: never woken here)
    call.in_flight = in_flight
    assert call(None) is trio.lowlevel.Abort.SUCCEEDED
    assert call.gave_up is True  # a batch still filling leaves it out when sealed
    assert call.task is None  # nothing wakes it: it left
    assert owner.given_up == gives_up
    assert not call.done


async def claim_or_fault(
    store: DirectoryStore, name: str, got: dict[str, object], scope: trio.CancelScope | None = None
) -> None:
    """``store.claim(name)``'s result, or its fault's text, in ``got``; ``"left"`` when
    ``scope`` (its own) was cancelled."""
    with scope or trio.CancelScope() as scope:
        try:
            got[name] = await store.claim(name, SLOT, SLOT)
        except StateFault as exc:
            got[name] = str(exc)
    if scope.cancelled_caught:
        got[name] = "left"


async def test_the_oldest_batch_in_flight_says_since_when_it_waits(tmp_path: Path) -> None:
    async with DirectoryStore(tmp_path, writer_process=misbehaving("hang")) as store:
        process = await up(store)
        assert process.waiting_since() is None  # nothing in flight
        got: dict[str, object] = {}
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                before = trio.current_time()
                nursery.start_soon(claim_or_fault, store, "a", got)
                await trio.testing.wait_all_tasks_blocked()
                sent = process.waiting_since()
                assert sent is not None
                assert before <= sent <= trio.current_time()
                await trio.sleep(0.05)
                nursery.start_soon(claim_or_fault, store, "b", got)
                await trio.testing.wait_all_tasks_blocked()
                assert len(process._flight) == 2
                assert process.waiting_since() == sent  # the oldest batch's, not the newest's
                assert sent in store._writes.under_way()  # what the store's readiness reads
                nursery.cancel_scope.cancel()
        assert process.waiting_since() is None  # given up: nothing in flight any more


@pytest.mark.parametrize("who", ["leader", "joined"])
async def test_a_caller_of_a_later_batch_that_leaves_gives_the_child_up_every_time(
    tmp_path: Path, who: str
) -> None:
    # Its batch was sent: the child may be writing it, and the replies come in order, so
    # the child is given up; every batch in flight fails, in the words of the oldest. The one
    # leaving is the later batch's leader (parked until its reply's turn) or a caller that
    # joined it (parked until answered): Trio's order decides which is which, so it is looked up.
    async with DirectoryStore(tmp_path, writer_process=misbehaving("hang")) as store:
        process = await up(store)
        for round_ in range(2):  # the second give-up as the first
            child = child_of(process)
            first, *later = (f"r{round_}{x}" for x in "abc")
            got: dict[str, object] = {}
            scopes = {name: trio.CancelScope() for name in later}
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(claim_or_fault, store, first, got)  # alone, read first
                    await trio.testing.wait_all_tasks_blocked()
                    for name in later:
                        nursery.start_soon(claim_or_fault, store, name, got, scopes[name])
                    await trio.testing.wait_all_tasks_blocked()
                    assert [len(batch.calls) for batch in process._flight] == [1, 2]
                    leader = process._flight[1].calls[0].item[0]
                    (joined,) = set(later) - {leader}
                    leaving = leader if who == "leader" else joined
                    scopes[leaving].cancel()
            assert child.wait(30) == -9  # killed
            fault = FAULT.format(why=writer.GIVEN_UP, n=1)
            (staying,) = set(later) - {leaving}
            assert got == {first: fault, staying: fault, leaving: "left"}
            if round_:
                break  # (a new child left up would make the close wait for it to exit)
            store._writes.start_writer()
            with trio.fail_after(30):
                while not process.ready():  # noqa: ASYNC110 -- another process, not a task
                    await trio.sleep(0.01)


class Starts:
    """A writer process as the store's write path sees it when it asks for a start."""

    def __init__(self, started: int, fails: OSError | None = None) -> None:
        self.alive = False
        self.started = started
        self.fails = fails

    def start(self) -> None:
        if self.fails is not None:
            raise self.fails
        self.started += 1
        self.alive = True


@pytest.mark.parametrize(
    ("started", "fails", "logged"),
    [
        (write_path.MAX_STARTS - 1, None, []),
        (
            write_path.MAX_STARTS,
            None,
            ["the state directory's writer process keeps ending: threads write now"],
        ),
        (
            0,
            OSError(errno.EMFILE, "Too many open files", "python3"),
            [
                "could not start the writer process (threads write): "
                "EMFILE: Too many open files: python3"
            ],
        ),
    ],
    ids=["last-start", "kept-ending", "cannot-start"],
)
def test_the_writer_process_starts_until_it_keeps_ending_or_cannot(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    started: int,
    fails: OSError | None,
    logged: list[str],
) -> None:
    writes = DirectoryStore(tmp_path)._writes
    starts = Starts(started, fails)
    writes.process = starts  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        writes.start_writer()
    assert caplog.messages == logged
    if logged:  # given up: threads write from now on
        assert writes.process is None
    else:
        assert writes.process is starts  # type: ignore[comparison-overlap]  # a stand-in
        assert (starts.started, starts.alive) == (write_path.MAX_STARTS, True)


def test_a_child_that_would_make_other_file_names_does_not_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # -I drops PYTHONCOERCECLOCALE too: in a C locale the child may encode names as UTF-8
    # where the parent does ASCII, and a routine's name would be another file. The parent's
    # threads write then (the child ends before it is up).
    from trio_routines.stores.directory.writer import child

    monkeypatch.setenv("TRIO_ROUTINES_WRITER_ENCODING", "ascii/strict")
    with pytest.raises(SystemExit) as ended:
        child.main(["0", "/nowhere", "1", "1.0"])
    assert ended.value.code == 2
    mine = f"{sys.getfilesystemencoding()}/{sys.getfilesystemencodeerrors()}"
    assert capsys.readouterr().err == (
        f"trio_routines writer: file names are {mine} here, ascii/strict in the parent: "
        "not started\n"
    )


async def test_a_new_child_gets_none_of_what_the_child_before_did_not_take(
    tmp_path: Path,
) -> None:
    started = process(tmp_path, SLEEPER)  # never reads its socket
    started.start()
    names = [f"routine-{i:06}" for i in range(writer.HINTED)]
    while not started._out:  # its socket full: the rest waits in the queue
        started.hint("spares", names)
    started._out[:0] = b"\xff\xff\xff"  # where the socket cut the request before it
    started.stop("was replaced")
    started._argv = writer.command()
    started.start()
    with trio.fail_after(30):
        while not started.ready():  # noqa: ASYNC110 -- another process, not a Trio task
            await trio.sleep(0.01)
        call = await started.submit("claims", ("r0", SLOT, SLOT, None))
    assert call.value.taken  # the new child read our request, not the old queue's tail
    started.stop()
    await trio.to_thread.run_sync(started.reap, 5.0)


class RefusingSocket:
    """A socket whose every send fails with ``code``."""

    def __init__(self, code: int) -> None:
        self.code = code

    def send(self, data: bytes) -> int:
        raise OSError(self.code, os.strerror(self.code))


@pytest.mark.parametrize(("code", "gone"), [(errno.EPIPE, True), (errno.ENOBUFS, False)])
def test_only_a_send_the_closed_end_refused_marks_the_child_gone(
    tmp_path: Path, code: int, gone: bool
) -> None:
    started = process(tmp_path)
    started._sock = RefusingSocket(code)  # type: ignore[assignment]
    started.hint("spares", ["a"])
    assert (started._broken is not None) is gone
    assert started._out  # kept: sent again later, or dropped with the child
