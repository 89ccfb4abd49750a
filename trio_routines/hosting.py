"""Serving a scheduler as a service: the runtime, the HTTP surface and the signals, together.

A host that only wants "run until SIGTERM, then stop gracefully" calls :func:`serve` instead of
wiring a signal receiver, the HTTP server and the shutdown order by hand. The order is the
command line's: the scheduler boots first; the HTTP surface starts once it runs; the first
signal stops the scheduler with the grace (new fires are answered 503, in-flight turns get the
grace to finish, then are interrupted and settled), a second signal stops it at once; once the
last turn has settled and the HTTP server has answered the requests that waited for one
(:class:`Answering`), the signal watch ends and :func:`serve` returns.
The signals are watched from before the boot: one during the boot gives the boot up at once
(each of its store calls may otherwise take the store timeout), and nothing is served.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from functools import partial
from typing import Any

import trio

from .errors import InvalidOption
from .scheduler import Scheduler
from .scheduler.options import checked_grace
from .tickets import share_key

log = logging.getLogger("trio_routines")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


async def watch_signals(
    signals: AsyncIterator[int],
    scheduler: Scheduler,
    grace: float,
    during_boot: bool = False,
    answering: Answering | None = None,
) -> None:
    """The first signal stops ``scheduler`` with ``grace``; another one stops it at once,
    and cuts ``answering``'s surfaces short (:meth:`Answering.cut`).

    ``during_boot``: watched from the start of the scheduler's boot; a signal before the boot
    completed (``Scheduler.booted``) stops it there, and the boot is given up at once."""
    remaining = grace
    seen = 0
    async for signum in signals:
        seen += 1
        if seen > 1 and answering is not None:
            answering.cut()
        name = signal.Signals(signum).name
        if during_boot and not scheduler.booted:
            log.info("%s received during the boot — stopping before anything is armed", name)
        elif remaining > 0:
            log.info("%s received — stopping; in-flight turns get %gs to finish", name, remaining)
        else:
            log.warning("%s received — stopping now", name)
        scheduler.stop(remaining)
        remaining = 0.0


class Answering:
    """The HTTP surfaces of a served scheduler, as :func:`run_then_end` waits for them.

    A request that waited for a fire (``"wait": true``, ``POST /run``) is answered once the
    fire settled, which may be the last thing the scheduler does before it has drained: the
    surface then stops accepting, closes its idle connections and finishes its answers (its
    graceful timeout bounds that), and ends on its own. Ending it with the rest of the nursery
    instead would drop those answers, the turns they waited for completed. A second signal
    cuts it short (:meth:`cut`)."""

    def __init__(self) -> None:
        self._serving = 0
        self._ended = trio.Event()
        self._scopes: set[trio.CancelScope] = set()
        self._cut = False

    async def serve(
        self,
        surface: Callable[..., Awaitable[object]],
        *,
        task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """``await nursery.start(answering.serve, surface)``: run ``surface(task_status=)``,
        counted until it returns, or until :meth:`cut`."""
        if self._cut:
            task_status.started(None)
            return
        self._serving += 1
        try:
            with trio.CancelScope() as scope:
                self._scopes.add(scope)
                try:
                    await surface(task_status=task_status)
                finally:
                    self._scopes.discard(scope)
        finally:
            self._serving -= 1
            if self._serving == 0:
                self._ended.set()

    def cut(self) -> None:
        """End every surface now, answered or not (a second signal: stop at once)."""
        self._cut = True
        for scope in self._scopes:
            scope.cancel()

    async def ended(self) -> None:
        """Return once no surface serves (at once when none was started)."""
        if self._serving:
            await self._ended.wait()


async def run_then_end(
    scheduler: Scheduler,
    nursery: trio.Nursery,
    answering: Answering | None = None,
    *,
    task_status: trio.TaskStatus[Scheduler] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``scheduler`` in ``nursery``; once it stopped and settled, and ``answering``'s
    surfaces answered (:class:`Answering`), cancel the nursery.

    ``await nursery.start(run_then_end, scheduler, nursery)`` returns once it runs; whatever
    else the nursery serves (the signal watch, a reload on SIGHUP) then ends with it.
    """
    await scheduler.run(task_status=task_status)
    # The loops have ended, but a fire the host (or an HTTP request) started may still be in
    # its grace: a second signal must still reach it.
    await scheduler.wait_drained()
    if answering is not None:
        await answering.ended()
    nursery.cancel_scope.cancel()


async def start_watched(
    nursery: trio.Nursery,
    scheduler: Scheduler,
    signals: AsyncIterator[int] | None,
    grace: float,
    answering: Answering | None = None,
) -> bool:
    """Start ``scheduler`` in ``nursery`` (:func:`run_then_end`, waiting for ``answering``),
    ``signals`` watched from the start of its boot (:func:`watch_signals`). False when one
    came before the boot completed: the boot was given up, nothing runs, and the nursery
    ends."""

    async def run(*, task_status: trio.TaskStatus[Scheduler]) -> None:
        if signals is not None:
            # Started from here: the watch runs from this task's first checkpoint, which is
            # inside run(), so a signal already waiting stops a boot begun (a stop before
            # run() would make it refuse to run).
            nursery.start_soon(watch_signals, signals, scheduler, grace, True, answering)
        await run_then_end(scheduler, nursery, answering, task_status=task_status)

    await nursery.start(run)
    return scheduler.booted


