"""How many connections the HTTP surface holds open, and what happens to the next one.

Theory of operation
-------------------

Every open connection holds a file descriptor, and so do the state store (claim files, the
writer's pipes, PostgreSQL's sockets) and the agent (a ``cmd:`` turn's pipes, an HTTP agent's
connections). They share one limit, ``RLIMIT_NOFILE`` (1,024 by default): when connections
take them all, a fire fails with EMFILE, a wake-up poll fails, and Trio's accept loop (the one
hypercorn's ``serve`` runs) logs a traceback for every failed accept, ten a second.

So :func:`serve_connections` runs the accept loop itself, with hypercorn's per-connection
server (``TCPServer``) behind it, and keeps a cap:

* at most :func:`connection_cap` connections are open at once: **half of the descriptors**
  ``RLIMIT_NOFILE`` leaves free when the surface starts (the store has joined by then, and
  holds its own); the other half stays for the store, the agent and the rest;
* a connection over the cap is accepted and closed at once -- one descriptor for the length
  of two system calls -- after a best-effort ``503`` written without waiting;
* refusals are counted and logged as one WARNING at most once per :data:`REPORT_INTERVAL`,
  naming how many were refused since the last one; an accept that fails for lack of
  descriptors or memory (the rest of the process may still use them all up) is logged the
  same way, without a traceback, and retried after a short pause.

How long a connection may be held is hypercorn's ``keep_alive_timeout`` (the request line and
headers, and idleness between requests), the application's body deadline (see
:func:`~trio_routines.http.make_app`), and, for a client that stops reading what it asked
for, :data:`SEND_TIMEOUT`: hypercorn sends under a shielded cancel scope with no deadline,
so a response the client never reads would hold its connection, and a stop, for ever. Each
send here has a deadline of ours, brought forward to the end of the stop's graceful time;
when it passes, the connection is closed.

``TCPServer`` and ``WorkerContext`` are hypercorn internals; the serving loop below mirrors
hypercorn's own ``worker_serve`` for the Trio worker (no lifespan: the application needs
none), for the versions the ``http`` extra allows.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import resource
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import trio

if TYPE_CHECKING:
    from hypercorn.config import Config

log = logging.getLogger("trio_routines.http")

REPORT_INTERVAL = 60.0  # seconds between two WARNINGs about refused connections
ACCEPT_PAUSE = 0.1  # seconds, after an accept that failed for lack of descriptors or memory
SEND_TIMEOUT = 10.0  # seconds a send may wait for a client that reads nothing
UNLIMITED = 1 << 20  # what an RLIMIT_NOFILE of "unlimited" counts as
_STARVED = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: How an HTTP/2 connection starts (its method, ``PRI``, is reserved to it), and the status
#: line of a switch of protocols, which hypercorn makes only to h2c.
_PREFACE = b"PRI * HTTP/2.0\r\n"
_SWITCHING = b"HTTP/1.1 101 "
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"content-length: 54\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
    b'{"error":"too many connections open; try again later"}'
)


def descriptor_limit() -> int:
    """The process's soft ``RLIMIT_NOFILE`` (:data:`UNLIMITED` when there is none)."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return UNLIMITED if soft < 0 or soft == resource.RLIM_INFINITY else int(soft)


def open_descriptors() -> int:
    """How many descriptors the process holds now (0 when it cannot tell)."""
    for where in ("/proc/self/fd", "/dev/fd"):
        try:
            return max(0, len(os.listdir(where)) - 1)  # less the one that lists them
        except OSError:
            continue
    return 0


