"""The boot as :meth:`Scheduler.run` starts it and a stop sees it: completed, or given up.

A stop during the boot gives it up at once: its store calls are cut off as their own deadlines
would cut them (none leaves a record half written), and what the boot did not reach, the next
boot does. A stop can also come where no await of the boot is left to cancel it (while it
arms, which awaits nothing): the boot then ends all the same, and counts as given up, so that
no loop starts and the host is told nothing runs.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from datetime import datetime

import trio

from .arming import Arming
from .boot import Boot
from .clock import ClockWatch
from .members import MemberWatch
from .membership import Membership


class Starting:
    """Joins the store, notes the replicas that died, reconciles and plans (the
    :class:`Boot`), and arms each routine's first slot, under a cancel scope a stop cancels.

    Collaborators: the :class:`Membership` (the presence, left when the run's stack ends),
    the :class:`MemberWatch`, the :class:`Boot`, the :class:`Arming` and the
    :class:`ClockWatch` (its offset noted once armed). It owns its scope and whether the boot
    completed.
    """

    def __init__(
        self,
        membership: Membership,
        members: MemberWatch,
        boot: Boot,
        arming: Arming,
        clock: ClockWatch,
        *,
        plan: bool,
    ) -> None:
        self._membership = membership
        self._members = members
        self._boot = boot
        self._arming = arming
        self._clock = clock
        self._plan = plan
        self._scope = trio.CancelScope()
        #: Whether the boot completed (its loops may start); never again once given up.
        self.completed = False

    def give_up(self) -> None:
        """A stop: the boot ends at once (or is given up as it ends; a no-op after it)."""
        self._scope.cancel()

    async def run(self, joined: AsyncExitStack) -> dict[str, datetime] | None:
        """Each routine's first slot, or None when a stop gave the boot up. The store's
        presence is entered on ``joined``, which the caller leaves."""
        with self._scope:
            await joined.enter_async_context(self._membership.present())
            await self._members.note_dead_members()
            first_due = await self._boot.run(plan=self._plan)  # reads the pauses
            for name, due in first_due.items():
                self._arming.arm(name, due)
            self._clock.note_offset()
        if self._scope.cancel_called:
            return None
        self.completed = True
        return first_due