async def serve(
    scheduler: Scheduler,
    *,
    http: tuple[str, int] | None = None,
    token: str | None = None,
    signals: Iterable[int] = SIGNALS,
    grace: float | None = None,
    task_status: trio.TaskStatus[int | None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``scheduler`` until a signal or ``scheduler.stop()``, then return once it settled.

    ``http=(host, port)`` also serves the HTTP surface there (the ``http`` extra), with
    ``token`` required as a bearer token when given (and the key of this process's turn
    tickets: :func:`~trio_routines.tickets.share_key`); a non-loopback host without a token raises
    :class:`~trio_routines.http.InsecureBind` before anything starts. ``signals`` (SIGINT and
    SIGTERM; empty for none, e.g. outside the main thread) stop the scheduler with ``grace``
    seconds for in-flight turns (default: the scheduler's ``default_grace``, 10 s, the same as
    the command line's ``--grace``; 0 or less: at once); a second signal stops it at once. A
    signal during the boot gives the boot up at once, and nothing is served. SIGHUP is not
    watched (the command line's ``serve`` reloads its routines directory on it): a host that
    wants the same watches it itself and calls
    :meth:`~trio_routines.Scheduler.reload_routines` (docs/embedding.md).
    ``await nursery.start(serve, scheduler, ...)`` returns the HTTP port bound, or ``None``.
    An error comes out as :meth:`~trio_routines.Scheduler.run` raises it (a failed boot's
    :class:`~trio_routines.errors.StateFault`, a taken address's ``OSError``), not inside the
    exception groups of its nurseries; several at once stay grouped. A ``grace`` that is no
    number of seconds, an ``http`` that is no ``(host, port)`` pair, or ``signals`` that are
    no signal numbers (or any outside the main thread), is an
    :class:`~trio_routines.errors.InvalidOption` before anything starts.
    """
    listener: socket.socket | None = None
    signals = _signals(signals)
    if grace is not None:
        grace = checked_grace(grace)  # now, not at the first signal
    if http is not None:
        http = _address(http)
        from .http import bind_http, check_bind  # the optional extra: only when asked for

        check_bind(http[0], token)
        # Bound before the boot touches the store: a taken address fails here, at once,
        # before a catch-up could be claimed and then cut short by the failure.
        listener = bind_http(*http)
    if token:
        share_key(token)  # its turns' tickets, honoured by every replica given the token
    try:
        await _serve(scheduler, http, token, signals, grace, listener, task_status)
    except BaseExceptionGroup as group:
        sole = _sole(group)
        if sole is None:
            raise
        raise sole from None  # as run() raises it: except StateFault catches it
    finally:
        if listener is not None:
            listener.close()  # served from, or never (a boot given up): closed either way


def _sole(group: BaseExceptionGroup[BaseException]) -> Exception | None:
    """The one error ``group`` holds however deep (its nurseries' wrapping), or None when it
    holds several, or something that is no error (a cancel, an interrupt): kept grouped."""
    found: BaseException = group
    while isinstance(found, BaseExceptionGroup):
        if len(found.exceptions) != 1:
            return None
        found = found.exceptions[0]
    return found if isinstance(found, Exception) else None


def _signals(signals: object) -> tuple[int, ...]:
    """``signals=``, checked: signal numbers this process can catch (in its main thread)."""
    try:
        checked = tuple(signal.Signals(number) for number in signals)  # type: ignore[attr-defined]
        if signal.SIGKILL in checked or signal.SIGSTOP in checked:  # never delivered to us
            raise ValueError
    except (TypeError, ValueError):
        raise InvalidOption(
            "signals must be signal numbers a process can catch, like (signal.SIGINT, "
            f"signal.SIGTERM), or () for none: {signals!r:.100}"
        ) from None
    if checked and threading.current_thread() is not threading.main_thread():
        raise InvalidOption(
            "signals are caught in the main thread only: serve in another thread with signals=()"
        )
    return checked


def _address(http: object) -> tuple[str, int]:
    """``http=``, checked: a host and a port from 0 to 65535 (0: any free port)."""
    if isinstance(http, tuple | list) and len(http) == 2:
        host, port = http
        if isinstance(host, str) and type(port) is int and 0 <= port <= 65535:
            return host, port
    raise InvalidOption(
        f"http must be a (host, port) pair, like ('127.0.0.1', 8080), a port from 0 to "
        f"65535: {http!r:.100}"
    )


async def _serve(
    scheduler: Scheduler,
    http: tuple[str, int] | None,
    token: str | None,
    signals: Iterable[int],
    grace: float | None,
    listener: socket.socket | None,
    task_status: trio.TaskStatus[int | None],
) -> None:
    """:func:`serve`'s run, its HTTP address bound already (``listener``)."""
    wanted = tuple(signals)
    stop_grace = scheduler.default_grace if grace is None else grace
    receiver = trio.open_signal_receiver(*wanted) if wanted else contextlib.nullcontext(None)
    with receiver as received:
        answering = Answering()
        async with trio.open_nursery() as nursery:
            runs = await start_watched(nursery, scheduler, received, stop_grace, answering)
            port: int | None = None
            if runs and http is not None:
                from .http import serve_http

                surface = partial(serve_http, scheduler, *http, token=token, sock=listener)
                port = await nursery.start(answering.serve, surface)
            task_status.started(port)
