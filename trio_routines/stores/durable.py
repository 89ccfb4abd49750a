"""Making writes durable without an event loop: ``syncfs(2)``, the tickets that order the
descriptors a flush may go through, and those descriptors (see groupcommit.py, which batches
the flushes on the event loop's side; the state directory's writer process uses these alone).
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import time
from collections.abc import Callable
from typing import Any


def libc_function(name: str) -> Any:
    """The C library's function ``name`` with its ``errno`` kept, or None where there is none.

    Looked up among the symbols this process has loaded (CPython on Linux is linked against
    the C library), then under the C library's usual name: never ``ctypes.util.find_library``,
    which runs ``ldconfig``, or a C compiler found on the ``PATH``, to answer.
    """
    for library in (None, "libc.so.6"):
        try:
            return getattr(ctypes.CDLL(library, use_errno=True), name)
        except (OSError, AttributeError):
            continue
    return None


def _libc_syncfs() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    function = libc_function("syncfs")
    if function is None:
        return None
    function.argtypes = [ctypes.c_int]
    function.restype = ctypes.c_int
    return function


_SYNCFS = _libc_syncfs()


def syncfs(fd: int) -> None:
    """``syncfs(2)``: make everything written on ``fd``'s file system durable."""
    if _SYNCFS is None:
        raise OSError(errno.ENOSYS, "syncfs is not available on this platform")
    if _SYNCFS(fd) != 0:
        code = ctypes.get_errno() or errno.EIO
        raise OSError(code, os.strerror(code))


#: :func:`syncfs`, or None where the platform has none (then the store fsyncs per file).
SYNCFS: Callable[[int], None] | None = syncfs if _SYNCFS is not None else None


def opened() -> int:
    """A ticket for a descriptor just opened: take it after the open, before the writes.

    A ``CLOCK_MONOTONIC`` reading, comparable across processes (the writer process's
    descriptors meet ours in one flush). Equal tickets are safe: each was read after its own
    open and before the other's writes began.
    """
    return time.monotonic_ns()


#: Descriptors a flush goes through: per file system (``st_dev``), the earliest opened one
#: and its :func:`opened` ticket.
Descriptors = dict[int, tuple[int, int]]


def hand_in(held: Descriptors, device: int, fd: int, ticket: int) -> None:
    """Add ``fd`` to ``held`` (taking it over): keep the earliest opened per file system."""
    kept = held.get(device)
    if kept is None or ticket < kept[0]:
        held[device] = (ticket, fd)
        if kept is not None:
            os.close(kept[1])
    else:
        os.close(fd)


def close_held(held: Descriptors) -> None:
    """Close what no flush will take over now (a batch whose caller gave up)."""
    for _, fd in held.values():
        os.close(fd)
