"""Changing the routines of a running scheduler: :meth:`Scheduler.update_routines`.

The rules, so that a reload can never fire a slot twice nor back-fire:

* a **new** routine starts a cron loop under first-boot rules: its first slot is the next one
  after now (or after its newest claim, if one exists from an earlier life and lies ahead),
  and the store keeps when it was first armed, unless it kept that already (a routine
  removed and added again keeps its first instant, and the slots it passed while it was
  not loaded are recorded as a gap, ``removed``: none is caught up);
* a **removed** routine's loop ends; a fire of it in flight finishes and settles first;
* a **changed** routine (cron, tz, timeout, prompt, any field) is re-armed: its old loop ends
  as a removed one does, and the new one waits for that fire to settle, then arms from its
  newest claim and now, whichever is later -- no catch-up, no storm;
* an **unchanged** routine keeps its loop untouched.

Loops notice through identity: a loop runs while ``runtime.routines[name]`` is the very object it
was started with, and every sleeping loop is woken to look (see :mod:`.loops`); an added or
changed routine is loaded as a copy of the one given, so that no older loop holds it. A reload
from a directory (``SIGHUP`` in ``serve``) keeps the loaded version of a routine whose file is now
broken, and says why. It changes nothing, and says why, when the directory is gone, cannot be
read, or holds no routine while some are loaded -- a directory swapped for an empty one, a
mount that did not happen -- unless a file named :data:`NO_ROUTINES` in it says that empty is
meant: only then does a reload remove every routine.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import attrs
import trio

from ..errors import InvalidRoutine
from ..records import GapReason
from ..routinedir import LoadResult, load_routines, passed_over
from ..routines import Routine
from .arming import Arming
from .clock import ClockWatch
from .gaps import GapRecording
from .loops import CronLoops
from .options import checked_routines
from .state import Runtime, log

NO_ROUTINES = ".no-routines"
"""The file that makes an empty routines directory mean "run none" to a reload."""


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


class Reload:
    """Changes the loaded routines; owns the broken files the last reload kept.

    Collaborators: the :class:`Runtime` (the routines it replaces, the nurseries, stop,
    metrics), the :class:`Arming` (what it disarms), the :class:`ClockWatch` (sleepers to
    wake, the watch to start), the :class:`CronLoops` (the loops it starts) and the
    :class:`GapRecording` (when a new routine was first armed).
    """

    def __init__(
        self,
        runtime: Runtime,
        arming: Arming,
        clock: ClockWatch,
        cron: CronLoops,
        gaps: GapRecording,
        *,
        external_clock: bool,
        wakeups: bool,
    ) -> None:
        self._runtime = runtime
        self._arming = arming
        self._clock = clock
        self._cron = cron
        self._gaps = gaps
        self._external_clock = external_clock
        self._wakeups = wakeups
        #: Broken files whose previously loaded version the last reload kept running.
        self.kept_broken: tuple[str, ...] = ()
        #: Every routine file the last reload could not load: skipped (a new one), or its
        #: previous version kept. The next start refuses to start while any is so.
        self.broken: tuple[str, ...] = ()

    def update(self, routines: Iterable[Routine]) -> RoutineChanges:
        """Replace the loaded routines by ``routines``: a new one arms from now, a removed one
        stops once its fire in flight settled, a changed one re-arms from its newest claim or
        now, whichever is later; nothing fires twice or back-fires.

        Raises :class:`InvalidRoutine`, changing nothing, when two share a name or one is not
        a :class:`Routine`, as the constructor does. Works on a scheduler that is not running
        (nothing is armed then) and with an external clock (the routines change; no loop is
        started).
        """
        wanted = checked_routines(routines)
        runtime = self._runtime
        old = runtime.routines
        added = tuple(n for n in wanted if n not in old)
        removed = tuple(n for n in old if n not in wanted)
        changed = tuple(n for n in wanted if n in old and old[n] != wanted[n])
        # An unchanged routine keeps its object, so that its loop goes on untouched; an added
        # or changed one is loaded as a copy, an object no loop has: the caller's own may be
        # the one an older loop of that name still holds, not yet woken to see it removed
        # (a routine removed and added again, or changed and changed back), which would then
        # go on beside the new one.
        runtime.routines = current = {
            n: old[n] if n in old and n not in changed else attrs.evolve(r)
            for n, r in wanted.items()
        }
        for name in removed + changed:
            self._arming.forget(name)
        self._clock.wake_sleepers()  # the loops of removed and changed routines end
        if runtime.nursery is not None and not self._external_clock:  # running
            for name in added:
                if current[name].cron is not None:
                    runtime.metrics.armed(name, runtime.now())  # its series exist from now on
        loops = runtime.loop_nursery
        if loops is not None and not self._external_clock and not runtime.stopping.value:
            armed = [name for name in added if current[name].cron is not None]
            if armed:  # when each was first armed, for a later boot's gaps (never moved)
                loops.start_soon(self._gaps.first_armed, armed)
            for name in added + changed:
                routine = current[name]
                if routine.cron is not None:
                    # The slots that pass while its previous version's fire is still in flight
                    # (a change, or a removal and an add, during its turn) are that turn's
                    # overlap, as its own loop would have recorded them. With none in flight, a
                    # changed one passed nothing: it arms from its newest claim and now; one
                    # added again passed the slots since its earlier life's newest claim
                    # (or gap) while it was not loaded.
                    overlapped = name in self._cron.firing
                    passed = (
                        GapReason.OVERLAP
                        if overlapped
                        else GapReason.REMOVED
                        if name in added
                        else None
                    )
                    self._cron.start(loops, routine, None, rearm=True, passed=passed)
                    if not self._wakeups:
                        self._clock.start(loops)
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

    async def reload(self, directory: str | os.PathLike[str]) -> RoutineChanges:
        """Load ``directory`` again and :meth:`update_routines` from it (``SIGHUP`` in serve).

        A file that does not load now keeps the version of its routine loaded before (logged
        as an ERROR with the reason); a directory that is gone or cannot be read changes
        nothing, and neither does one without a routine while some are loaded, unless it holds
        a file named :data:`NO_ROUTINES` (each an ERROR saying so).
        """
        try:
            # Left to its thread when cancelled (a stop during a reload of a directory that
            # does not answer): it only reads, and what it reads is then dropped.
            result, meant_empty = await trio.to_thread.run_sync(
                _load_again, directory, abandon_on_cancel=True
            )
        except InvalidRoutine as exc:
            log.error("reload: %s — the routines loaded before keep running", exc)
            return RoutineChanges()
        if result.others:
            log.info("reload: %s", passed_over(result.others))
        routines = {r.name: r for r in result.routines}
        kept = []
        for failure in result.failures:
            name = os.path.basename(failure.file).removesuffix(".md")
            previous = self._runtime.routines.get(name)
            if previous is not None and name not in routines:
                routines[name] = previous
                kept.append(name)
                log.error("reload: %s — keeping the version loaded before", failure)
            else:
                log.error("reload: %s — skipped", failure)
        self.broken = tuple(failure.file for failure in result.failures)
        if not routines and self._runtime.routines and not meant_empty:
            log.error(
                "reload: %s holds no routine — not removing all %d loaded (to run none, "
                "create %s in it); the routines loaded before keep running",
                os.fspath(directory),
                len(self._runtime.routines),
                NO_ROUTINES,
            )
            return RoutineChanges()
        changes = self.update(routines.values())
        self.kept_broken = tuple(kept)  # trio_routines_routine_files_kept_broken
        if not changes:
            log.info("reload: no routine changed")
        return attrs.evolve(changes, kept=tuple(kept))


def _load_again(directory: str | os.PathLike[str]) -> tuple[LoadResult, bool]:
    """The routines of ``directory``, and whether it says that holding none is meant.

    Unlike :func:`load_routines` (and a first start), a reload reads an absent directory as an
    error: it is far likelier a mistake (a rename, a swap, an unmounted volume) than a wish.
    """
    base = os.fspath(directory)
    try:
        os.stat(base)
    except FileNotFoundError:
        raise InvalidRoutine(f"{base}: the routines directory is gone") from None
    except OSError:
        pass  # load_routines says what is wrong with it
    result = load_routines(base)
    return result, os.path.lexists(os.path.join(base, NO_ROUTINES))
