"""The error tree.

Every error this package raises at a user derives from :class:`TrioRoutinesError`, and also
from the builtin it naturally is, so ``except ValueError`` keeps working for callers that do
not know us. Third-party errors (zoneinfo, cattrs, psycopg, OSError from the state directory)
are translated at the boundary where they happen; messages are one line and name the thing.
"""

from __future__ import annotations


class TrioRoutinesError(Exception):
    """Base class of every error raised by trio_routines."""


class InvalidCron(TrioRoutinesError, ValueError):
    """Raised by the cron module for an expression or time zone it refuses.

    The message is one line naming the offending field (e.g. ``minute field: 61 is out of
    range 0-59``); :func:`trio_routines.cron_error` returns the same text instead of raising.
    """


class UnsafeName(TrioRoutinesError, ValueError):
    """Raised wherever a routine name could leave the claims directory (``..``, ``a/b``)."""


class InvalidRoutine(TrioRoutinesError, ValueError):
    """Raised by the routine loader for a broken routine file; the message names the file."""


class StateFault(TrioRoutinesError, OSError):
    """Raised by a store when the state cannot be read or written.

    Before a claim exists this never burns a slot: the scheduler logs it and moves on, and the
    same slot can still fire once the fault is repaired.
    """


class Unconfirmed(StateFault):
    """A change cut off after it may have been made: its commit had been sent when the answer
    failed to come (a PostgreSQL server whose commits stall, an answer lost on the way), so
    nobody can say whether it was. Asking again is harmless for a pause, a resume or a
    removal; an add asked again could be made twice: look for it first.
    """


class InvalidWakeup(TrioRoutinesError, ValueError):
    """Raised for a wake-up request that fails a guardrail; the message is model-facing.

    ``public``: the same refusal without any wake-up's prompt, for a surface that shows no
    prompts (the HTTP surface); the message itself when it quotes none.
    """

    def __init__(self, message: str, *, public: str | None = None) -> None:
        super().__init__(message)
        self.public = message if public is None else public


class InvalidAgent(TrioRoutinesError, ValueError):
    """Raised by ``agent_from_spec`` and the built-in agents for a spec they cannot use.

    The message is one line naming the spec (an ``http(s)://`` URL only by its origin): in
    what it carries from outside (the spec itself, the words of a module's or a factory's own
    error), every control character is shown escaped, a line break as ``\\x0a``, so that two
    specs never read alike.
    """

    def __init__(self, message: str) -> None:
        from .text import visible  # a leaf module, imported by nearly every other

        super().__init__(visible(message))


class AgentUnavailable(InvalidAgent):
    """An :class:`InvalidAgent` for a ``py:`` agent whose module did not import, or whose
    factory raised: not the spec's words, which may name it rightly, but what loading it met
    (a module not installed yet, a service its factory reached for), which may pass. The
    command line exits 1 for it, where a spec it cannot use at all is a usage error (2)."""


class InvalidOption(TrioRoutinesError, ValueError):
    """Raised by :class:`~trio_routines.Scheduler` for an option value it refuses (a NaN or
    negative number of seconds); the message names the option."""
