"""The pulses on the running commands' lifelines (pulses.py), with a real thread and pipes."""

from __future__ import annotations

import os
import select
import threading
import time

from procs import wait_for

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


def test_a_full_pipe_or_a_gone_reader_is_passed_over_and_the_others_still_pulsed() -> None:
    pulses = Pulses(every=0.02, deadline=60)
    full_read, full = os.pipe()
    os.set_blocking(full, False)
    try:
        while True:
            os.write(full, b"x" * 65536)
    except BlockingIOError:
        pass
    gone_read, gone = os.pipe()
    os.close(gone_read)
    read, write = os.pipe()
    try:
        for fd in (full, gone, write):
            pulses.add(fd)
        assert wait_for(lambda: os.read(read, 1)) == PULSE  # the thread was not stuck
        for fd in (full, gone, write):
            pulses.discard(fd)
    finally:
        for fd in (full_read, full, gone, read, write):
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
            ok = not pulses._running and not pulses._fds and not pulses.late(write)
            mine_read, mine = os.pipe()
            pulses.add(mine)  # a thread of its own
            heard = select.select([mine_read], [], [], 10)[0]  # never a hang: at most 10 s
            ok = ok and bool(heard) and os.read(mine_read, 1) == PULSE
            os._exit(0 if ok else 1)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        pulses.discard(write)
    finally:
        os.close(read)
        os.close(write)
