"""The parent's end of the writer process, pinned: how a child is started, stopped and reaped.

Real child processes, but cheap ones where the child's own work does not matter: a
``python -c`` that sleeps (never up, and deaf to its socket closing, as a child stuck in a
stalled disk's write is) stands in for the writer while the parent's side is looked at
through ``/proc``.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time
from pathlib import Path

import pytest
import trio

from trio_routines.stores import writer
from trio_routines.stores.groupcommit import GroupCommit
from trio_routines.stores.writer import WriterProcess

PACKAGE = str(Path(writer.__file__).resolve().parents[2])
SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]  # never up, never ends


def process(tmp_path: Path, argv: list[str] | None = None) -> WriterProcess:
    return WriterProcess(tmp_path, 7, 0.25, GroupCommit(lambda fd: None), max_batch=256, argv=argv)


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


def open_fds() -> set[int]:
    """The descriptors open in this process (a listing of /proc/self/fd would hold its own)."""
    found = set()
    for fd in range(4096):
        try:
            os.fstat(fd)
        except OSError:
            continue
        found.add(fd)
    return found


def child_pid(writer_process: WriterProcess) -> int:
    child = writer_process._child
    assert child is not None
    return child.pid


@pytest.mark.parametrize("inherited", [None, "/elsewhere"])
def test_a_child_finds_this_package_first_its_socket_and_no_stdin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inherited: str | None
) -> None:
    if inherited is None:
        monkeypatch.delenv("PYTHONPATH", raising=False)
    else:
        monkeypatch.setenv("PYTHONPATH", inherited)
    started = process(tmp_path, SLEEPER)
    started.start()
    try:
        pid = child_pid(started)
        expected = PACKAGE if inherited is None else f"{PACKAGE}{os.pathsep}{inherited}"
        assert environ(pid)["PYTHONPATH"] == expected
        assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
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


def test_a_child_that_cannot_be_started_leaves_no_socket_open(tmp_path: Path) -> None:
    before = open_fds()
    failed = process(tmp_path, [str(tmp_path / "no-such-program")])
    with pytest.raises(FileNotFoundError):
        failed.start()
    assert open_fds() == before
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
    child = ends._child
    assert child is not None
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
        with trio.fail_after(30):
            while not real.ready():  # noqa: ASYNC110 -- another process, not a Trio task
                await trio.sleep(0.01)
        child = real._child
        assert child is not None
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
    child = stubborn._child
    assert child is not None
    with caplog.at_level(logging.WARNING, logger="trio_routines"):
        stubborn.stop()
    assert caplog.messages == []
    assert child.poll() is None  # asked to go (its socket closed), not killed
    stubborn.start()  # a new child; the old one is still being waited for
    second = stubborn._child
    assert second is not None
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
    first = ending._child
    assert first is not None
    ending.stop()
    first.wait(30)
    ending.start()  # the first has ended: not kept to be reaped
    assert ending._ended == []
    ending.stop("was told to stop by the test")
    assert len(ending._ended) == 1
    ending.reap(30)
    assert ending._ended == []
