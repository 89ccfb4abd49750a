"""The pulses on the running commands' lifelines (pulses.py), with a real thread and pipes."""

from __future__ import annotations

import os
import select
import threading
import time
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from procs import wait_for

from trio_routines import pulses as pulses_module
from trio_routines.pulses import PULSE, PULSES, Pulses


def _threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "trio_routines pulses"]


def test_a_lifeline_is_pulsed_until_it_is_discarded_and_the_thread_then_ends() -> None:
    pulses = Pulses(every=0.02, deadline=60)
    read, write = os.pipe()
    try:
        pulses.add(write)
        assert wait_for(lambda: os.read(read, 1)) == PULSE
        assert not pulses.late(write)
        assert pulses.discard(write) is False  # never late
        assert pulses.discard(write) is False  # not registered any more
        wait_for(lambda: not pulses._running, 10, "the thread to end with nothing to pulse")
        os.set_blocking(read, False)
        while True:  # what was written before the discard; then nothing more comes
            try:
                os.read(read, 4096)
            except BlockingIOError:
                break
        time.sleep(0.1)
        try:
            os.read(read, 1)
            raise AssertionError("a pulse after its lifeline was discarded")
        except BlockingIOError:
            pass
        assert not pulses.late(write)  # not registered: not ours to say
    finally:
        os.close(read)
        os.close(write)


def _heard(fd: int) -> bytes:
    """One byte from ``fd``, waited for at most 10 s (a test never hangs on a missing pulse)."""
    if not select.select([fd], [], [], 10)[0]:
        raise AssertionError("no pulse within 10 s")
    return os.read(fd, 1)


def test_a_full_pipe_or_a_gone_reader_is_passed_over_and_the_others_still_pulsed() -> None:
    # A supervisor that does not read (stopped too) fills its pipe: a write to it would wait,
    # and the thread with it, and no other command would hear its pulses.
    pulses = Pulses(every=0.02, deadline=60)
    full_read, full = os.pipe()
    os.set_blocking(full, False)
    try:
        while True:
            os.write(full, b"x" * 65536)
    except BlockingIOError:
        pass
    os.set_blocking(full, True)
    gone_read, gone = os.pipe()
    os.close(gone_read)
    read, write = os.pipe()
    try:
        for fd in (full, gone, write):
            pulses.add(fd)
        assert _heard(read) == PULSE
        assert _heard(read) == PULSE  # and the round after
        for fd in (full, gone, write):
            pulses.discard(fd)
        assert pulses.discard(write) is False  # not registered (any more): no answer but no
    finally:
        for fd in (full_read, full, gone, read, write):
            os.close(fd)


class _Recorded(threading.Thread):
    made: ClassVar[list[dict[str, object]]] = []

    def __init__(self, **kwargs: Any) -> None:
        _Recorded.made.append(kwargs)
        super().__init__(**kwargs)


