"""Changing the routines of a running scheduler: :meth:`Scheduler.update_routines`.

The rules, so that a reload can never fire a slot twice nor back-fire:

* a **new** routine starts a cron loop under first-boot rules: its first slot is the next one
  after now (or after its newest claim, if one exists from an earlier life and lies ahead);
* a **removed** routine's loop ends; a fire of it in flight finishes and settles first;
* a **changed** routine (cron, tz, timeout, prompt, any field) is re-armed: its old loop ends
  as a removed one does, and the new one waits for that fire to settle, then arms from its
  newest claim and now, whichever is later -- no catch-up, no storm;
* an **unchanged** routine keeps its loop untouched.

Loops notice through identity: a loop runs while ``self.routines[name]`` is the very object it
was started with, and every sleeping loop is woken to look (see :mod:`.loops`). A reload from a
directory (``SIGHUP`` in ``serve``) keeps the loaded version of a routine whose file is now
broken, and says why.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable

import attrs
import trio

from ..errors import InvalidRoutine
from ..routines import Routine, load_routines
from .loops import CronLoops
from .state import log


@attrs.frozen
class RoutineChanges:
    """What :meth:`Scheduler.update_routines` changed, by routine name.

    ``added``, ``changed`` and ``removed`` name routines; ``kept`` names the broken files of a
    reload from a directory whose previously loaded version still runs. True when a routine
    was added, changed or removed.
    """

    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()  # broken files whose previously loaded version still runs

    def __bool__(self) -> bool:
        return bool(self.added or self.changed or self.removed)


class Reload(CronLoops):
    def update_routines(self, routines: Iterable[Routine]) -> RoutineChanges:
        """Replace the loaded routines by ``routines``: a new one arms from now, a removed one
        stops once its fire in flight settled, a changed one re-arms from its newest claim or
        now, whichever is later; nothing fires twice or back-fires.

        Raises :class:`InvalidRoutine`, changing nothing, when two share a name. Works on a
        scheduler that is not running (nothing is armed then) and with an external clock
        (the routines change; no loop is started).
        """
        wanted: dict[str, Routine] = {}
        for routine in routines:
            if routine.name in wanted:
                raise InvalidRoutine(f"two routines are named {routine.name!r}")
            wanted[routine.name] = routine
        old = self.routines
        added = tuple(n for n in wanted if n not in old)
        removed = tuple(n for n in old if n not in wanted)
        changed = tuple(n for n in wanted if n in old and old[n] != wanted[n])
        # An unchanged routine keeps its object, so that its loop goes on untouched.
        self.routines = {
            n: old[n] if n in old and n not in changed else r for n, r in wanted.items()
        }
        for name in removed + changed:
            self._next_due.pop(name, None)
            self._armed.pop(name, None)
            self._future.pop(name, None)
        self._wake_sleepers()  # the loops of removed and changed routines end
        if self._nursery is not None and not self.external_clock:  # running
            for name in added:
                if self.routines[name].cron is not None:
                    self.metrics.armed(name, self.now())  # its series exist from now on
        loops = self._loop_nursery
        if loops is not None and not self.external_clock and not self._stopping.value:
            for name in added + changed:
                routine = self.routines[name]
                if routine.cron is not None:
                    loops.start_soon(functools.partial(self._cron_loop, routine, None, rearm=True))
                    if not self.wakeups:
                        self._start_clock_watch()
        changes = RoutineChanges(added, changed, removed)
        if changes:
            log.info(
                "routines updated: %s",
                "; ".join(
                    f"{what} {', '.join(names)}"
                    for what, names in (
                        ("added", added),
                        ("changed", changed),
                        ("removed", removed),
                    )
                    if names
                ),
            )
        return changes

    def _start_clock_watch(self) -> None:
        if not self._watching and self._loop_nursery is not None:
            self._watching = True
            self._loop_nursery.start_soon(self._watch_clock)

    async def reload_routines(self, directory: str | os.PathLike[str]) -> RoutineChanges:
        """Load ``directory`` again and :meth:`update_routines` from it (``SIGHUP`` in serve).

        A file that does not load now keeps the version of its routine loaded before (logged
        as an ERROR with the reason); a directory that cannot be read changes nothing.
        """
        try:
            result = await trio.to_thread.run_sync(load_routines, directory)
        except InvalidRoutine as exc:
            log.error("reload: %s — the routines loaded before keep running", exc)
            return RoutineChanges()
        routines = {r.name: r for r in result.routines}
        kept = []
        for failure in result.failures:
            name = os.path.basename(failure.file).removesuffix(".md")
            previous = self.routines.get(name)
            if previous is not None and name not in routines:
                routines[name] = previous
                kept.append(name)
                log.error("reload: %s — keeping the version loaded before", failure)
            else:
                log.error("reload: %s — skipped", failure)
        changes = self.update_routines(routines.values())
        self._kept_broken = tuple(kept)  # trio_routines_routine_files_kept_broken
        if not changes:
            log.info("reload: no routine changed")
        return attrs.evolve(changes, kept=tuple(kept))
