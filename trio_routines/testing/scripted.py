"""A scripted agent for tests: turns that complete, fail, report busy, hang or raise on cue,
and a record of every turn it was asked for."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import datetime

import attrs
import trio

from ..agent import SESSION_BUSY, Completed, Event, Failed, TextDelta, Usage
from ..context import FireContext, current_fire


@attrs.frozen
class Complete:
    """Finish the turn after ``duration`` seconds, having streamed ``reply`` (and reported
    ``usage``, when given)."""

    duration: float = 0.0
    reply: str = "ok"
    usage: Usage | None = None


@attrs.frozen
class Fail:
    """Fail the turn with ``details`` (and ``code``) after ``duration`` seconds, having
    reported ``usage``, when given."""

    details: str = "it failed"
    code: str | None = None
    duration: float = 0.0
    usage: Usage | None = None


@attrs.frozen
class Hang:
    """Never finish: only a cancellation ends this turn."""


@attrs.frozen
class Raise:
    """Let the event iterator raise ``error`` after ``duration`` seconds."""

    error: Exception
    duration: float = 0.0


def Busy() -> Fail:
    """Report the session busy, as an agent with its own lease would."""
    return Fail("the session already has a turn in flight", SESSION_BUSY)


Behaviour = Complete | Fail | Hang | Raise


@attrs.frozen
class Turn:
    """One turn a :class:`ScriptedAgent` was asked for: its session, text, Trio time, wall
    time (when the agent has a clock) and :func:`~trio_routines.current_fire` at its start."""

    session: str
    text: str
    started_at: float  # Trio's clock
    wall: datetime | None = None
    fire: FireContext | None = None  # why it ran: current_fire() at its start


class ScriptedAgent:
    """An agent that behaves on cue and remembers every turn it was asked for.

    ``default`` applies to every turn; :meth:`script` queues one-off behaviours for a session
    (or for any session with ``session=None``), consumed in order. ``on_turn`` is called at the
    start of each turn, e.g. to stop the scheduler from inside one.

    ``turns`` lists every turn asked for, in order, as a :class:`Turn` (its ``fire`` says why
    it ran: a routine's slot, a wake-up, a run); ``finished``, those whose events all went
    out (neither cut short nor failing by raising).
    """

    def __init__(
        self,
        default: Behaviour | None = None,
        *,
        wall: Callable[[], datetime] | None = None,
        on_turn: Callable[[Turn], None] | None = None,
    ) -> None:
        self.default: Behaviour = default or Complete()
        self.wall = wall
        self.on_turn = on_turn
        self.turns: list[Turn] = []
        self.finished: list[Turn] = []
        self._queued: dict[str | None, list[Behaviour]] = {}

    def script(self, *behaviours: Behaviour, session: str | None = None) -> None:
        """Queue ``behaviours`` for the next turns (of ``session`` only, when given)."""
        self._queued.setdefault(session, []).extend(behaviours)

    def _next(self, session: str) -> Behaviour:
        for key in (session, None):
            queue = self._queued.get(key)
            if queue:
                return queue.pop(0)
        return self.default

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        wall = self.wall() if self.wall else None
        turn = Turn(session, text, trio.current_time(), wall, current_fire())
        self.turns.append(turn)
        if self.on_turn is not None:
            self.on_turn(turn)
        behaviour = self._next(session)
        if isinstance(behaviour, Hang):
            await trio.sleep_forever()
        await trio.sleep(behaviour.duration)
        if isinstance(behaviour, Raise):
            raise behaviour.error
        if isinstance(behaviour, Complete | Fail) and behaviour.usage is not None:
            yield behaviour.usage
        if isinstance(behaviour, Fail):
            yield Failed(behaviour.details, behaviour.code)
        else:
            yield TextDelta(behaviour.reply)
            yield Completed()
        self.finished.append(turn)

    def sessions(self) -> list[str]:
        """The session of every turn so far, in order."""
        return [t.session for t in self.turns]
