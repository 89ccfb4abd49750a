"""Opening state files safely: the one place the state directory store touches a file.

Everything below the state directory's root is untrusted: anyone who can write there may
plant a symlink, a FIFO, a device node or a huge file where a claim, ``wakeups.json`` or a
subdirectory should be. The rules, applied by every helper here:

* **no link is followed below the root.** Subdirectories are opened one component at a time
  relative to their parent (``dir_fd``) with ``O_NOFOLLOW|O_DIRECTORY``; files with
  ``O_NOFOLLOW``. The root itself may be a symlink: where the state lives is the operator's
  choice. New files are created with ``O_EXCL`` (which never follows a link), temp files under
  unpredictable names; a file that must never be seen half written (a claim) is written
  unnamed and linked in under its name, which never follows a link either.
* **nothing blocks.** A file is looked at (``lstat``) before it is opened, opened with
  ``O_NONBLOCK|O_NOCTTY`` (a FIFO without a writer would block a plain open forever), and
  checked again with ``fstat`` after the open: anything but a regular file is refused.
* **bounded reads.** A file larger than the caller's limit is refused unread.

A refusal is a :class:`Refused` (an ``OSError`` whose text names the file and what it is), so
callers decide per call whether it is a fault or a damaged entry to report and step over.
Every error carries the full path of the file, never only the name relative to a ``dir_fd``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import os
import secrets
import select
import stat
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from ..instants import slot_name

# The words of its messages, used by every module that touches a state file through this one.
from .fileplaces import KINDS as KINDS
from .fileplaces import Refused as Refused
from .fileplaces import Shared as Shared
from .fileplaces import Where as Where
from .fileplaces import Within as Within
from .fileplaces import at as at
from .fileplaces import describe as describe
from .fileplaces import kind_of as kind_of

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW


def open_root(root: Path) -> int:
    """The state directory itself, following a symlink (the operator's choice)."""
    return at(root, lambda: os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))


def open_dir(parent: int, name: str, where: Where, *, create: bool = False) -> int:
    """The subdirectory ``name`` of ``parent``, never through a link.

    With ``create``, a missing directory is made and fsynced into its parent first.
    """
    try:
        return at(where, lambda: os.open(name, DIR_FLAGS, dir_fd=parent))
    except FileNotFoundError:
        if not create:
            raise
    except NotADirectoryError:
        # O_NOFOLLOW|O_DIRECTORY says ENOTDIR for a link too: name the link as what it is.
        info = at(where, lambda: os.stat(name, dir_fd=parent, follow_symlinks=False))
        if stat.S_ISLNK(info.st_mode):
            raise Refused(f"{where} is a symbolic link, not a directory — refused") from None
        raise
    try:
        at(where, lambda: os.mkdir(name, 0o755, dir_fd=parent))
    except FileExistsError:
        pass  # made by someone else meanwhile
    else:
        at(where.parent, lambda: os.fsync(parent))
    return open_dir(parent, name, where)


def open_dirs(root: Path, names: tuple[str, ...], *, create: bool = False) -> int:
    """``root/names[0]/names[1]/...``, each component opened as :func:`open_dir` does."""
    try:
        fd = open_root(root)
    except FileNotFoundError:
        if not create:
            raise
        _make_root(root)
        fd = open_root(root)
    where = root
    try:
        for name in names:
            where = where / name
            child = open_dir(fd, name, where, create=create)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def _make_root(path: Path) -> None:
    """``mkdir -p`` of the root (links followed) that fsyncs the parent of what it creates."""
    missing = []
    probe = path
    while not probe.exists() and not probe.is_symlink():
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            directory.mkdir()
        except FileExistsError:
            pass
        fd = os.open(directory.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            at(directory.parent, lambda fd=fd: os.fsync(fd))  # type: ignore[misc]
        finally:
            os.close(fd)
    if not path.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path))


def _refuse_if_odd(parent: int, name: str, where: Where) -> None:
    """``lstat`` ``name``; raise :class:`Refused` unless it is a regular file."""
    info = at(where, lambda: os.stat(name, dir_fd=parent, follow_symlinks=False))
    if not stat.S_ISREG(info.st_mode):
        raise Refused(
            f"{where} is {kind_of(info.st_mode)}, not a regular file — refused", "remove it"
        )


