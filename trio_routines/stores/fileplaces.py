"""Where a state file is, and what is wrong with it: the words every state file message uses.

:class:`Within` and :data:`Where` name a file for its messages (joined only when shown);
:class:`Refused` is an entry that is not what it should be (a link, a FIFO, a device, too
large), :class:`Shared` a file with other names; :func:`describe` says an ``OSError`` as
operators grep for it, and :func:`at` gives an error the full path of its file. The rules for
opening and writing the files are :mod:`.safefile`'s, which uses these.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TypeAlias, TypeVar

T = TypeVar("T")

KINDS = {
    stat.S_IFREG: "a regular file",
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFDIR: "a directory",
}


class Within:
    """The path ``parent / name``, for the messages that name it: joined only when shown.

    A herd's writes name thousands of files and fail on few: each joined up front as a
    :class:`~pathlib.Path` was a tenth of a claim's CPU in the writer process. Shown as the
    ``Path`` would be (its names are single components).
    """

    __slots__ = ("name", "parent")

    def __init__(self, parent: Path | Within, name: str) -> None:
        self.parent = parent
        self.name = name

    def __str__(self) -> str:
        return os.path.join(str(self.parent), self.name)

    def __fspath__(self) -> str:
        return str(self)

    def __truediv__(self, name: str) -> Within:
        return Within(self, name)


#: Where a file is, for its messages: a path, or one joined when shown.
Where: TypeAlias = Path | Within


class Refused(OSError):
    """A state file that is not what it should be: a link, a FIFO, a device, too large.

    ``reason`` says what is wrong; ``remedy``, when there is one for an operator, what to do
    about it (the message is both: ``<reason>; <remedy>``).
    """

    def __init__(self, reason: str, remedy: str | None = None) -> None:
        super().__init__(reason if remedy is None else f"{reason}; {remedy}")
        self.reason = reason
        self.remedy = remedy


class Shared(Refused):
    """A file to be written in place that has other names (a hard link to it elsewhere)."""


def describe(exc: OSError) -> str:
    """``EISDIR: Is a directory: <path>`` -- the errno name first, as operators grep for it."""
    if isinstance(exc, Refused):
        return str(exc)
    code = errno.errorcode.get(exc.errno or 0, "") if exc.errno else ""
    text = exc.strerror or str(exc)
    where = f": {exc.filename}" if exc.filename else ""
    return f"{code}: {text}{where}" if code else f"{text}{where}"


def kind_of(mode: int) -> str:
    return KINDS.get(stat.S_IFMT(mode), "not a regular file")


def at(where: Where, call: Callable[[], T]) -> T:
    """Run ``call``; an ``OSError`` it raises names ``where`` (the full path) as its file."""
    try:
        return call()
    except Refused:
        raise
    except OSError as exc:
        exc.filename = str(where)
        exc.filename2 = None
        raise
