"""Running one turn: iterate the agent's events, measure, classify, log one line.

A turn ends in exactly one of four ways: completed, failed (a ``Failed`` event, a raising
iterator, or the routine's timeout), busy (a ``Failed`` event with the busy code: the turn never
started), or interrupted (a stop's grace ran out). Text deltas are handed to an optional
callback and otherwise dropped: the reply lives in the agent's session, not in our state, and
never in our logs.

Failure text from a model or a provider is folded onto one line before it is logged, so an
embedded newline cannot forge something that looks like a log record of its own.

A ``Failed`` event whose details are the empty string is no failure: the turn completes, as
in the original, which tests the details' truth (JavaScript's: ``""`` is false, a string of
blanks true, so details of whitespace alone still fail the turn, logged without a colon). The
last ``Failed`` event wins, so an empty one after a reasoned one completes the turn too. The
busy code is the exception: a busy event needs no words to mean busy. Details that are no
text (a ``py:`` agent's own value) are judged by Python's truth instead, and recorded as
their text (:func:`as_text`).

:class:`~trio_routines.agent.Usage` events add up to the turn's usage (the rule is
:mod:`trio_routines.usage`'s), kept whatever the outcome: a turn that failed or timed out
still spent what it reported. A bad value is a one-line warning and is left out; it never
changes the outcome.
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import AsyncIterator, Callable

import attrs
import trio

from .agent import Agent, Completed, Event, Failed, TextDelta, Usage
from .logs import one_line
from .records import Outcome
from .slots import setters
from .text import error_text
from .usage import Tally

log = logging.getLogger("trio_routines")

ACLOSE_LIMIT = 10.0  # seconds an agent's event stream may take to close after a cut-short turn


_NO_SCOPE = contextlib.nullcontext()  # reusable: it holds nothing


def fold(text: str) -> str:
    """``": <text on one line>"``, or ``""`` when there is nothing to say."""
    folded = one_line(text)
    return f": {folded}" if folded else ""


@attrs.frozen
class TurnResult:
    """How one turn ended: its outcome, its duration in ms, the failure text (when it failed),
    whether the session was busy (the turn never started), and whether the agent was asked
    at all (``began``: not when the session could not be held, its store not answering or
    this replica's hold on it lost: a wake-up taken for it is put back)."""

    outcome: Outcome
    ms: int
    failed: str | None = None  # details when the turn failed, or the agent's when it was busy
    busy: bool = False
    usage: Usage | None = None  # what the agent reported the turn spent, added up
    began: bool = True


def _elapsed_ms(started: float) -> int:
    return round((trio.current_time() - started) * 1000)


def _describe_seconds(seconds: float) -> str:
    return f"{seconds:g}s"


async def run_turn(
    agent: Agent,
    label: str,
    session: str,
    text: str,
    *,
    timeout: float | None = None,
    grace_scope: trio.CancelScope | None = None,
    on_text: Callable[[str], None] | None = None,
    ended_by: Callable[[], str | None] | None = None,
    quiet: bool = False,
    held: bool = True,
) -> TurnResult:
    """Run one turn of ``session`` and log its one outcome line.

    ``grace_scope`` is the scope a stop cancels once its grace runs out; the turn then counts
    as interrupted. ``ended_by``: why that scope was cancelled, when it was not a stop (the
    replica's holds lost), for the log line. ``timeout`` (seconds) cancels the turn and
    counts it as failed. ``quiet``: a retry whose busy session was said already (a deferred
    wake-up's): its start and a busy end are logged at DEBUG, any other end as always.
    ``held``: False when the session's turn is another's (``agent`` answers busy at once):
    nothing starts, so no start is logged, only the skip.
    """
    level = logging.DEBUG if quiet else logging.INFO
    if held and log.isEnabledFor(level):  # one call fewer a turn when INFO is not shown
        log.log(level, "%s firing (session=%s)", label, session)
    started = trio.current_time()
    failed: Failed | None = None
    raised: Exception | SystemExit | None = None
    tally: Tally | None = None  # made at the first usage reported: most turns report none
    bad = 0  # the bad values the turn's usage reported
    grace = grace_scope if grace_scope is not None else trio.CancelScope()
    # No timeout, no scope: a fire enters several already, each a few microseconds.
    timeout_scope = None if timeout is None else trio.move_on_at(started + timeout)
    with grace, timeout_scope or _NO_SCOPE:
        events: AsyncIterator[Event] | None = None
        try:
            # Inside the try: an agent that refuses the turn by raising from invoke() itself
            # fails the turn like one whose stream raises, and the claim still settles.
            events = agent.invoke(session, text)
            if not hasattr(events, "__aiter__"):  # a plain function's list, say
                if inspect.iscoroutine(events):  # an async def that returns: never run
                    events.close()
                raise TypeError(
                    f"the agent's invoke returned {type(events).__name__}, not an async "
                    "iterator of events (make it an async generator: async def with yield)"
                )
            async for event in events:
                if isinstance(event, Failed):
                    failed = event  # the last one wins; keep draining
                    if type(event.details) is not str or not isinstance(event.code, str | None):
                        failed = _text_failure(event)  # a py: agent's Failed(123)
                elif isinstance(event, TextDelta):
                    if on_text is not None:
                        said = event.text
                        on_text(said if type(said) is str else as_text(said))
                elif isinstance(event, Usage):
                    if tally is None:
                        tally = Tally()
                    for problem in tally.add(event):
                        bad += 1
                        if bad <= USAGE_WARNINGS:  # not one line per bad event
                            log.warning(
                                "%s: usage reported by the agent: %s", label, one_line(problem)
                            )
                elif not isinstance(event, Completed):
                    log.debug("%s: ignoring an unknown event %r", label, event)
            events = None  # exhausted: nothing to close
        except (Exception, SystemExit) as exc:  # ``sys.exit()`` (argparse's) ends the turn only
            raised = exc
        except BaseExceptionGroup as group:  # the agent's own nursery's: the same, grouped
            exited = _first_exit(group)
            if exited is None or group.split((Exception, SystemExit))[1] is not None:
                raise  # a cancel, an interrupt: not the turn's to keep
            raised = exited  # (a group of exceptions alone is an ExceptionGroup: caught above)
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                # Shielded so a cancelled turn still cleans up, and bounded so it cannot hang.
                with trio.CancelScope(shield=True), trio.move_on_after(ACLOSE_LIMIT):
                    try:
                        await aclose()
                    except (Exception, SystemExit) as exc:
                        raised = raised or exc
    if bad > USAGE_WARNINGS:
        log.warning(
            "%s: usage reported by the agent: %d more bad values dropped, not logged",
            label,
            bad - USAGE_WARNINGS,
        )
    ms = _elapsed_ms(started)
    why = ended_by() if ended_by is not None and grace.cancelled_caught else None
    result = _classified(label, ms, failed, raised, grace, timeout_scope, timeout, why, level)
    usage = None if tally is None else tally.total()
    return result if usage is None else attrs.evolve(result, usage=usage)


def _classified(
    label: str,
    ms: int,
    failed: Failed | None,
    raised: Exception | SystemExit | None,
    grace: trio.CancelScope,
    timeout_scope: trio.CancelScope | None,
    timeout: float | None,
    why: str | None = None,
    busy_level: int = logging.INFO,
) -> TurnResult:
    """The outcome of a turn that ended, logged on one line (``why``: what ended it, when
    its grace scope was cancelled by something other than a stop; ``busy_level``: a busy
    session's line's)."""
    if failed is not None and not failed.busy and not failed.details:
        failed = None  # a failure with nothing to say is none, as in the original (module doc)
    if grace.cancelled_caught:
        details = "interrupted by stop" if why is None else f"interrupted: {why}"
        extra = _fields(Outcome.INTERRUPTED, ms, details)
        why = why or "the stop ended it: its grace ran out, or a second stop came"
        log.warning("%s interrupted: %s (%dms)", label, why, ms, extra=extra)
        return TurnResult(Outcome.INTERRUPTED, ms, failed=details)
    if timeout_scope is not None and timeout_scope.cancelled_caught:
        details = f"timed out after {_describe_seconds(timeout or 0)}"
        extra = _fields(Outcome.FAILED, ms, details)
        log.error("%s failed (%dms)%s", label, ms, fold(details), extra=extra)
        return TurnResult(Outcome.FAILED, ms, failed=details)
    if raised is not None:
        if isinstance(raised, SystemExit):  # its text is its exit code: say what it was
            code = "" if raised.code is None else as_text(raised.code)
            details = f"the agent raised SystemExit({code})"
        else:
            details = as_text(raised) or type(raised).__name__
        extra = _fields(Outcome.FAILED, ms, details)
        log.error("%s errored (%dms)%s", label, ms, fold(details), extra=extra)
        return TurnResult(Outcome.FAILED, ms, failed=details)
    if failed is not None and failed.busy:
        extra = _fields(Outcome.SKIPPED, ms)
        log.log(busy_level, "%s: occurrence skipped (session busy) (%dms)", label, ms, extra=extra)
        return TurnResult(Outcome.SKIPPED, ms, failed=failed.details, busy=True)
    if failed is not None:
        extra = _fields(Outcome.FAILED, ms, failed.details)
        log.error("%s failed (%dms)%s", label, ms, fold(failed.details), extra=extra)
        return TurnResult(Outcome.FAILED, ms, failed=failed.details)
    if log.isEnabledFor(logging.INFO):  # the common end: build no fields for nobody
        log.info("%s completed (%dms)", label, ms, extra=_fields(Outcome.COMPLETED, ms))
    return _completed(ms)


def _first_exit(group: BaseExceptionGroup[BaseException]) -> SystemExit | None:
    """The first ``SystemExit`` of ``group``, however deep (None: it holds none)."""
    for found in group.exceptions:
        if isinstance(found, SystemExit):
            return found
        if isinstance(found, BaseExceptionGroup) and (inner := _first_exit(found)) is not None:
            return inner
    return None


#: The usage problems a turn logs one by one; the rest are counted in one line at its end.
USAGE_WARNINGS = 5


def as_text(value: object) -> str:
    """What an agent gave as text: a ``str`` as it is, anything else as ``str()`` makes it, or
    its type's name when even that fails (an integer past Python's digits limit, a ``__str__``
    that raises). Nothing an agent yields fails a turn's record, or its process."""
    if isinstance(value, str):
        return value
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__}>"


