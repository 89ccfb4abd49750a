"""The session gate: at most one turn per session inside one process.

A second turn for a session that already has one in flight is answered with a ``Failed``
event carrying the busy code, without the agent being asked at all. That is what makes
"busy" the one failure that is safe to retry: nothing started.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import trio

from .agent import SESSION_BUSY, Agent, Event, Failed


class _Busy:
    """The agent a busy session gets instead of the real one."""

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        yield Failed(f"session {session} already has a turn in flight", SESSION_BUSY)


class SessionGate:
    """Wraps an agent so that its sessions never run two turns at once in this process."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self._busy: dict[str, float] = {}  # session -> Trio time its turn started

    def busy(self, session: str) -> bool:
        return session in self._busy

    def held(self) -> dict[str, float]:
        """The sessions with a turn in flight, each with the Trio time its turn started."""
        return dict(self._busy)

    @contextmanager
    def hold(self, session: str) -> Iterator[Agent]:
        """The agent to run one turn of ``session`` with: the real one, or a busy answer."""
        if session in self._busy:
            yield _Busy()
            return
        self._busy[session] = trio.current_time()
        try:
            yield self.agent
        finally:
            self._busy.pop(session, None)

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
