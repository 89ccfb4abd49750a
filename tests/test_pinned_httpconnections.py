"""The connection cap's accept loop, pinned whole (http/connections.py).

The gate runs over a listener the test feeds by hand: each connection is one end of a real
socket pair whose other end the test holds, so what a refused client receives and when the
server closes its end are read as a client would; an accept that fails is an ``OSError`` handed
out in place of a connection. The log lines are compared whole.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import resource
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import trio
import trio.testing

from trio_routines.http import connections
from trio_routines.http.connections import (
    UNLIMITED,
    Gate,
    connection_cap,
    descriptor_limit,
)

BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"content-length: 54\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
    b'{"error":"too many connections open; try again later"}'
)


class Listener:
    """Hands out what the test sends it: a connection, or an error to raise."""

    def __init__(self) -> None:
        self.send, self._receive = trio.open_memory_channel[Any](math.inf)
        self.closed = False

    async def __aenter__(self) -> Listener:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.closed = True

    async def accept(self) -> trio.SocketStream:
        item = await self._receive.receive()
        if isinstance(item, BaseException):
            raise item
        return item  # type: ignore[no-any-return]


CLIENTS: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    while CLIENTS:
        CLIENTS.pop().close()


def connection() -> tuple[trio.SocketStream, trio.socket.SocketType]:
    """The server's end of a new connection, and the client's (closed after the test)."""
    server, client = socket.socketpair()
    CLIENTS.append(client)
    return trio.SocketStream(trio.socket.from_stdlib_socket(server)), (
        trio.socket.from_stdlib_socket(client)
    )


async def everything(client: trio.socket.SocketType) -> bytes:
    """All the client receives until the server closes its end."""
    received = b""
    with trio.fail_after(10):
        while chunk := await client.recv(65536):
            received += chunk
    return received


def reports(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "trio_routines.http"]


async def test_the_gate_serves_up_to_its_cap_refuses_the_rest_and_counts_each_end(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="trio_routines")
    gate = Gate(2, descriptors=4)
    listener = Listener()
    served: list[trio.SocketStream] = []
    release = trio.Event()

    async def handler(stream: trio.SocketStream) -> None:
        served.append(stream)
        await release.wait()

    ended: list[OSError] = []

    async def accepting(nursery: trio.Nursery) -> None:
        try:
            await gate.accept_loop(listener, handler, nursery)
        except OSError as exc:
            ended.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(accepting, nursery)
        held = [connection() for _ in range(2)]
        for stream, _ in held:
            listener.send.send_nowait(stream)
        await trio.testing.wait_all_tasks_blocked()
        assert (gate.open, served) == (2, [s for s, _ in held])

        # Over the cap: a 503 written at once and the connection closed, never served.
        refused, refused_client = connection()
        listener.send.send_nowait(refused)
        assert await everything(refused_client) == BUSY
        assert gate.open == 2
        # An accept that fails for lack of descriptors is reported and the loop goes on.
        listener.send.send_nowait(OSError(errno.EMFILE, "Too many open files"))
        again, again_client = connection()
        listener.send.send_nowait(again)
        assert await everything(again_client) == BUSY  # counted, not reported again
        assert reports(caplog) == [
            "HTTP: 1 connection(s) refused since the last report — 2 open, the cap is 2 (half"
            " of the 4 descriptors free) (reported at most every 60s)",
            "HTTP: 1 accept(s) failed for lack of descriptors or memory since the last report"
            " — EMFILE: Too many open files; 2 open, the cap is 2 (half of the 4 descriptors"
            " free) (reported at most every 60s)",
        ]

        # A connection that ends is counted off, and its socket closed by the server.
        release.set()
        for _, client in held:
            assert await everything(client) == b""
        await trio.testing.wait_all_tasks_blocked()
        assert gate.open == 0
        later = [connection() for _ in range(2)]
        release = trio.Event()
        for stream, _ in later:
            listener.send.send_nowait(stream)
        await trio.testing.wait_all_tasks_blocked()
        assert gate.open == 2
        assert served[2:] == [s for s, _ in later]
        release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert gate.open == 0

        # Any other accept error ends the loop, and the listener is closed.
        assert not listener.closed
        listener.send.send_nowait(OSError(errno.EBADF, "Bad file descriptor"))
        await trio.testing.wait_all_tasks_blocked()
        assert [e.errno for e in ended] == [errno.EBADF]
        assert listener.closed


async def forever(_: trio.SocketStream) -> None:
    await trio.sleep_forever()


async def test_a_gate_without_a_descriptor_count_says_only_its_cap(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="trio_routines")
    gate = Gate(1)
    listener = Listener()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(gate.accept_loop, listener, forever, nursery)
        first, _ = connection()
        listener.send.send_nowait(first)
        refused, client = connection()
        listener.send.send_nowait(refused)
        assert await everything(client) == BUSY
        nursery.cancel_scope.cancel()
    assert reports(caplog) == [
        "HTTP: 1 connection(s) refused since the last report — 1 open, the cap is 1"
        " (reported at most every 60s)"
    ]


async def test_a_stop_gives_the_requests_still_open_their_grace() -> None:
    """Once the trigger returns no connection is accepted, and a request still being answered
    gets ``graceful_timeout`` to finish."""
    from hypercorn.config import Config

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.graceful_timeout = 30.0
    config.accesslog = None
    entered, stop = trio.Event(), trio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        entered.set()
        await stop.wait()
        # Every other task waits now: the server has stopped accepting and waits for this one.
        await trio.testing.wait_all_tasks_blocked()
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"8")]}
        )
        await send({"type": "http.response.body", "body": b"answered"})

    answers: list[bytes] = []
    async with trio.open_nursery() as nursery:
        [bound] = await nursery.start(
            connections.serve_connections, app, config, Gate(4), stop.wait
        )
        port = int(bound.rsplit(":", 1)[1])

        async def ask() -> None:
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(b"GET / HTTP/1.1\r\nhost: localhost\r\n\r\n")
                received = b""
                with trio.fail_after(10):
                    while chunk := await stream.receive_some(65536):
                        received += chunk
                answers.append(received)

        nursery.start_soon(ask)
        await entered.wait()
        stop.set()
    [answer] = answers
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert answer.endswith(b"\r\n\r\nanswered")
    with pytest.raises(OSError, match="all attempts to connect"):
        await trio.open_tcp_stream("127.0.0.1", port)


def test_the_cap_is_half_the_descriptors_rounded_down() -> None:
    assert [connection_cap(n) for n in (3, 65)] == [1, 32]
    assert isinstance(connection_cap(65), int)


def test_the_descriptor_limit_is_the_soft_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = soft - 1
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
    try:
        assert descriptor_limit() == lowered
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.parametrize(("soft", "counted"), [(resource.RLIM_INFINITY, UNLIMITED), (0, 0), (1, 1)])
def test_an_unlimited_soft_limit_counts_as_unlimited(
    monkeypatch: pytest.MonkeyPatch, soft: int, counted: int
) -> None:
    monkeypatch.setattr(connections.resource, "getrlimit", lambda _: (soft, resource.RLIM_INFINITY))
    assert descriptor_limit() == counted


def test_the_descriptors_open_are_counted() -> None:
    from trio_routines.http.connections import open_descriptors

    before = open_descriptors()
    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        assert open_descriptors() == before + 1
    finally:
        os.close(fd)
    assert open_descriptors() == before

    def is_open(fd: int) -> bool:
        try:
            os.fstat(fd)
        except OSError:
            return False
        return True

    # Counted another way: every descriptor number that answers.
    assert open_descriptors() == sum(is_open(fd) for fd in range(min(descriptor_limit(), 1 << 16)))


@pytest.mark.parametrize("when", ["running", "stopping"])
async def test_a_client_that_reads_nothing_is_closed_at_a_deadline_of_ours(
    mock_clock: trio.testing.MockClock, when: str
) -> None:
    """Hypercorn sends under a shielded scope with no deadline: a client that asks for a
    response and never reads it is closed after ``SEND_TIMEOUT`` (and its connection let go
    within hypercorn's ``keep_alive_timeout``), or at the end of a stop's graceful time if
    that comes first, rather than held (and the stop with it) for ever."""
    from hypercorn.config import Config

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.graceful_timeout = 2.0  # shorter than SEND_TIMEOUT: the stop's end comes first
    config.accesslog = None
    body = b"x" * (16 << 20)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        length = str(len(body)).encode()
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", length)]}
        )
        await send({"type": "http.response.body", "body": body})

    gate, stop, served = Gate(4), trio.Event(), trio.Event()
    client = socket.socket()
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    async with trio.open_nursery() as nursery:
        try:

            async def serving(task_status: trio.TaskStatus[list[str]]) -> None:
                await connections.serve_connections(
                    app, config, gate, stop.wait, task_status=task_status
                )
                served.set()

            [bound] = await nursery.start(serving)
            client.connect(("127.0.0.1", int(bound.rsplit(":", 1)[1])))
            client.sendall(b"GET / HTTP/1.1\r\nhost: localhost\r\n\r\n")  # and never reads
            await trio.to_thread.run_sync(wait_for_sending, gate)
            await trio.testing.wait_all_tasks_blocked()
            if when == "running":
                mock_clock.jump(connections.SEND_TIMEOUT - 0.5)
                await trio.testing.wait_all_tasks_blocked()
                held = gate.open
                mock_clock.jump(1)  # closed; hypercorn lets the connection go once it is idle
                await trio.testing.wait_all_tasks_blocked()
                mock_clock.jump(config.keep_alive_timeout)
            else:
                stop.set()
                await trio.testing.wait_all_tasks_blocked()
                held = gate.open
                mock_clock.jump(config.graceful_timeout + 0.5)
            await trio.testing.wait_all_tasks_blocked()
            closed = gate.open == 0 and not gate.sending
            ended = served.is_set()
        finally:  # (without a deadline of ours the send would wait for ever: end it here)
            client.close()
            stop.set()
    assert held == 1  # until the deadline...
    assert closed  # ...then closed by us
    assert ended == (when == "stopping")  # and a stop ends with it


def wait_for_sending(gate: Gate) -> None:
    """Until a send of ``gate``'s connections waits for its client (in a thread, real time)."""
    import time

    deadline = time.monotonic() + 10
    while not gate.sending and time.monotonic() < deadline:
        time.sleep(0.005)
