"""A TCP proxy for tests that need a connection to stall: ``python tests/tcpproxy.py PORT``.

It listens on a free loopback port, prints that port, and forwards every connection to
``127.0.0.1:PORT``. Freeze it whole with SIGSTOP (the kernel still accepts and acknowledges,
nothing is forwarded: a silent stall), or hold only the server's answers with SIGUSR1 (the
requests still reach the server) and let them through again with SIGUSR2; it prints
``held`` or ``released`` once a signal took effect. SIGHUP arms a hold that begins with the
next request carrying ``COMMIT`` (the commit reaches the server, its answer is held): it
prints ``armed``, then ``held`` when the commit passes.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from functools import partial

import trio
import trio_util


async def _pump(
    source: trio.SocketStream,
    sink: trio.SocketStream,
    hold: trio_util.AsyncBool | None,
    sent: Callable[[bytes], None] | None = None,
) -> None:
    try:
        async for data in source:
            if hold is not None:
                await hold.wait_value(False)
            if sent is not None:
                sent(data)  # before it goes on: an answer to it finds the hold in effect
            await sink.send_all(data)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        await sink.aclose()


async def main(target: int) -> None:
    hold = trio_util.AsyncBool(False)
    at_commit = [False]

    def sent(data: bytes) -> None:
        if at_commit[0] and b"COMMIT" in data:
            at_commit[0] = False
            hold.value = True
            print("held", flush=True)

    async def handle(client: trio.SocketStream) -> None:
        try:
            server = await trio.open_tcp_stream("127.0.0.1", target)
        except OSError:
            await client.aclose()
            return
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_pump, client, server, None, sent)
            nursery.start_soon(_pump, server, client, hold)

    async def signals(*, task_status: trio.TaskStatus[None]) -> None:
        with trio.open_signal_receiver(signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP) as received:
            task_status.started()
            async for signum in received:
                if signum == signal.SIGHUP:
                    at_commit[0] = True
                    print("armed", flush=True)
                    continue
                hold.value = signum == signal.SIGUSR1
                print("held" if hold.value else "released", flush=True)

    async with trio.open_nursery() as nursery:
        await nursery.start(signals)
        listeners = await nursery.start(partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
        print(listeners[0].socket.getsockname()[1], flush=True)


if __name__ == "__main__":
    trio.run(main, int(sys.argv[1]))
