"""The session gate: at most one turn per session inside one process.

A second turn for a session that already has one in flight is answered with a ``Failed``
event carrying the busy code, without the agent being asked at all. That is what makes
"busy" the one failure that is safe to retry: nothing started.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from .agent import SESSION_BUSY, Agent, Event, Failed


class SessionGate:
    """Wraps an agent so that its sessions never run two turns at once in this process."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self._busy: set[str] = set()

    def busy(self, session: str) -> bool:
        return session in self._busy

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        if session in self._busy:
            yield Failed(f"session {session} already has a turn in flight", SESSION_BUSY)
            return
        self._busy.add(session)
        try:
            events = self.agent.invoke(session, text)
            try:
                async for event in events:
                    yield event
            finally:
                aclose = getattr(events, "aclose", None)
                if aclose is not None:
                    await aclose()
        finally:
            self._busy.discard(session)
