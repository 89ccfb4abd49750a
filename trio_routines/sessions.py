"""The session gate: at most one turn per session inside one process.

Across the replicas sharing a store, the scheduler adds the store's session holds
(``scheduler/holds.py``).

A second turn for a session that already has one in flight is answered with a ``Failed``
event carrying the busy code, without the agent being asked at all. That is what makes
"busy" the one failure that is safe to retry: nothing started.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import trio

from .agent import SESSION_BUSY, Agent, Event, Failed


class _Busy:
    """The agent a busy session gets instead of the real one."""

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        yield Failed(f"session {session} already has a turn in flight", SESSION_BUSY)


_BUSY = _Busy()


class Hold:
    """What ``with gate.hold(session) as agent:`` enters: the session held for the block.

    A class rather than a generator: every fire enters one (see ``scheduler/state.py``).
    """

    __slots__ = ("_gate", "_held", "_session", "refused")

    def __init__(self, gate: SessionGate, session: str) -> None:
        self._gate = gate
        self._session = session
        self._held = False
        self.refused = False  # the session had a turn in flight here: the busy answer is ours

    def __enter__(self) -> Agent:
        busy = self._gate._busy
        if self._session in busy:
            self.refused = True
            return _BUSY
        busy[self._session] = trio.current_time()
        self._held = True
        return self._gate.agent

    def __exit__(self, *exc_info: object) -> None:
        if self._held:
            self._held = False
            # No default: a holder put its session there itself and only it takes it out, so a
            # missing entry is a broken gate, to be seen rather than stepped over.
            del self._gate._busy[self._session]


class SessionGate:
    """Wraps an agent so that its sessions never run two turns at once in this process."""

    #: The agent a busy session gets: a ``Failed`` event with the busy code, nothing started.
    busy_agent: Agent = _BUSY

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self._busy: dict[str, float] = {}  # session -> Trio time its turn started

    def busy(self, session: str) -> bool:
        return session in self._busy

    def held(self) -> dict[str, float]:
        """The sessions with a turn in flight, each with the Trio time its turn started."""
        return dict(self._busy)

    def hold(self, session: str) -> Hold:
        """The agent to run one turn of ``session`` with: the real one, or a busy answer."""
        return Hold(self, session)

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        """The gated agent as an agent of its own, for hosts that want one."""
        with self.hold(session) as agent:
            events = agent.invoke(session, text)
            try:
                async for event in events:
                    yield event
            finally:
                aclose = getattr(events, "aclose", None)
                if aclose is not None:
                    await aclose()
