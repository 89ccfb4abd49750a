"""Spare claim files: a routine's next claim file made ahead of its slot.

    <root>/schedule/claims/<routine>/.next-claim    a spare: never a claim, never read as one

Making a file is most of what a claim costs the disk: an inode to allocate, a directory entry
to add, a block to allocate at the flush. A claim that finds a spare in its routine's
directory (under that directory's lock, claimfiles.py) writes its text over the spare's,
cuts what is left, and renames the spare to its slot's name with ``renameat2``'s
``RENAME_NOREPLACE``: the slot is still decided by the name, as the link of a new file
decides it (the rename fails if anything is at the slot's name already), and no reader ever
sees the claim half made, since the spare's name is no claim's. The writer process makes the
spares while it is idle (writer/child.py): those of the routines a boot read, and the next
one of every routine it claimed for. So a herd's claims rename files made during the quiet
before it (the measurements are in benchmarks/README.md).

A spare is never trusted: one that is not a regular file with a single link, ours and of a
claim's size at most (a symbolic link, a FIFO or a directory planted there, a hard link to
some other file, another user's file), one replaced between its open and its rename (the
slot's name is checked to hold the file written), a rename the file system cannot make, and
the claim makes its own file, as it does when there is no spare. It is made whole (written,
then linked under its name: the moment it has its name another replica may take it) and
flushed once a round of spares is made, which nothing waits for: a crash before that may
lose it (the claim then makes its file) or leave it empty. A crash between a claim's rename
and its flush (its turn has not started: the turn waits for the flush) may leave the slot's
file holding the spare's blank line, which reads as a claim without stamp, as a new file
would if it lost its text. Every replica sharing the directory makes and takes the same one:
made under a name nobody else can reach and linked in, it is one file or none. Earlier
versions see a foreign name, which they pass over and leave alone.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import stat
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ...claims import SPARE_CLAIM
from ..durable import libc_function
from ..safefile import Where, create_whole, describe, write_all
from .claimbatch import CLAIM_LIMIT

if TYPE_CHECKING:
    from .claimfiles import ClaimFiles

log = logging.getLogger("trio_routines")

#: A spare's text until a claim writes over it: a blank line, which reads as no claim
#: record at all. One byte, so that the file has its block before a claim takes it.
BLANK = b"\n"
#: ``renameat2``'s flag: fail with ``EEXIST`` rather than replace what is at the new name.
_NOREPLACE = 1
#: The errors of a rename the kernel or the file system cannot make without replacing.
_CANNOT = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP})

_SPARE = os.fsencode(SPARE_CLAIM)
_OPEN = os.O_WRONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC


def _libc_renameat2() -> Callable[..., int] | None:
    """The C library's ``renameat2`` (Linux, glibc 2.28 and later), or None."""
    function = libc_function("renameat2")
    if function is None:
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p]
    function.argtypes += [ctypes.c_uint]
    function.restype = ctypes.c_int
    found: Callable[..., int] = function
    return found


_RENAMEAT2 = _libc_renameat2()


def rename_new(directory: int, old: bytes, new: bytes) -> None:
    """Rename ``old`` to ``new`` in ``directory`` unless something is at ``new``
    (``FileExistsError`` then); ``OSError`` with ``ENOSYS`` where there is no such call."""
    if _RENAMEAT2 is None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    if _RENAMEAT2(directory, old, directory, new, _NOREPLACE) != 0:
        code = ctypes.get_errno() or errno.EIO
        raise OSError(code, os.strerror(code))