def test_one_daemon_thread_pulses_every_lifeline_and_a_new_one_comes_after_it_ended(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A daemon: a process that ends is not held up by it; one for all: not one per command.
    recording = SimpleNamespace(Thread=_Recorded, Lock=threading.Lock)
    monkeypatch.setattr(pulses_module, "threading", recording)
    _Recorded.made = []
    pulses = Pulses(every=0.02, deadline=60)
    pipes = [os.pipe() for _ in range(3)]
    try:
        for _, write in pipes:
            pulses.add(write)
        for read, _ in pipes:
            assert _heard(read) == PULSE
        assert [(m["name"], m["daemon"]) for m in _Recorded.made] == [
            ("trio_routines pulses", True)
        ]
        for _, write in pipes:
            pulses.discard(write)
        wait_for(lambda: not pulses._running, 10, "the thread to end with nothing to pulse")
        pulses.add(pipes[0][1])
        assert _heard(pipes[0][0]) == PULSE
        assert len(_Recorded.made) == 2
        pulses.discard(pipes[0][1])
    finally:
        for pair in pipes:
            for fd in pair:
                os.close(fd)


def test_a_process_that_did_not_run_for_the_deadline_is_late() -> None:
    pulses = Pulses(every=0.02, deadline=0.2)
    read, write = os.pipe()
    try:
        pulses.add(write)
        assert not pulses.late(write)
        # The thread last pulsed a second ago: as a stopped process's, which has just run
        # again, its thread not yet. Late at once, and noted so at the thread's next round.
        pulses._pulsed = time.monotonic() - 1
        assert pulses.late(write)
        wait_for(lambda: pulses._fds[write] or None, 10, "the thread to note it late")
        assert pulses.late(write)
        assert pulses.discard(write) is True
        assert not pulses.late(write)
    finally:
        os.close(read)
        os.close(write)


def test_the_runtimes_pulses_are_one_a_second_with_ten_seconds_of_grace() -> None:
    # What the supervisor is told and what the thread keeps to: ten missed pulses.
    assert (PULSES.every, PULSES.deadline) == (1.0, 10.0)
    assert PULSE != b"r"  # lifeline.RELEASE: a pulse never releases


def test_a_forked_child_pulses_nothing_of_its_parents_and_starts_its_own_thread() -> None:
    pulses = Pulses(every=0.02, deadline=60)
    read, write = os.pipe()
    try:
        pulses.add(write)
        child = os.fork()
        if child == 0:  # no thread runs here, and the parent's lifelines are not ours
            ok = False
            try:
                ok = pulses._running is False and pulses._fds == {} and not pulses.late(write)
                mine_read, mine = os.pipe()
                pulses.add(mine)  # a thread of its own
                heard = select.select([mine_read], [], [], 10)[0]  # never a hang: 10 s at most
                ok = ok and bool(heard) and os.read(mine_read, 1) == PULSE
            finally:  # whatever happened, this child runs no more of the test session
                os._exit(0 if ok else 1)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        pulses.discard(write)
    finally:
        os.close(read)
        os.close(write)


def test_what_a_forked_child_starts_from() -> None:
    # The hook a fork runs in the child (above), called here: in the test process, where
    # mutation testing sees it reached.
    pulses = Pulses(every=0.02, deadline=60)
    read, write = os.pipe()
    try:
        pulses.add(write)
        held = pulses._lock
        pulses._forked()
        assert (pulses._running, pulses._fds) == (False, {})
        assert pulses._lock is not held  # a lock the parent's thread may have held at the fork
        with pulses._lock:
            pass  # a lock, and free
        assert not pulses.late(write)
    finally:
        os.close(read)
        os.close(write)


class _NoThread(threading.Thread):
    def start(self) -> None:
        raise RuntimeError("can't start new thread")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_thread_that_could_not_start_or_died_is_started_again_at_the_next_add(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Left marked as running, no thread would ever pulse again, and every command would be
    # ended at the deadline.
    pulses = Pulses(every=0.02, deadline=60)
    read, write = os.pipe()
    try:
        monkeypatch.setattr(
            pulses_module, "threading", SimpleNamespace(Thread=_NoThread, Lock=threading.Lock)
        )
        with pytest.raises(RuntimeError, match="can't start new thread"):
            pulses.add(write)
        assert pulses._running is False
        monkeypatch.undo()

        died: list[threading.Thread] = []

        def dies() -> None:
            died.append(threading.current_thread())
            raise MemoryError  # the thread's end, which pytest would report: let be here

        monkeypatch.setattr(pulses, "_pulse_while_any", dies)
        pulses.add(write)
        wait_for(lambda: not pulses._running, 10, "the dead thread's mark to go")
        # Its end reported within this test: else it went to whichever test ran next.
        died[0].join(10)
        monkeypatch.undo()
        pulses.add(write)
        assert _heard(read) == PULSE
        pulses.discard(write)
    finally:
        os.close(read)
        os.close(write)
