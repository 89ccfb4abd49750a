"""A process group's members that exited but are not reaped (zombies) do not keep it running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trio_routines.agents import _group_alive
from trio_routines.procgroup import runs_in_group


def state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_bytes()
    return text[text.rfind(b")") + 2 :].split()[0].decode()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_group_whose_only_member_exited_unreaped_runs_no_more() -> None:
    # Our own child, not waited for: once it exits it stays listed, a zombie, as an orphan
    # does until the init process reaps it.
    child = subprocess.Popen(["sh", "-c", "exit 0"], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while state(child.pid) != "Z":
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.01)
        os.killpg(child.pid, 0)  # the kernel still lists the group...
        assert not runs_in_group(child.pid)  # ...but nothing in it runs
        assert not _group_alive(child.pid)
    finally:
        child.wait()
    assert not _group_alive(child.pid)  # reaped: gone from the kernel's list too


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_group_with_a_running_member_runs() -> None:
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        assert runs_in_group(child.pid)
        assert _group_alive(child.pid)
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()


def fake_proc(root: Path, entries: dict[str, bytes]) -> str:
    for name, stat in entries.items():
        (root / name).mkdir()
        (root / name / "stat").write_bytes(stat)
    return str(root)


def test_members_are_told_by_their_state_whatever_their_command_is_called(tmp_path: Path) -> None:
    proc = fake_proc(
        tmp_path,
        {
            "10": b"10 (a) b) c) Z 1 77 77 0 -1\n",  # a command name with ") " in it
            "11": b"11 (x) S 1 78 78 0 -1\n",  # another group
            "12": b"12 (y) X 1 77 77 0 -1\n",  # dead
            "self": b"not a pid\n",
            "13": b"garbage",
            "14": b"14 (z) R 1 notanumber\n",
        },
    )
    (tmp_path / "15").mkdir()  # no stat file: left meanwhile
    assert not runs_in_group(77, proc)  # its members have all exited
    assert runs_in_group(78, proc)
    (tmp_path / "16").mkdir()  # main thread gone, a second thread running: "Z", 2 threads
    (tmp_path / "16" / "stat").write_bytes(
        b"16 (sh (x)) Z 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 2 0\n"
    )
    assert runs_in_group(77, proc)
    (tmp_path / "16" / "stat").write_bytes(
        b"16 (sh (x)) Z 1 77 77 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0\n"
    )
    assert not runs_in_group(77, proc)  # one thread left of a zombie: none running
    (tmp_path / "16" / "stat").write_bytes(b"16 (sh (x)) S 1 77 77 0 -1\n")
    assert runs_in_group(77, proc)


def test_without_a_listing_or_a_member_in_it_the_kernels_answer_stands(tmp_path: Path) -> None:
    assert runs_in_group(5, str(tmp_path / "missing"))  # no /proc to read
    proc = fake_proc(tmp_path, {"10": b"10 (a) S 1 6 6 0 -1\n"})
    assert runs_in_group(5, proc)  # group 5 not shown (hidden from us): it still counts


def test_the_fields_are_read_after_the_last_parenthesis_and_by_their_place(tmp_path: Path) -> None:
    tail = b" 0 0 0 0 0 0 0 0 0 20 0"  # flags .. nice: fields 6 to 16 of what follows ")"
    proc = fake_proc(
        tmp_path,
        {
            # The command "x) R 1 77 " reads as a running member of 77 to a reader that stops
            # at the first ")"; it is an exited member of 78 (session 70).
            "10": b"10 (x) R 1 77 ) Z 1 78 70 0 -1\n",
            "11": b"11 (y) Z 1 77 70 0 -1\n",  # 77's one member: exited
            "12": b"12 (w) Z 1 79 70 0 -1" + tail + b" 2\n",  # exactly 18 fields, 2 threads
            "13": b"13 (v) Z 1 80 70 0 -1" + tail + b"\n",  # 17 fields: no thread count
            "14": b"14 (u) Z 1 81\n",  # the three fields read, and no more
            "15": b"15 (t) \xff 1 82 70 0 -1\n",  # a state that is no ASCII letter
        },
    )
    assert not runs_in_group(77, proc)
    assert not runs_in_group(78, proc)
    assert runs_in_group(70, proc)  # a session, no group: no member shown, the kernel answers
    assert runs_in_group(79, proc)  # its main thread exited, another runs
    assert not runs_in_group(80, proc)
    assert not runs_in_group(81, proc)
    assert runs_in_group(82, proc)  # not known to have exited: it counts