def open_file(
    parent: int, name: str, where: Where, flags: int, limit: int, *, alone: bool = False
) -> int:
    """Open the existing regular file ``name`` of ``parent`` without following or blocking.

    Raises :class:`Refused` for anything else (or a file larger than ``limit`` bytes),
    ``FileNotFoundError`` when it is gone. ``alone``: the file is to be written in place, so
    one with another name too is refused (a hard link planted to a file outside the state
    directory would be written through).
    """
    _refuse_if_odd(parent, name, where)
    try:
        fd = at(where, lambda: os.open(name, flags | os.O_NONBLOCK | _NOFOLLOW, dir_fd=parent))
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # swapped for a link after the lstat
            raise Refused(f"{where} is a symbolic link, not a regular file — refused") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):  # swapped after the lstat
            raise Refused(f"{where} is {kind_of(info.st_mode)}, not a regular file — refused")
        if info.st_size > limit:
            raise Refused(f"{where} holds {info.st_size} bytes, more than {limit} — refused")
        if alone and info.st_nlink > 1:
            raise Shared(
                f"{where} has {info.st_nlink} names: a hard link to a file elsewhere — "
                "refused, not written"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_fd(fd: int, where: Where, limit: int) -> bytes:
    """Everything in ``fd`` from its offset, refusing more than ``limit`` bytes."""
    chunks = []
    size = 0
    try:
        while chunk := os.read(fd, min(65536, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:
                raise Refused(f"{where} grew past {limit} bytes while read — refused")
    except Refused:
        raise
    except OSError as exc:
        exc.filename = str(where)
        raise
    return b"".join(chunks)


def read_file(parent: int, name: str, where: Where, limit: int) -> bytes:
    """The content of the regular file ``name`` (see :func:`open_file`)."""
    fd = open_file(parent, name, where, os.O_RDONLY, limit)
    try:
        return read_fd(fd, where, limit)
    finally:
        os.close(fd)


def create_file(parent: int, name: str, where: Where) -> int:
    """Create ``name`` exclusively (``FileExistsError`` if anything, even a link, is there)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
    return at(where, lambda: os.open(name, flags, 0o644, dir_fd=parent))


def open_lock_file(parent: int, name: str, where: Where) -> int:
    """The lock file ``name`` of ``parent``, created if missing, for an ``flock``: a regular
    file of any size (it is never read: one grown large locks as well, where refusing it
    stopped every write it guards), never through a link. Anything else there (a FIFO, a
    directory, a link) is :class:`Refused`, saying to remove it."""
    try:
        return open_file(parent, name, where, os.O_RDWR, sys.maxsize)
    except FileNotFoundError:
        pass
    try:
        return create_file(parent, name, where)
    except FileExistsError:  # made meanwhile by another process
        return open_file(parent, name, where, os.O_RDWR, sys.maxsize)


#: The random part of a temp name: this many bytes, as twice as many lowercase hex digits.
_TEMP_BYTES = 8
_HEX = frozenset("0123456789abcdef")


def create_temp(parent: int, prefix: str, directory: Where) -> tuple[int, str]:
    """A new file ``<prefix><random>`` in ``parent``: no one can guess or pre-plant it."""
    name = f"{prefix}{secrets.token_hex(_TEMP_BYTES)}"
    return create_file(parent, name, directory / name), name


def is_temp_name(name: str, prefix: str) -> bool:
    """Whether ``name`` has the shape of one :func:`create_temp` makes with ``prefix``."""
    rest = name[len(prefix) :]
    return name.startswith(prefix) and len(rest) == 2 * _TEMP_BYTES and _HEX.issuperset(rest)


#: Where the kernel names this process's descriptors: an unnamed file is linked in through it.
_FD_LINKS = "/proc/self/fd"
_UNNAMED = getattr(os, "O_TMPFILE", 0) and os.path.isdir(_FD_LINKS)
#: An ``O_TMPFILE`` open's errors where the kernel or the file system has no unnamed files.
_NO_UNNAMED = frozenset({errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL})
#: A link through ``/proc`` refused (a sandbox, a file system that links no unnamed file).
_NOT_LINKED = frozenset({errno.ENOENT, errno.EPERM, errno.EACCES, errno.EXDEV, errno.EOPNOTSUPP})


def create_whole(parent: int, directory: Where, name: str, data: bytes, prefix: str) -> int:
    """The new file ``name`` of ``parent`` holding ``data``, never seen half written: written
    unnamed (``O_TMPFILE``) and linked in under ``name`` in one step, or, where the kernel or
    the file system cannot, written under an unpredictable temp name starting with ``prefix``,
    linked, and the temp name removed. ``FileExistsError`` if anything, even a link, is at
    ``name`` already; nothing is left behind on any error. Returns the file's descriptor,
    open for writing (the caller closes it): not fsynced."""
    where = directory / name
    if _UNNAMED:
        flags = os.O_WRONLY | os.O_TMPFILE | os.O_CLOEXEC
        try:
            fd = at(directory, lambda: os.open(".", flags, 0o644, dir_fd=parent))
        except OSError as exc:
            if exc.errno not in _NO_UNNAMED:
                raise
        else:
            try:
                write_all(fd, data, where)
                if _link_unnamed(parent, fd, name, where):
                    return fd
            except BaseException:
                os.close(fd)
                raise
            os.close(fd)
    fd, temp = create_temp(parent, prefix, directory)
    try:
        write_all(fd, data, where)
        at(
            where,
            lambda: os.link(
                temp, name, src_dir_fd=parent, dst_dir_fd=parent, follow_symlinks=False
            ),
        )
    except BaseException:
        os.close(fd)
        raise
    finally:
        # Left behind (this unlink failed, or a crash came first), it is no one's name:
        # readers step over it, and a claim removes its own once stale (leftovers.py).
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=parent)
    return fd


def _link_unnamed(parent: int, fd: int, name: str, where: Where) -> bool:
    """Name the unnamed file ``fd``; False when the link through ``/proc`` is refused."""
    try:
        at(where, lambda: os.link(f"{_FD_LINKS}/{fd}", name, dst_dir_fd=parent))
    except FileExistsError:
        raise
    except OSError as exc:
        if exc.errno in _NOT_LINKED:
            return False
        raise
    return True


def replace_file(
    directory: int, name: str, where: Where, data: bytes, prefix: str, *, durable: bool = True
) -> None:
    """Put ``data`` in place of the file ``name`` of ``directory`` (at ``where``) in one step:
    a temp file under an unpredictable name is written (and, with ``durable``, fsynced) and
    renamed over it; the temp file is removed if anything fails. Making the rename itself
    durable (an fsync of the directory) is the caller's."""
    fd, temp = create_temp(directory, prefix, where)
    try:
        try:
            write_all(fd, data, where / temp)
            if durable:
                fsync(fd, where / temp)
        finally:
            os.close(fd)
        at(where / name, lambda: os.replace(temp, name, src_dir_fd=directory, dst_dir_fd=directory))
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=directory)
        raise


def write_all(fd: int, data: bytes, where: Where) -> None:
    """``os.write`` until every byte is written (a single call may write fewer)."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        exc.filename = str(where)
        raise


def fsync(fd: int, where: Where) -> None:
    at(where, lambda: os.fsync(fd))


def lock_within(fd: int, seconds: float, *, first: float = 0.005) -> bool:
    """An exclusive ``flock`` with a bound: a holder that hangs must not hang a shielded fire.

    False when ``seconds`` passed without the lock; other failures raise ``OSError``. Asked
    again after ``first`` seconds, then twice as long each time, up to 5 ms: a lock held for
    microseconds (a claim's decision) is waited for about as long.
    """
    deadline = time.monotonic() + seconds
    pause = first
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            # A relative wait, not ``time.sleep``, which waits for an instant of the monotonic
            # clock: libfaketime (a wall clock set for a process) turns that into EINVAL, and a
            # contended lock read as an error (as pulses.py says of its own thread).
            select.select([], [], [], pause)
            pause = min(pause * 2, 0.005)


#: The longest name of a directory entry, in bytes (Linux's, and most file systems').
NAME_MAX = 255


def aside_name(name: str) -> str:
    """``<name>.corrupt-<instant>-<hex>``, or, where that would be longer than an entry's
    name may be (a routine's name of 218 bytes or more), ``name`` cut, ``~``, 16 hex digits of
    its digest, and the same end: a name the file system takes, telling whose it was."""
    end = f".corrupt-{slot_name(datetime.now(UTC))}-{secrets.token_hex(2)}"
    raw = name.encode("utf-8", errors="surrogateescape")
    if len(raw) + len(end) <= NAME_MAX:
        return name + end
    digest = hashlib.sha256(raw).hexdigest()[:16]
    room = NAME_MAX - len(end) - len(digest) - 1
    kept = raw[:room].decode("utf-8", errors="ignore")  # a character cut in two: left out
    return f"{kept}~{digest}{end}"


def link_aside(directory: int, name: str, where: Path) -> Path:
    """Link entry ``name`` of ``directory`` (which is ``where``) aside under
    :func:`aside_name`, before a write replaces it: the entry itself, a link as a link, never
    what it points to. A directory there, which cannot be linked (nor written over), is moved
    aside instead. The new path; an OSError naming it when it fails."""
    aside = aside_name(name)

    def keep() -> None:
        try:
            os.link(name, aside, src_dir_fd=directory, dst_dir_fd=directory, follow_symlinks=False)
        except PermissionError:  # EPERM: a directory
            info = os.stat(name, dir_fd=directory, follow_symlinks=False)
            if not stat.S_ISDIR(info.st_mode):
                raise
            os.rename(name, aside, src_dir_fd=directory, dst_dir_fd=directory)

    at(where / aside, keep)
    return where / aside
