"""The wake-up store of a state directory: an in-memory index kept up to date from the journal.

A process reads ``wakeups.journal`` once, then only what was appended since (its complete
lines): whether anything was, a poll learns from one ``fstat`` and the header's few bytes, so a
poll with nothing due neither reads nor parses. A change is made under the writers' ``flock``:

1. catch up with the journal; cut a line torn by a crash (a reader never took it);
2. take over a ``wakeups.json`` an earlier version left (its entries are appended, then it is
   moved aside, so the earlier version no longer fires them);
3. plan the change with the rules of :mod:`trio_routines.wakeups` on the index, append its line
   and ``fdatasync`` it, then apply it to the index;
4. when the journal holds well more lines than there are pending wake-ups (or damage), write a
   new generation: a header and one line per pending wake-up, renamed over the journal;
5. hand the answer over to the caller (../abandon.py), last: until then a caller may leave,
   and a change whose caller left is undone (appended inverted) or warned about.

A line that is not a valid change is damage: warned about once by each process that reads it,
stepped over, and kept aside with the journal as found when the next writer compacts it. A
wake-up this version cannot use (wakeupindex.py) is no damage: warned about likewise, it is
kept in the journal as written.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ...converter import dumps, loads
from ...errors import StateFault
from ..abandon import Handoff
from ..safefile import Refused, Shared, describe, open_dirs
from .wakeupfile import WakeupFile, unreadable_state, unwritable_state
from .wakeupindex import Op, WakeupIndex, op_ids
from .wakeupjournal import MAX_LINE, Journal, generation_of, header, line

log = logging.getLogger("trio_routines")
T = TypeVar("T")
Plan = Callable[[WakeupIndex], tuple[list[Op], T]]

#: A generation is rewritten once its lines pass twice the pending wake-ups plus this.
SLACK = 4096


class WakeupLog:
    """The pending wake-ups of ``<root>/schedule``, as this process last read them."""

    def __init__(self, root: Path, lock_timeout: float) -> None:
        self.root = root
        self.file = WakeupFile(root, lock_timeout)
        self.journal = Journal(self.file.schedule)
        self.path = self.journal.path
        self._forget()
        self._refused: str | None = None  # the last refusal warned about (polls repeat it)

    def _forget(self, generation: bytes | None = None, inode: int = 0) -> None:
        self.index = WakeupIndex()
        self._generation = generation  # the header of the generation read; None: none
        self._inode = inode
        self._offset = 0  # the end of the last complete line taken
        self._size = 0  # the file's size when last read
        self._lines = 0
        self._damaged = False

    def _unreadable(self, exc: OSError) -> StateFault:
        return unreadable_state(self.path, exc)

    # -- reading -----------------------------------------------------------------------------

    def refresh(self) -> bool:
        """Catch up without the lock; False when a ``wakeups.json`` waits to be taken over
        (which needs the lock: see :meth:`take_over`)."""
        try:
            directory = open_dirs(self.root, ("schedule",))
        except FileNotFoundError:
            self._refused = None  # as below: nothing is there to refuse any more
            self._forget()
            return True
        except OSError as exc:
            raise self._unreadable(exc) from None
        try:
            if self.file.present(directory):
                return False
            self.catch_up(directory)
        finally:
            os.close(directory)
        return True

    def catch_up(self, directory: int) -> None:
        """Take what was appended to the journal since last read (none: nothing pending)."""
        try:
            fd = self.journal.open(directory)
        except FileNotFoundError:
            self._refused = None  # gone: a refused file planted again is warned about
            self._forget()
            return
        except Refused as exc:
            self._refuse(exc)
            return
        except OSError as exc:
            raise self._unreadable(exc) from None
        try:
            self._follow(fd)
        finally:
            os.close(fd)

    def _refuse(self, exc: Refused) -> None:
        if str(exc) != self._refused:
            self._refused = str(exc)
            log.warning("unusable wake-up store: %s — ignoring it", describe(exc))
        self._forget()

    def _follow(self, fd: int) -> None:
        """Take the complete lines appended to the journal open at ``fd`` since last read."""
        self._refused = None
        try:
            info = os.fstat(fd)
            generation = self.journal.generation(fd)
            if (
                generation != self._generation
                or info.st_ino != self._inode
                or info.st_size < self._offset
            ):
                self._forget(generation, info.st_ino)
            elif info.st_size == self._offset:
                self._size = info.st_size
                return  # the cheap poll: nothing appended (a torn tail is read again: a
                # writer may have cut it and appended a line of the same length since)
            end = self.journal.scan(fd, self._offset, info.st_size, self._take_line, self._too_long)
        except OSError as exc:
            raise self._unreadable(exc) from None
        self._offset = end
        self._size = info.st_size

    def _too_long(self, at: int) -> None:
        self._lines += 1
        self._damaged = True
        log.warning(
            "damaged wake-up journal line at byte %d of %s — longer than %d bytes: skipped "
            "(kept aside at the next compaction)",
            at,
            self.path,
            MAX_LINE,
        )

    def _take_line(self, raw: bytes, at: int) -> None:
        self._lines += 1
        try:
            op = loads(raw.decode("utf-8"))
            if at == 0 and isinstance(op, dict) and op.get("op") == "gen":
                return
            unusable = self.index.apply(op)
        except (ValueError, TypeError) as exc:  # not UTF-8, not JSON, or no valid change
            self._damaged = True
            log.warning(
                "damaged wake-up journal line at byte %d of %s — skipped (kept aside at the "
                "next compaction): %s: %s",
                at,
                self.path,
                exc,
                raw[:200].decode("utf-8", "replace"),
            )
            return
        if unusable is not None:
            log.warning("%s: kept as written in %s, never fired here", unusable, self.path)

    # -- writing -----------------------------------------------------------------------------

    def change(self, handoff: Handoff, plan: Plan[T], *, undo: bool = True) -> T:
        """Make the change ``plan`` asks for under the lock (see the module doc); with ``undo``
        a change whose caller gave up is not made, or undone if it landed meanwhile."""
        with self.file.locked() as directory:
            fd = self._writable(directory)
            try:
                ops, result = plan(self.index)
                if not ops or (undo and handoff.gave_up):
                    return result
                inverse = self.index.inverse(ops)
                self._write(fd, ops)
                unwritable: StateFault | None = None
                if self._compaction_due():
                    # Before the hand-over, while the caller may still leave: after it, a
                    # caller could not leave a compaction the disk stalls (run_abandoning).
                    stale, fd = fd, -1
                    os.close(stale)
                    fresh = self._compact(directory)
                    try:  # one that failed may have renamed the new generation in: reopen
                        fd = fresh if fresh is not None else self._writable(directory)
                    except StateFault as exc:
                        unwritable = exc  # the change stands; only an undo needs the file
                if not handoff.hand_over():
                    if undo:
                        self._undo(fd, ops, inverse, unwritable)
                    else:
                        log.warning(
                            "the wake-up store %s: a change given up by its caller was made "
                            "after all (wake-ups %s)",
                            self.path,
                            op_ids(ops),
                        )
            finally:
                if fd >= 0:
                    os.close(fd)
            return result

    def take_over(self) -> None:
        """Take over a ``wakeups.json`` under the lock (and catch up meanwhile)."""
        with self.file.locked() as directory:
            os.close(self._writable(directory))
            fresh = self._compact(directory)
            if fresh is not None:
                os.close(fresh)

    def _writable(self, directory: int) -> int:
        """The journal open for appending, caught up, its torn tail cut, and any
        ``wakeups.json`` taken over."""
        try:
            fd = self.journal.open(directory, append=True)
        except FileNotFoundError:  # none yet (or removed: what it held is gone for all)
            self._forget()
            fd = self._new_generation(directory)
        except Shared:
            fd = self._unshared(directory)
        except Refused as exc:
            # A writer does not leave it for someone to remove: it moves it aside, says so
            # (once, on one line) and starts a new journal.
            kept = self._keep_aside(directory)
            log.warning(
                "unusable wake-up store: %s — %s; a new journal is started",
                exc.reason,  # not its remedy: the writer does not leave it to be removed
                "gone before it could be kept aside" if kept is None else f"kept aside as {kept}",
            )
            self._refused = None
            self._forget()
            fd = self._new_generation(directory)
        except OSError as exc:
            raise unwritable_state(self.path, exc) from None
        try:
            self._follow(fd)
            if self._size > self._offset:
                log.warning(
                    "cut a wake-up journal line torn by a crash (%d bytes) off %s",
                    self._size - self._offset,
                    self.path,
                )
                self._io(lambda: self.journal.cut(fd, self._offset))
                self._size = self._offset
            if self.file.present(directory):
                self._import(directory, fd)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _io(self, call: Callable[[], None]) -> None:
        try:
            call()
        except OSError as exc:
            raise StateFault(
                f"could not write the wake-up store {self.path}: {describe(exc)}"
            ) from None

    def _unshared(self, directory: int) -> int:
        """A journal with other names (a hard link planted to a file elsewhere) is read, never
        written through: its wake-ups go to a new generation under its name, the other
        file left as it was."""
        try:
            read = self.journal.open(directory)
            try:
                self._follow(read)
            finally:
                os.close(read)
        except OSError as exc:
            raise self._unreadable(exc) from None
        log.warning(
            "the wake-up journal %s has other names (a hard link to a file elsewhere): its "
            "wake-ups are written anew to a file of its own",
            self.path,
        )
        return self._new_generation(directory)

    def _keep_aside(self, directory: int) -> Path | None:
        try:
            return self.journal.keep_aside(directory)
        except OSError as exc:
            raise StateFault(
                f"could not keep the unusable wake-up journal {self.path} aside: {describe(exc)}"
            ) from None

    def _new_generation(self, directory: int) -> int:
        """Write the index as a new generation; the new journal, open for appending."""
        ops = self.index.stored()
        data = header() + b"".join(line(op) for op in ops)
        first = generation_of(data)
        self._io(lambda: self.journal.write_generation(directory, data))
        try:
            self.journal.sync_directory(directory)
        except OSError as exc:  # in place for every reader: only a power loss could undo it
            log.warning(
                "wrote the wake-up store %s but could not fsync its directory: %s",
                self.path,
                describe(exc),
            )
        try:
            fd = self.journal.open(directory, append=True)
            inode = os.fstat(fd).st_ino
        except OSError as exc:
            raise unwritable_state(self.path, exc) from None
        index = self.index
        self._forget(first, inode)
        self.index = index
        self._offset = self._size = len(data)
        self._lines = len(ops) + 1
        return fd

    def _write(self, fd: int, ops: list[Op]) -> None:
        """Append ``ops`` (one write), make them durable, and apply them to the index."""
        data = b"".join(line(op) for op in ops)
        try:
            self.journal.append(fd, data)
        except OSError as exc:
            # Cut a part written now if possible, else the next writer does: no newline ends
            # it, so no reader took it.
            with contextlib.suppress(OSError):
                self.journal.cut(fd, self._offset)
            raise StateFault(
                f"could not write the wake-up store {self.path}: {describe(exc)}"
            ) from None
        try:
            self.journal.sync(fd)
        except OSError as exc:
            # The lines are in place and every reader may have taken them: failing the call
            # now would tell the caller a change did not happen when it did (a taken wake-up
            # would then never fire). Only its durability against a power loss is in doubt.
            log.warning(
                "wrote the wake-up store %s but could not fsync it: %s", self.path, describe(exc)
            )
        for op in ops:
            self.index.apply(op)
        self._offset += len(data)
        self._size = self._offset
        self._lines += len(ops)

    def _undo(self, fd: int, ops: list[Op], inverse: list[Op], lost: StateFault | None) -> None:
        try:
            if lost is not None:  # (the journal could not be opened again)
                raise lost
            self._write(fd, inverse)
        except StateFault as exc:
            log.error(
                "the wake-up store %s: a change given up by its caller was made after all "
                "(wake-ups %s) and could not be undone: %s — the change made: %s",
                self.path,
                op_ids(ops),
                exc,
                dumps(ops),
            )
            return
        log.warning(
            "the wake-up store %s: a change given up by its caller was made after all "
            "(wake-ups %s), and undone",
            self.path,
            op_ids(ops),
        )

    def _import(self, directory: int, fd: int) -> None:
        entries, damaged = self.file.load(directory)
        ops = self.index.adds_of(entries)
        if ops:
            self._write(fd, ops)
        self.file.retire(directory, damaged)
        log.info("took over %d wake-ups from %s", len(ops), self.file.path)

    def _compaction_due(self) -> bool:
        """Whether the journal has grown well past the pending wake-ups, or holds damage."""
        return self._damaged or self._lines > 2 * (len(self.index) + self.index.kept) + SLACK

    def _compact(self, directory: int) -> int | None:
        """A new generation, when one is due (kept aside first if damaged): the new journal,
        open for appending (the caller closes it), or None if none was made and opened.
        Failing is no fault: the change is made."""
        if not self._compaction_due():
            return None
        try:
            if self._damaged:
                kept = self._keep_aside(directory)
                if kept is None:
                    log.warning("the damaged wake-up journal was gone before it could be kept")
                else:
                    log.warning("kept the damaged wake-up journal as found as %s", kept)
            return self._new_generation(directory)
        except StateFault as exc:
            log.warning("could not compact the wake-up journal %s: %s", self.path, exc)
            return None
