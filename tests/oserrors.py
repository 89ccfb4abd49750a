"""Failing OS calls for the pinned store tests: one call of one store module fails on demand.

``fail(monkeypatch, module, "unlink", errno.EIO)`` replaces ``module.os`` by a proxy whose
``unlink`` raises ``OSError(EIO)`` (without a file name: the store must name the file itself)
for every call whose arguments ``when`` accepts; everything else is the real ``os``. Calls to
the same proxy can be made to fail one after the other (:meth:`FailingOS.also`).
:func:`fail_directory_fsyncs` makes every directory's ``fsync`` fail, wherever it is called.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

Matcher = Callable[..., bool]


def always(*args: Any, **kw: Any) -> bool:
    return True


def named(name: str) -> Matcher:
    """Matches a call whose first argument is the file name ``name`` (relative to a dir_fd)."""
    return lambda *args, **kw: bool(args) and args[0] == name


def prefixed(prefix: str) -> Matcher:
    return lambda *args, **kw: (
        bool(args) and isinstance(args[0], str) and args[0].startswith(prefix)
    )


class FailingOS:
    """``os`` as one module sees it, with some calls failing."""

    def __init__(self) -> None:
        self.failing: dict[str, tuple[int, Matcher]] = {}
        self.hits: list[str] = []

    def also(self, call: str, code: int, when: Matcher = always) -> FailingOS:
        self.failing[call] = (code, when)
        return self

    def __getattr__(self, name: str) -> Any:
        real = getattr(os, name)
        if name not in self.failing:
            return real
        code, when = self.failing[name]

        def failing(*args: Any, **kw: Any) -> Any:
            if when(*args, **kw):
                self.hits.append(name)
                raise OSError(code, os.strerror(code))
            return real(*args, **kw)

        return failing


def fail(
    monkeypatch: pytest.MonkeyPatch,
    module: ModuleType,
    call: str,
    code: int,
    when: Matcher = always,
) -> FailingOS:
    proxy = FailingOS().also(call, code, when)
    monkeypatch.setattr(module, "os", proxy)
    return proxy


def fail_directory_fsyncs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``os.fsync`` of a directory (the one a rename landed in) fails with ``EIO`` ("I/O
    error", no file name: the store names it); a file's still flushes."""
    real = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EIO, "I/O error")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def lock_clock(monkeypatch: pytest.MonkeyPatch, readings: list[float]) -> list[float]:
    """The clock ``safefile.lock_within`` reads, ``readings``; its waits (relative:
    ``select``'s, as libfaketime leaves working), kept in the list returned."""
    from trio_routines.stores import safefile

    slept: list[float] = []
    times = iter(readings)

    def wait(read: list[int], write: list[int], other: list[int], timeout: float) -> Any:
        slept.append(timeout)
        return [], [], []

    monkeypatch.setattr(safefile, "time", SimpleNamespace(monotonic=lambda: next(times)))
    monkeypatch.setattr(safefile, "select", SimpleNamespace(select=wait))
    return slept


@contextlib.contextmanager
def locked_elsewhere(directory: Path) -> Iterator[None]:
    """``directory`` locked (``flock``, exclusive) through a descriptor of its own, as another
    process deciding in it, and stalled, holds it: a lock of the store's waits for it."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
