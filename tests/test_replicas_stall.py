"""A replica whose PostgreSQL connection stalls notices it lost its hold and ends its turn.

A TCP relay on loopback stands between the replica and the server; stalling it keeps the
connections up but carries nothing, as a frozen middlebox or a partition does. The replica's
heartbeat gets no answer within its deadline (the store's timeout plus one second), so it
declares its presence lost and ends the turn it runs; once the relay carries again, the claim
is settled ``interrupted`` with that reason.
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from procs import Env, lines, stop, wait_for

from trio_routines.scheduler.state import LOST_HOLD


class Relay:
    """Carries bytes between clients and ``target``; :attr:`stalled` holds them back."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.stalled = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._sockets: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self._sockets += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                while self.stalled.is_set():
                    time.sleep(0.05)
                sink.sendall(data)

    def close(self) -> None:
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()


@pytest.fixture
def relayed(tmp_path: Path) -> Iterator[tuple[Env, Relay]]:
    from pg import require_server, schema_url

    url = require_server()
    parts = urlsplit(url)
    relay = Relay((parts.hostname or "127.0.0.1", parts.port or 5432))
    user, at, _ = parts.netloc.rpartition("@")
    via = urlunsplit(parts._replace(netloc=f"{user}{at}127.0.0.1:{relay.port}"))
    env = Env(tmp_path)
    with schema_url(via) as state:
        env.state = state  # type: ignore[assignment]
        try:
            yield env, relay
        finally:
            relay.stalled.clear()
            for proc in env.procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            relay.close()


def _port(log: str) -> int:
    found = re.search(r"HTTP surface on \S+:(\d+)", log)
    assert found is not None, log
    return int(found.group(1))


@pytest.mark.slow
def test_a_stalled_connection_ends_the_turns_its_replica_held(
    relayed: tuple[Env, Relay],
) -> None:
    env, relay = relayed
    env.routine("slow", cron="0 * * * *")
    agent = (
        f"cmd:trap 'echo ended >> {env.marker}; exit 1' TERM; echo started >> {env.marker}; "
        "sleep 120 & wait"
    )
    proc = env.start(
        "serve",
        "--agent",
        agent,
        "--external-clock",
        "--http",
        "127.0.0.1:0",
        "--poll",
        "1",
        "--replica",
        "stalled",
        log="stalled.log",
    )
    wait_for(lambda: "HTTP surface on" in env.log("stalled.log"), 30, "serve to listen")
    port = _port(env.log("stalled.log"))
    slot = (datetime.now(UTC) - timedelta(hours=1)).replace(minute=0, second=0, microsecond=0)
    body = json.dumps({"name": "slow", "slot": slot.isoformat()}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/fire", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert json.loads(answer.read())["claimed"] is True
    wait_for(lambda: lines(env.marker) == ["started"], 30, "the turn to start")

    relay.stalled.set()  # nothing reaches the server any more, nothing comes back
    wait_for(
        lambda: "replica stalled lost its connection" in env.log("stalled.log"),
        60,
        "the replica to notice that its hold is lost",
    )
    wait_for(lambda: "ended" in lines(env.marker), 30, "the turn to be ended")
    relay.stalled.clear()

    def settled() -> dict[str, object] | None:
        result = env.cli("history", "slow", "--json")
        if result.returncode != 0:
            return None
        (entry,) = json.loads(result.stdout)
        return entry if entry.get("outcome") else None

    entry = wait_for(settled, 60, "the claim to be settled")
    assert (entry["outcome"], entry["error"], entry["replica"]) == (
        "interrupted",
        LOST_HOLD,
        "stalled",
    )
    assert stop(proc) == 0
