"""Temp names our own writes left behind, removed once they are clearly stale.

A claim the kernel cannot make unnamed is written under a temp name ``<prefix><16 hex>``
(safefile.py's ``create_whole``), linked under its slot's name, and the temp name unlinked. A
crash before that unlink, or an unlink that fails, leaves the temp name behind: no one's name,
so every reader steps over it, but a foreign name among a routine's claims, which sends every
claim of that routine down the claim gate's slower general path for as long as it is there.

Only the caller that already lists the directory removes them (a claim whose gate found
foreign names): the hot path, claims only, does no work for it. Another replica sharing the
directory may be between creating its temp file and linking it right now, so a name is removed
only when all of these hold, each looked at without following a link:

* it has the exact shape of our temp names: the prefix, then 16 lowercase hex digits (any
  other name, ``.new-claim-notes`` included, is foreign and left alone, as every foreign
  name is);
* ``lstat`` says it is a regular file or a symbolic link (a link is removed, never its
  target: ``unlink`` never follows one); a directory or anything else is left alone;
* its ``lstat`` mtime is more than :data:`STALE_AFTER` before now.

Removing a temp name that was linked already only drops a second name of the claim: the claim
stays. A name another replica removed first is nothing; one that cannot be removed is one
warning line, once per name, and never a fault of the claim that found it.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Iterable

from ..safefile import Where, at, describe, is_temp_name

log = logging.getLogger("trio_routines")

#: How long before now a temp name must have been last written to be taken for a leftover.
#: A real write holds its temp name from its create to its link: a claim of at most a few
#: hundred KiB written from memory, microseconds, seconds for a process stopped or swapped out
#: meanwhile, or a network file system that stalls. Ten minutes is far above all of that, and
#: above the clock skew between hosts sharing a directory over a network file system (the
#: server stamps the mtime, our clock reads now). A leftover waits that long at most, and costs
#: only the slower path meanwhile; a replica whose temp name was removed under it would fail
#: its claim's link (a fault, never two fires: the link decides the slot).
STALE_AFTER = 600.0

#: Names a removal failed for, remembered so that each warns once; forgotten past this many.
_WARNED_AT_MOST = 1024


def is_leftover(mode: int, mtime: float, now: float) -> bool:
    """Whether an entry with ``lstat`` ``mode`` and ``mtime`` is stale enough to remove."""
    return (stat.S_ISREG(mode) or stat.S_ISLNK(mode)) and now - mtime > STALE_AFTER


class Leftovers:
    """Removes the stale temp names of one prefix from the directories it is shown."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self._warned: set[str] = set()

    def remove(self, directory: int, where: Where, names: Iterable[str]) -> None:
        """Remove the stale temp names among ``names``, entries of ``directory`` (at
        ``where``); anything else is left as it is. Never raises ``OSError``."""
        now: float | None = None
        for name in names:
            if is_temp_name(name, self.prefix):
                now = time.time() if now is None else now
                self._remove(directory, where / name, name, now)

    def _remove(self, directory: int, path: Where, name: str, now: float) -> None:
        try:
            info = at(path, lambda: os.stat(name, dir_fd=directory, follow_symlinks=False))
            if not is_leftover(info.st_mode, info.st_mtime, now):
                return
            at(path, lambda: os.unlink(name, dir_fd=directory))
        except FileNotFoundError:
            return  # removed by another replica first
        except OSError as exc:
            self._warn(str(path), exc)
            return
        log.info("removed %s, a temp file left behind", path)

    def _warn(self, path: str, exc: OSError) -> None:
        if path in self._warned:
            return
        if len(self._warned) >= _WARNED_AT_MOST:
            self._warned.clear()
        self._warned.add(path)
        log.warning("could not remove %s, a temp file left behind: %s", path, describe(exc))


def remove_twins(directory: int, name: str, prefix: str) -> bool:
    """Remove the temp names (``prefix``) in ``directory`` that are second names of its file
    ``name``: a claim's making cut short between its link and the temp name's removal leaves
    one (its settle would otherwise refuse a file with two names). Whether one was removed;
    ``OSError`` from the file system."""
    info = os.stat(name, dir_fd=directory, follow_symlinks=False)
    removed = False
    for entry in os.listdir(directory):
        if not is_temp_name(entry, prefix):
            continue
        twin = os.stat(entry, dir_fd=directory, follow_symlinks=False)
        if (twin.st_ino, twin.st_dev) == (info.st_ino, info.st_dev):
            os.unlink(entry, dir_fd=directory)
            log.info("removed %s beside the claim %s, a temp name left behind", entry, name)
            removed = True
    return removed