def connection_cap(descriptors: int) -> int:
    """How many connections may be open when the process may hold ``descriptors``: half."""
    return max(1, descriptors // 2)


class Counter:
    """Events counted quietly and reported as one WARNING at most once per ``interval``."""

    def __init__(self, what: str, interval: float = REPORT_INTERVAL) -> None:
        self._what = what
        self._interval = interval
        self._count = 0
        self._next = -math.inf

    def note(self, now: float, detail: str) -> None:
        self._count += 1
        if now < self._next:
            return
        log.warning(
            "HTTP: %d %s since the last report — %s (reported at most every %gs)",
            self._count,
            self._what,
            detail,
            self._interval,
        )
        self._count = 0
        self._next = now + self._interval


class Gate:
    """The cap on open connections, and the accept loop that keeps it."""

    def __init__(self, cap: int, descriptors: int | None = None) -> None:
        self.cap = cap
        self.open = 0
        where = f" (half of the {descriptors} descriptors free)" if descriptors is not None else ""
        self._limit = f"{{open}} open, the cap is {cap}{where}"
        self._refused = Counter("connection(s) refused")
        self._starved = Counter("accept(s) failed for lack of descriptors or memory")
        self.closing_at = math.inf  # the end of a stop's graceful time, once there is one
        self.sending: set[trio.CancelScope] = set()  # the sends waiting for their client

    def closing(self, deadline: float) -> None:
        """The stop's graceful time ends at ``deadline``: no send waits past it."""
        self.closing_at = deadline
        for scope in self.sending:
            scope.deadline = min(scope.deadline, deadline)

    async def accept_loop(
        self,
        listener: trio.SocketListener,
        handler: Callable[[trio.SocketStream], Awaitable[object]],
        nursery: trio.Nursery,
    ) -> None:
        """Accept on ``listener`` for ever; each connection under the cap runs ``handler``."""
        async with listener:
            while True:
                try:
                    stream = await listener.accept()
                except OSError as exc:
                    if exc.errno not in _STARVED:
                        raise
                    detail = f"{errno.errorcode.get(exc.errno or 0, exc.errno)}: {exc.strerror}"
                    self._starved.note(trio.current_time(), f"{detail}; " + self._state())
                    await trio.sleep(ACCEPT_PAUSE)
                    continue
                if self.open >= self.cap:
                    self._refuse(stream)
                    continue
                self.open += 1
                nursery.start_soon(self._serve_one, handler, stream)

    def _state(self) -> str:
        return self._limit.format(open=self.open)

    def _refuse(self, stream: trio.SocketStream) -> None:
        sock = stream.socket
        try:
            os.write(sock.fileno(), _BUSY)  # the socket does not block: whatever fits, or nothing
        except OSError:
            pass
        sock.close()
        self._refused.note(trio.current_time(), self._state())

    async def _serve_one(
        self, handler: Callable[[trio.SocketStream], Awaitable[object]], stream: trio.SocketStream
    ) -> None:
        try:
            await handler(stream)
        finally:
            # Hypercorn closes the stream after a checkpoint (send_eof), which a cancelled
            # server never passes: close it here, so that the count is the descriptors held.
            stream.socket.close()
            self.open -= 1


class BoundedSends:
    """A connection's stream as hypercorn's ``TCPServer`` uses it, each send bounded (see the
    module doc); a send that times out closes the connection and fails as a broken one.

    HTTP/1.1 only: a connection that starts with HTTP/2's preface, or a request whose
    ``Upgrade: h2c`` hypercorn would answer with ``101``, is closed instead. Hypercorn's
    HTTP/2 takes a connection with no stream open for busy, so an idle one was never closed,
    and enough of them held every connection the cap allows (``/healthz`` included)."""

    __slots__ = ("_ended", "_gate", "_head", "_stream", "socket")

    def __init__(
        self, stream: trio.SocketStream, gate: Gate, ended: trio.CancelScope | None = None
    ) -> None:
        """``ended``: the scope of the connection's whole service, cancelled when it is
        refused."""
        self._stream = stream
        self._gate = gate
        self._ended = ended
        self.socket = stream.socket  # (no ``do_handshake``: hypercorn takes it for plain TCP)
        self._head: bytes | None = b""  # the connection's first bytes, until it is HTTP/1's

    def _refuse_h2(self) -> None:
        if self._ended is not None:
            self._ended.cancel()  # hypercorn may have started a request's task for it
        self.socket.close()
        raise trio.BrokenResourceError("HTTP/2 is not served here; connection closed")

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if bytes(data[: len(_SWITCHING)]) == _SWITCHING:
            self._refuse_h2()  # the only protocol switch hypercorn makes is to h2c
        deadline = min(trio.current_time() + SEND_TIMEOUT, self._gate.closing_at)
        with trio.CancelScope(deadline=deadline) as scope:
            self._gate.sending.add(scope)
            try:
                await self._stream.send_all(data)
            finally:
                self._gate.sending.discard(scope)
        if scope.cancelled_caught:
            self.socket.close()
            raise trio.BrokenResourceError("the client read nothing in time; connection closed")

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self._stream.receive_some(max_bytes)
        head = self._head
        if head is not None:
            head += bytes(data[: len(_PREFACE) - len(head)])
            if not data or head != _PREFACE[: len(head)]:
                self._head = None  # HTTP/1's (or closed): nothing more to look at
            elif len(head) == len(_PREFACE):
                self._refuse_h2()
            else:
                self._head = head
        return data

    async def send_eof(self) -> None:
        await self._stream.send_eof()

    async def aclose(self) -> None:
        await self._stream.aclose()


async def serve_connections(
    app: Any,
    config: Config,
    gate: Gate,
    shutdown_trigger: Callable[[], Awaitable[object]],
    *,
    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the ASGI ``app`` on ``config.bind`` behind ``gate`` until ``shutdown_trigger``
    returns; then stop accepting and give open connections ``config.graceful_timeout``.

    ``task_status.started`` gets the addresses bound, as hypercorn's ``serve`` gives them.
    """
    from hypercorn.trio.tcp_server import TCPServer
    from hypercorn.trio.worker_context import WorkerContext
    from hypercorn.utils import repr_socket_addr, wrap_app

    sockets = config.create_sockets()
    listeners, binds = [], []
    for sock in sockets.insecure_sockets:
        sock.listen(config.backlog)
        listeners.append(trio.SocketListener(trio.socket.from_stdlib_socket(sock)))
        binds.append(f"http://{repr_socket_addr(sock.family, sock.getsockname())}")
    context = WorkerContext(None)
    # The connection state is a dict per server, as hypercorn's worker_serve hands it over.
    server = partial(
        TCPServer, wrap_app(app, config.wsgi_max_body_size, "asgi"), config, context, {}
    )

    async def handler(stream: trio.SocketStream) -> None:
        # The connection's own scope: one it refuses (HTTP/2) ends here and now, whatever
        # hypercorn has started for it.
        with trio.CancelScope() as ended:
            await server(BoundedSends(stream, gate, ended))  # type: ignore[arg-type]  # duck-typed

    async with trio.open_nursery() as connections:
        try:
            async with trio.open_nursery() as accepting:
                for listener in listeners:
                    accepting.start_soon(gate.accept_loop, listener, handler, connections)
                task_status.started(binds)
                await shutdown_trigger()
                accepting.cancel_scope.cancel()
        finally:
            await context.terminated.set()
            connections.cancel_scope.deadline = trio.current_time() + config.graceful_timeout
            gate.closing(connections.cancel_scope.deadline)