def _text_failure(event: Failed) -> Failed:
    """``event`` with details and code as text (a ``py:`` agent's ``Failed(123)``). Details
    that are no text fail the turn unless they are false in Python's sense (``None``, ``0``,
    empty): as an empty text, those mean no failure (module doc); true ones whose text is
    empty (``Failed(TimeoutError())``) are named by their type."""
    details: object = event.details
    try:
        failing = bool(details)
    except Exception:  # a value whose truth cannot be told: it said something
        failing = True
    said = (as_text(details) or f"<{type(details).__name__}>") if failing else ""
    return Failed(said, event.code if isinstance(event.code, str) else None)


_TURN_RESULT = setters(TurnResult, "outcome", "ms", "failed", "busy", "usage", "began")


def _completed(ms: int) -> TurnResult:
    """``TurnResult(Outcome.COMPLETED, ms)``, the common end, its fields set through their
    slots (:mod:`.slots`)."""
    result: TurnResult = object.__new__(TurnResult)
    set_outcome, set_ms, set_failed, set_busy, set_usage, set_began = _TURN_RESULT
    set_outcome(result, Outcome.COMPLETED)
    set_ms(result, ms)
    set_failed(result, None)
    set_busy(result, False)
    set_usage(result, None)
    set_began(result, True)
    return result


def _fields(outcome: Outcome, ms: int, error: str | None = None) -> dict[str, object]:
    """The outcome line's structured fields (see :mod:`trio_routines.logs`)."""
    fields: dict[str, object] = {"outcome": outcome.value, "ms": ms}
    if error is not None:
        fields["error"] = error_text(error)
    return fields
