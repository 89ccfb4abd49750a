"""The runtime: cron loops and a wake loop in one Trio nursery.

Theory of operation
-------------------

Two clocks, never mixed. *When to wake up* is Trio's clock (a deadline on it, kept by one
timer for every loop: ``sleepers``); *what time it is, which slot* is the injected wall
clock. Each cron routine has one task::

    due = next slot after (newest claim's firedAt, or now on a first boot)
    loop:
        sleep towards due, at most 6 h at a time, re-reading the wall clock after every wake
        claim due (the grid instant, never now) -> run the turn -> settle      [shielded]
        due = next slot after now                                              [wall clock]

so a backward jump never fires early (the loop just sleeps again), a forward jump past a slot
fires it once, and slots that pass during a slow turn are skipped, never queued. A catch-up is
simply a first ``due`` that is already past: it fires at once, once.

A fire (claim -> turn -> settle) runs in a shielded cancel scope, so cancelling the loops never
leaves a claim unsettled by our own doing. The shield has a bound: ``stop(grace)`` cancels the
loops at once, then gives in-flight turns ``grace`` seconds before cancelling them through
their own scope and settling them ``interrupted``. A process that dies instead leaves its
claim unsettled, and the next boot records it as interrupted -- never replayed.

After every sleep a loop compares how far the wall clock and Trio's clock moved; the offset
between them is shared, so one jump is logged once however many loops notice it. The wake loop
(or, without wake-ups, a clock watch) looks every poll interval, and a jump it sees wakes every
sleeping cron loop to re-read the wall clock: a clock set forward past a daily slot fires it
within a poll, not at the end of the 6-hour sleep.

Nothing outside the process is trusted to answer: every store call has a deadline of ours,
pulled in to the stop's grace plus a small margin once a stop begins; a settle that fails is
retried with a back-off before its outcome is given up and counted; a loop that dies of an
unexpected exception is restarted after a back-off, re-armed from its newest claim.

Where each part lives (each an object owning its state, handed its collaborators; see
docs/design.md, Runtime): ``state`` (the small shared runtime record, the grace, the records
and errors), ``calls`` (bounded store calls, settle retries), ``membership`` (joined to the
store), ``turning`` (one turn of a session: held, under the grace, traced, its spending
recorded), ``fire`` (claim -> turn -> settle), ``runs`` (a turn now, unclaimed), ``wakecalls``
(wake-ups asked for through the scheduler), ``loops`` (one cron loop per routine),
``arming`` (next slots, future claims), ``sleepers`` (where loops sleep, woken by one timer),
``wake`` (the wake loop), ``clock`` (the jump watch), ``boot`` (reconcile, plan the first
slots), ``members`` (heartbeat, dead members), ``reload``, ``restarts``, ``parts`` (the wiring:
which part is handed which), ``report`` (statistics, metrics) and ``service`` (the
:class:`Scheduler` that holds them: run, stop, the public methods).
"""

from __future__ import annotations

import typing

from .._lazy import lazy_names as _lazy_names

if typing.TYPE_CHECKING:  # imported on first use (below): `import trio_routines` stays cheap
    from .reload import RoutineChanges as RoutineChanges
    from .service import Scheduler as Scheduler
    from .service import serve_routines as serve_routines
    from .state import DEFAULT_GRACE as DEFAULT_GRACE
    from .state import JUMP_THRESHOLD as JUMP_THRESHOLD
    from .state import MAX_WAIT as MAX_WAIT
    from .state import FireResult as FireResult
    from .state import NotOnGrid as NotOnGrid
    from .state import NotYetDue as NotYetDue
    from .state import Statistics as Statistics
    from .state import Stopping as Stopping
    from .state import UnknownRoutine as UnknownRoutine
    from .state import on_grid as on_grid
    from .state import system_now as system_now

# Each public name, and the module it comes from: imported on first use (see _lazy.py).
_LAZY = {
    "RoutineChanges": ".reload",
    "Scheduler": ".service",
    "serve_routines": ".service",
    "DEFAULT_GRACE": ".state",
    "JUMP_THRESHOLD": ".state",
    "MAX_WAIT": ".state",
    "FireResult": ".state",
    "NotOnGrid": ".state",
    "NotYetDue": ".state",
    "Statistics": ".state",
    "Stopping": ".state",
    "UnknownRoutine": ".state",
    "on_grid": ".state",
    "system_now": ".state",
}


__getattr__, __dir__ = _lazy_names(__name__, _LAZY, globals())
