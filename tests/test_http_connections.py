"""Descriptors and slow clients: the connection cap, the body deadline, the refusal log.

Real servers on loopback: :func:`serve_http` in the test's own Trio run (with a small cap and a
short body deadline, so that a handful of sockets shows the whole story), and a real ``serve``
process whose ``RLIMIT_NOFILE`` is lowered, so that the cap is the one it derives.
"""

from __future__ import annotations

import contextlib
import logging
import resource
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import pytest
import trio
from procs import Env, stop, wait_for

from trio_routines.http import serve_http
from trio_routines.http.connections import Counter, connection_cap
from trio_routines.routines import Routine
from trio_routines.scheduler import Scheduler
from trio_routines.testing import MemoryStore, ScriptedAgent

CAP = 6  # connections; so at most 3 may be sending a body
DEADLINE = 2.0  # seconds for a body


@asynccontextmanager
async def serving(cap: int = CAP) -> AsyncIterator[int]:
    scheduler = Scheduler(
        agent=ScriptedAgent(),
        store=MemoryStore(),
        routines=[Routine(name="adhoc", prompt="p")],
        external_clock=True,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        port = await nursery.start(
            partial(
                serve_http,
                scheduler,
                "127.0.0.1",
                0,
                max_connections=cap,
                body_timeout=DEADLINE,
            )
        )
        yield port
        scheduler.stop(grace=0)


def head(path: str, kind: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: {kind}\r\n"
        f"content-length: {length}\r\n\r\n"
    ).encode()


async def read_all(stream: trio.SocketStream) -> bytes:
    received = b""
    with trio.fail_after(20):
        while chunk := await stream.receive_some(65536):
            received += chunk
    return received


async def trickle(port: int, path: str, kind: str, answers: list[bytes]) -> None:
    """Send a request whose body never completes, one byte at a time, until cut off."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream, trio.open_nursery() as nursery:

        async def drip() -> None:
            try:
                await stream.send_all(head(path, kind, 4000))
                for _ in range(4000):
                    await stream.send_all(b"x")
                    await trio.sleep(DEADLINE / 10)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # cut off: the point

        nursery.start_soon(drip)
        answers.append(await read_all(stream))
        nursery.cancel_scope.cancel()


async def get(port: int, path: str = "/healthz") -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(
            f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n".encode()
        )
        return await read_all(stream)


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer else 0


def test_the_cap_is_half_the_descriptors() -> None:
    assert [connection_cap(n) for n in (1, 2, 64, 1024, 65536)] == [1, 1, 32, 512, 32768]


def test_refusals_are_reported_once_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="trio_routines")
    counter = Counter("connection(s) refused", interval=60)
    for now in (0.0, 1.0, 2.0, 59.0, 60.0, 61.0):
        counter.note(now, "3 open")
    assert [r.getMessage() for r in caplog.records] == [
        "HTTP: 1 connection(s) refused since the last report — 3 open (reported at most every 60s)",
        "HTTP: 4 connection(s) refused since the last report — 3 open (reported at most every 60s)",
    ]


@pytest.mark.slow
async def test_slow_bodies_are_cut_at_the_deadline_and_the_probe_still_answers() -> None:
    async with serving() as port:
        answers: list[bytes] = []
        async with trio.open_nursery() as nursery:
            # Every route reads its body through the same bound: the API's and the login's.
            nursery.start_soon(trickle, port, "/fire", "application/json", answers)
            nursery.start_soon(
                trickle, port, "/ui/login", "application/x-www-form-urlencoded", answers
            )
            nursery.start_soon(trickle, port, "/wakeups", "application/json", answers)
            await trio.sleep(DEADLINE / 4)  # all three are sending their bodies now
            # A fourth body over the half of the cap is refused before it is read...
            late: list[bytes] = []
            await trickle(port, "/run", "application/json", late)
            assert status(late[0]) == 503
            assert b"requests are sending their body already" in late[0]
            # ...and a probe (no body) is answered while the three are still trickling.
            assert status(await get(port)) == 200
            assert answers == []
        assert [status(a) for a in answers] == [408, 408, 408]
        assert all(b"the body did not arrive within 2s of the request" in a for a in answers)
        assert status(await get(port)) == 200


@pytest.mark.slow
async def test_connections_over_the_cap_are_refused_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="trio_routines")
    async with serving() as port:
        held = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(CAP)]
        # The server counts a connection once it has accepted it: wait until the next is
        # refused (a 503 and the connection closed, without reading a request).
        refused = [await get(port) for _ in range(3)]
        assert [status(a) for a in refused] == [503, 503, 503]
        assert all(b"too many connections open" in a for a in refused)
        reports = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
        assert reports == [
            "HTTP: 1 connection(s) refused since the last report — 6 open, the cap is 6"
            " (reported at most every 60s)"
        ]
        for stream in held:
            await stream.aclose()
        with trio.fail_after(10):
            while status(await get(port)) != 200:  # noqa: ASYNC110 -- nothing to wait on
                await trio.sleep(0.05)
    assert not [r for r in caplog.records if r.exc_info]


@pytest.mark.slow
def test_serve_derives_its_cap_from_the_descriptor_limit_and_never_runs_out(env: Env) -> None:
    env.routine("adhoc")
    limit = 192  # the store's holds keep about 80 open: the cap is half of what is left

    def lower() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    with (env.root / "serve.log").open("wb") as err:
        proc = subprocess.Popen(
            [*env.argv("serve", "--agent", "echo", "--http", "127.0.0.1:0")],
            stdout=subprocess.DEVNULL,
            stderr=err,
            cwd=env.root,
            env=env.environ(),
            preexec_fn=lower,  # setrlimit in the child only
        )
    env.procs.append(proc)
    found = wait_for(lambda: "HTTP surface on" in env.log() and env.log(), 20, "serve")
    cap = int(found.split("(at most ")[1].split()[0])
    assert 0 < cap < limit // 2 - 40  # half of what the store left free, not of the limit
    port = int(found.split("HTTP surface on http://127.0.0.1:")[1].split()[0])
    # Twice the limit in connections: without the cap, accept would run out of descriptors.
    socks = []
    for _ in range(2 * limit):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        socks.append(sock)
    wait_for(lambda: "connection(s) refused" in env.log(), 20, "the refusal report")
    for sock in socks:
        sock.close()

    def healthy() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                sock.sendall(
                    b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n"
                )
                return sock.makefile("rb").readline().startswith(b"HTTP/1.1 200")
        except OSError:
            return False

    wait_for(healthy, 20, "/healthz to answer again")
    assert proc.poll() is None
    assert stop(proc) == 0
    log = env.log()
    assert "Traceback" not in log
    assert "EMFILE" not in log
    assert log.count("connection(s) refused") == 1


async def test_a_server_cancelled_with_connections_open_closes_every_one() -> None:
    scheduler = Scheduler(agent=ScriptedAgent(), store=MemoryStore(), external_clock=True)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        port = await nursery.start(partial(serve_http, scheduler, "127.0.0.1", 0))
        clients = [await trio.open_tcp_stream("127.0.0.1", port) for _ in range(3)]
        await get(port)  # the three are accepted by now
        nursery.cancel_scope.cancel()  # as run_then_end does once the scheduler has settled
    # Every server-side socket was closed by the server, not left to the garbage collector.
    for client in clients:
        with trio.fail_after(5):
            assert await client.receive_some(10) == b""
        await client.aclose()


async def answered(port: int) -> None:
    """Return once ``GET /healthz`` is answered 200 (the connections before it let go)."""
    with trio.fail_after(20):
        while status(await get(port)) != 200:  # noqa: ASYNC110 -- the server offers no event
            await trio.sleep(0.05)


H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"  # a SETTINGS frame, no parameter
UPGRADE = (
    b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: Upgrade, HTTP2-Settings\r\n"
    b"upgrade: h2c\r\nhttp2-settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
)


@pytest.mark.parametrize("split", [False, True], ids=["whole", "a byte at a time"])
async def test_a_connection_that_speaks_http2_is_closed_and_the_cap_stays_free(
    split: bool,
) -> None:
    # Hypercorn took an HTTP/2 connection with no stream open for busy: an idle one was never
    # closed (115 s and counting), and the cap's worth of them answered /healthz with 503.
    async with serving(cap=2) as port:
        for _ in range(4):  # more than the cap, one after another
            await answered(port)  # the one before was let go: there is room under the cap
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                with contextlib.suppress(trio.BrokenResourceError):  # closed under the sends
                    if split:
                        for byte in H2_PREFACE:
                            await stream.send_all(bytes([byte]))
                    else:
                        await stream.send_all(H2_PREFACE + EMPTY_SETTINGS)
                assert await read_all(stream) == b""  # not even the server's SETTINGS
        # Each was let go: /healthz answers once the server has counted the last one out.
        await answered(port)


async def test_an_upgrade_to_h2c_is_closed_without_switching() -> None:
    # One connection allowed: the upgrade's must be let go at once, its request included
    # (hypercorn has started it as an HTTP/2 stream), for /healthz to be answered.
    async with serving(cap=1) as port:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(UPGRADE)
            assert await read_all(stream) == b""  # no 101, and no HTTP/2 after it
        await answered(port)
