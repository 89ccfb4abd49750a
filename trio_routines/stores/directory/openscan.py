"""The open claims of a state directory, found a bounded piece at a time.

A claim is known to be open only by its content, and the state directory keeps no index of
them: finding every open claim means reading every kept claim (512 per routine). So the
store walks the claims across calls instead, each call doing at most ``budget`` units of
work (one unit: one directory listed or one claim file read), and remembers where it is:

* routines are visited in turn, one at a time, round and round;
* a routine's first visit (in this process) reads all its claims, newest first; later visits
  read only the claims newer than the newest one seen on its previous complete visit (its
  *floor*: claims are only ever added above the newest, and a settled claim never opens
  again), plus the ones found open before, which may have been settled since;
* an open claim that names a replica is returned on every complete visit until it is
  settled or pruned. A claim that names no replica (written by an older version or by the
  TypeScript scheduler, which take no holds) is never returned: nothing can tell whether
  its holder is gone, and the original reconciles only the newest claim, so as not to
  rewrite a window of older-format claims.

The walk's state is a slot name per routine and the open claims seen: memory of the order
of the open claims, not of the history. The first full walk after a start costs what the
history costs to read (routines x kept claims, spread over calls); each later walk, what was
claimed since.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Sequence

from ...claims import claim_names, parse_claim
from ...names import check_name
from ...records import Fire
from ..safefile import Refused, at, describe, open_dirs, read_file
from .claimbatch import CLAIM_LIMIT
from .claimfiles import ClaimFiles

log = logging.getLogger("trio_routines")


class OpenScan:
    """The walk's state; :meth:`step` runs in a worker thread, one at a time."""

    def __init__(self, files: ClaimFiles) -> None:
        self._files = files
        self._turns: deque[str] = deque()
        self._floor: dict[str, str] = {}
        self._open: dict[str, set[str]] = {}
        # The routine under way: its name, the newest claim when its visit began, and the
        # names still to read.
        self._visit: tuple[str, str | None, list[str]] | None = None
        #: The routines whose visit was given up, and why, as last said.
        self._said: dict[str, str] = {}
        #: The routines whose visit under way passed over a claim it could not read.
        self._skipped: set[str] = set()

    def step(self, routines: Sequence[str], budget: int) -> list[tuple[str, Fire]]:
        """Open claims naming a replica, found with at most ``budget`` units of work.

        Raises OSError when ``schedule/claims`` itself cannot be opened. A routine whose
        claims directory cannot be listed has its visit given up, and one of its claims that
        cannot be read is passed over, with a warning (once, until a visit of it reads it
        whole), its visit setting no floor: the walk goes on with the rest, whose open
        claims are still found."""
        for routine in routines:
            check_name(routine)
        try:
            os.close(open_dirs(self._files.root, ("schedule", "claims")))
        except FileNotFoundError:  # nothing claimed here (or all removed): start afresh
            self._floor.clear()
            self._open.clear()
            self._visit = None
            return []
        wanted = set(routines)
        for gone in [r for r in self._floor if r not in wanted]:
            self._forget(gone)
        known = set(self._turns)
        self._turns = deque(r for r in self._turns if r in wanted)
        self._turns.extend(r for r in routines if r not in known)
        if self._visit is not None and self._visit[0] not in wanted:
            self._visit = None
        found: list[tuple[str, Fire]] = []
        left = budget
        begun = 0
        while left > 0 and self._turns:
            if self._visit is None:
                if begun == len(self._turns):
                    break  # every routine visited once in this call
                routine = self._turns[0]
                self._turns.rotate(-1)
                begun += 1
                left -= 1
                self._visit = self._begin(routine)
                if self._visit is None:  # unlistable: given up, said
                    continue
            routine, top, todo = self._visit
            left, given_up = self._read(routine, todo, left, found)
            if given_up:  # its floor stays where its last whole visit left it
                self._visit = None
            elif not todo:
                if routine in self._skipped:  # a claim it could not read: read again later
                    self._skipped.discard(routine)
                else:
                    if top is not None:
                        self._floor[routine] = top
                    self._said.pop(routine, None)  # read whole: a new fault is said again
                self._visit = None
        return found

    def _unreadable(self, routine: str, exc: OSError) -> None:
        """Say that ``routine``'s visit is given up: once, then at DEBUG while it stays so."""
        said = describe(exc)
        level = logging.DEBUG if self._said.get(routine) == said else logging.WARNING
        self._said[routine] = said
        log.log(
            level,
            "the open claims of %s could not be checked (its next visit tries again): %s",
            routine,
            said,
        )

    def _forget(self, routine: str) -> None:
        self._floor.pop(routine, None)
        self._open.pop(routine, None)
        self._said.pop(routine, None)
        self._skipped.discard(routine)

    def _begin(self, routine: str) -> tuple[str, str | None, list[str]] | None:
        where = self._files.claim_dir(routine)
        try:
            directory = self._files.open_claims(routine)
        except FileNotFoundError:
            self._forget(routine)
            return routine, None, []
        except OSError as exc:  # a link, not a directory, unreadable...
            self._unreadable(routine, exc)
            return None
        try:
            names = claim_names(at(where, lambda: os.listdir(directory)))
        except OSError as exc:
            self._unreadable(routine, exc)
            return None
        finally:
            os.close(directory)
        floor = self._floor.get(routine)
        present = set(names)
        was_open = self._open.get(routine, set()) & present
        self._open[routine] = was_open
        todo = {name for name in names if floor is None or name > floor} | was_open
        # Read from the oldest end of the list: ``pop()`` takes the newest first.
        return routine, (names[-1] if names else None), sorted(todo)

    def _read(
        self, routine: str, todo: list[str], left: int, found: list[tuple[str, Fire]]
    ) -> tuple[int, bool]:
        """Read ``todo``'s claims, newest first, while ``left`` allows: what is left, and
        whether the visit was given up (the directory unreadable, or gone). A claim that
        cannot be read is passed over (said), and its visit, complete, sets no floor."""
        where = self._files.claim_dir(routine)
        opened = self._open.setdefault(routine, set())
        try:
            directory = self._files.open_claims(routine)
        except FileNotFoundError:  # gone since it was listed: read whole when it comes back
            self._forget(routine)
            return left, True
        except OSError as exc:
            self._unreadable(routine, exc)
            return left, True
        try:
            while todo and left > 0:
                name = todo.pop()
                left -= 1
                try:
                    raw = read_file(directory, name, where / name, CLAIM_LIMIT)
                except (FileNotFoundError, Refused):
                    opened.discard(name)  # pruned, or no claim file at all: nothing to settle
                    continue
                except OSError as exc:  # passed over; the visit reads on, and sets no floor
                    self._unreadable(routine, exc)
                    self._skipped.add(routine)
                    continue
                fire = parse_claim(name, raw.decode("utf-8", errors="replace"), str(where / name))
                if fire.is_open and fire.replica is not None:
                    opened.add(name)
                    found.append((routine, fire))
                else:
                    opened.discard(name)
        finally:
            os.close(directory)
        return left, False