class Spares:
    """Taking and making the spare claim files of one store (see the module doc)."""

    def __init__(self, prefix: str) -> None:
        """``prefix``: the temp names a spare is made under where the kernel has no unnamed
        files (those of claims, which a claim removes once stale if a crash left one)."""
        self._prefix = prefix
        self._uid = os.geteuid()
        #: False once a rename could not be made: every claim makes its own file from then.
        self.usable = _RENAMEAT2 is not None

    def take(self, directory: int, where: Where, name: str, data: bytes) -> int | None:
        """The spare of the routine whose claim directory is ``directory`` (at ``where``),
        holding ``data`` and named ``name``: its descriptor, open for writing. None when it
        cannot be used (the caller makes the claim's file). ``FileExistsError`` when
        something is at ``name``; the spare then stays a spare. The caller holds the
        directory's lock and saw the spare in its listing."""
        if not self.usable:
            return None
        try:
            fd = os.open(SPARE_CLAIM, _OPEN, dir_fd=directory)
        except OSError as exc:  # gone, a link (ELOOP), a FIFO without a reader (ENXIO) ...
            log.debug("%s: the spare claim file is unusable: %s", where, describe(exc))
            return None
        try:
            info = os.fstat(fd)
            if not self._own(info):
                log.debug("%s: the spare claim file is not a file of ours alone", where)
                os.close(fd)
                return None
            # Written over, then cut if longer: its block is kept, not freed and allocated anew.
            write_all(fd, data, where / name)
            if info.st_size > len(data):
                os.ftruncate(fd, len(data))
            rename_new(directory, _SPARE, name.encode())  # a slot's name: ASCII digits
        except FileExistsError:
            os.close(fd)
            raise
        except OSError as exc:
            os.close(fd)
            if exc.errno in _CANNOT:
                self.usable = False
                log.info("claims make their own files here (no renameat2): %s", describe(exc))
            else:
                log.debug("%s: the spare claim file is unusable: %s", where, describe(exc))
            return None
        # Named: the slot is decided, and nothing from here falls back to making a file.
        try:
            named = os.stat(name, dir_fd=directory, follow_symlinks=False)
        except OSError:
            return fd  # not to be looked at: the file renamed is taken for the one written
        if (named.st_ino, named.st_dev) != (info.st_ino, info.st_dev):
            # Another file took the spare's name between our open and our rename (one removed
            # by hand, then made again by another replica): it is not a claim. Removed, the
            # slot's name is free again for the claim's own file; if it cannot be, the claim
            # fails (a retry), never reported a duplicate of itself.
            os.close(fd)
            log.debug(
                "%s: the spare claim file is unusable: it was replaced while it was written",
                where,
            )
            os.unlink(name, dir_fd=directory)
            return None
        return fd

    def _own(self, info: os.stat_result) -> bool:
        """Whether a spare opened is a file we may take: a regular file of one link (no link
        to a file elsewhere), ours, of a claim's size at most."""
        return (
            stat.S_ISREG(info.st_mode)
            and info.st_nlink == 1
            and info.st_uid == self._uid
            and info.st_size <= CLAIM_LIMIT
        )

    def make(self, files: ClaimFiles, routines: Iterable[str]) -> int:
        """Make the spare of each of ``routines`` that has none (blocking; in the writer
        process, while it is idle): how many were made. Never raises ``OSError``: a spare
        that cannot be made is only a claim that makes its own file. None is made for a
        routine that has no claims directory yet: its first claim makes one."""
        if not self.usable:
            return 0
        made = 0
        with files.claims_dir() as claims:
            for routine in routines:
                made += self._make_one(files, routine, claims)
        return made

    def _make_one(self, files: ClaimFiles, routine: str, claims: int | None) -> int:
        try:
            where = files.claim_dir(routine)
            directory = files.open_claims(routine, claims=claims, where=where)
        except (OSError, ValueError) as exc:  # ValueError: a name no routine may have
            log.debug("could not make a spare claim file for %r: %s", routine, exc)
            return 0
        try:
            # Looked for first: making one where one is costs an inode made and freed.
            os.stat(SPARE_CLAIM, dir_fd=directory, follow_symlinks=False)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.debug("could not make a spare claim file in %s: %s", where, describe(exc))
            os.close(directory)
            return 0
        else:
            os.close(directory)
            return 0
        try:
            fd = create_whole(directory, where, SPARE_CLAIM, BLANK, self._prefix)
        except FileExistsError:
            return 0  # one is there (or something squats on its name: left as it is)
        except OSError as exc:
            log.debug("could not make a spare claim file in %s: %s", where, describe(exc))
            return 0
        finally:
            os.close(directory)
        with contextlib.suppress(OSError):
            os.close(fd)
        return 1
