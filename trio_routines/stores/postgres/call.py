"""A PostgreSQL store call as its thread and its caller share it (:class:`Call`), and the
faults a call ends in (:class:`CallFault`; :class:`UnconfirmedCall` when its commit was sent
and its answer did not come: the change may be made). See :mod:`.conn` for the bounds."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import psycopg

from ...errors import StateFault, Unconfirmed

log = logging.getLogger("trio_routines")


def connection_lost(exc: BaseException) -> bool:
    """The connection failed under a call (no error the server reported: those carry a
    SQLSTATE, and a commit the server refused made nothing)."""
    return isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None


class NoConnection(Exception):
    """No connection within the bound, or an attempt that began during the wait failed."""


def reason(exc: BaseException) -> str:
    """One line: the error class and its message, whitespace collapsed."""
    if isinstance(exc, NoConnection):
        return f"no connection ({exc}) — is the server up and the URL right?"
    primary = exc.diag.message_primary if isinstance(exc, psycopg.Error) else None
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = primary or (lines[0] if lines else "no details")
    if isinstance(exc, psycopg.errors.InvalidSchemaName):
        # The database answered; the schema the URL's search_path (options) names does not
        # exist there, and the store creates tables, never schemas.
        text += " — does the schema the URL's search_path names exist? Create it first"
    elif isinstance(exc, (psycopg.errors.QueryCanceled, psycopg.errors.LockNotAvailable)):
        # The server's own bounds (statement_timeout, lock_timeout: see the pool's options):
        # most often a lock some other session holds, which the message does not say.
        text += (
            " — a lock another session holds (a long transaction, an advisory lock), a table "
            "grown far past what the store keeps, or a server too busy"
        )
    return f"{type(exc).__name__}: {text[:300]}"


#: What became of a change whose caller gave up before it committed.
ROLLED_BACK = ": rolled back"
#: What a caller is told to do about a change whose commit was sent when the answer failed
#: to come (an add asked again could be made twice).
LOOK_FIRST = "it may be made: look before asking again"


class CallFault(StateFault):
    """A call that failed or outlived its bound; ``why`` is the reason alone, so a batch can
    report it once per caller, each naming its own slot."""

    def __init__(self, what: str, where: str, why: str) -> None:
        super().__init__(f"{what} in {where}: {why}")
        self.where = where
        self.why = why

    def retold(self, what: str) -> StateFault:
        return StateFault(f"{what} in {self.where}: {self.why}")


class UnconfirmedCall(CallFault, Unconfirmed):
    """A call cut off after its change's commit was sent: it may be made."""


class Call:
    """What a thread doing a store call may ask: has its caller given up? And what the call
    leaves for its caller, who may give up at any moment: its answer, or whether the commit
    was sent."""

    def __init__(self) -> None:
        self.abandoned = threading.Event()
        #: Set just before a change's commit goes out (and never cleared): a caller that gives
        #: up after it cannot know whether the change was made.
        self.committing = False
        #: Set by a change its thread commits whether or not its caller still waits (a
        #: deferral): a caller that leaves at any moment cannot say it was not made.
        self.carries_on = False
        #: How to undo, on a connection, what the call took for its caller (a wake-up, a
        #: claim), should the caller have given up before its answer was handed over.
        self.undo: Callable[[psycopg.Connection[Any]], None] | None = None
        #: What the undo gives back, for the line that says it could not be.
        self.undo_of = "a change"
        self._answer: tuple[Any] | None = None
        self._handing = threading.Lock()

    def unless_given_up(self, then: str = "") -> None:
        """Go on only if the caller still waits; else raise (nobody reads it): work that has
        not committed then rolls back (``then``: what became of it, for the message)."""
        if self.abandoned.is_set():
            raise StateFault(f"abandoned by its caller{then}")

    def before_commit(self) -> None:
        """The last step of a change before its commit: noted as committing, then rolled back
        (raised) if the caller gave up. Noted first: a caller giving up meanwhile either sees
        the note (and says "not confirmed") or is seen here (and nothing is made)."""
        self.committing = True
        self.unless_given_up(ROLLED_BACK)

    def hand_over(self, answer: object) -> bool:
        """Keep the thread's answer for its caller; False when the caller gave up first."""
        with self._handing:
            if self.abandoned.is_set():
                return False
            self._answer = (answer,)
            return True

    def give_up(self) -> tuple[Any] | None:
        """The caller's side: stop waiting, and take the answer if it was handed over by then
        (a call that finished as its deadline passed is not lost)."""
        with self._handing:
            self.abandoned.set()
            return self._answer


def undo(call: Call, conn: psycopg.Connection[Any]) -> None:
    """Run ``call``'s undo, if it has one, on ``conn``; a failure is logged (nobody waits)."""
    if call.undo is None:
        return
    try:
        call.undo(conn)
    except psycopg.Error as exc:
        undone_not(call, exc)


def undone_not(call: Call, exc: BaseException) -> None:
    """Say that ``call``'s undo could not be made: what it would have given back is lost."""
    log.error(
        "%s taken for a caller that had left could not be given back: %s",
        call.undo_of,
        reason(exc),
    )


def nothing(_: object) -> None:
    """What a thread started apart reports to: nobody (it logs its own failures)."""
