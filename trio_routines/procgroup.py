"""Whether a process group still has a member that runs, telling exited members apart.

A cancelled ``cmd:`` turn signals its command's process group and waits until the group is
empty. ``killpg(pgid, 0)`` answers for every member the kernel still lists, and that includes
one that has exited but was not reaped yet: a zombie. A command's shell that exits before its
background job leaves that job an orphan, which the init process adopts and reaps when it gets
round to it -- in some containers only every second or two. Waited on as if it still ran, such
a zombie held every cancelled turn for the whole kill grace, and a stop's settle lost its
margin. Here a member counts only while its state (``/proc/<pid>/stat``) is not "exited".
"""

from __future__ import annotations

import os

#: States of ``/proc/<pid>/stat`` in which a process has exited: zombie, and dead.
EXITED = frozenset("ZX")


def runs_in_group(pgid: int, proc: str = "/proc") -> bool:
    """Whether a process of group ``pgid`` has not exited yet (zombies do not count). Asked
    once ``killpg`` found the group: when ``proc`` shows no member of it at all (not Linux,
    or hidden from us), that answer stands: True."""
    try:
        entries = os.listdir(proc)
    except OSError:
        return True
    exited = False
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/stat", "rb") as stat:
                text = stat.read()
        except OSError:
            continue  # it left meanwhile, or is not ours to read
        # "pid (comm) state ppid pgrp ...": the command may hold spaces and parentheses.
        fields = text[text.rfind(b")") + 2 :].split()
        if len(fields) < 3 or not fields[2].isdigit():
            continue
        if int(fields[2]) != pgid:
            continue
        if fields[0].decode("ascii", "replace") not in EXITED:
            return True
        # A process whose main thread exited reads "Z" too while its other threads run.
        if len(fields) > 17 and fields[17].isdigit() and int(fields[17]) > 1:
            return True
        exited = True
    return not exited
