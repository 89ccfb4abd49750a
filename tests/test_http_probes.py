"""What a host's orchestrator and its callers see: /readyz, /healthz, and POST /run's reply.

A real hypercorn server on loopback, as in ``test_http``.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from test_http import TOKEN, assert_error, serving

from trio_routines.errors import StateFault
from trio_routines.http.api import MAX_REPLY
from trio_routines.store import Store
from trio_routines.stores import DirectoryStore
from trio_routines.testing import Complete, Fail, Hang, MemoryStore, ScriptedAgent


async def test_readyz_is_ready_on_every_store(store: Store) -> None:
    async with serving(store=store) as server:
        reply = await server.call("GET", "/readyz")
        assert (reply.status, reply.json) == (200, {"status": "ready"})


async def test_readyz_is_503_when_the_store_faults_while_healthz_stays_cheap() -> None:
    store = MemoryStore()
    store.fail("ready", StateFault("disk on fire"))
    async with serving(store=store) as server:
        message = assert_error(await server.call("GET", "/readyz"), 503)
        assert "disk on fire" in message
        assert (await server.call("GET", "/healthz")).status == 200  # liveness: no store call
        del store.faults["ready"]
        assert (await server.call("GET", "/readyz")).status == 200


@pytest.mark.slow
async def test_readyz_answers_503_within_its_deadline_when_the_store_hangs() -> None:
    store = MemoryStore()
    store.hang("ready")
    async with serving(store=store) as server:
        reply = await server.call("GET", "/readyz")
        assert "did not answer within 2s" in assert_error(reply, 503)
        assert reply.headers["retry-after"]


async def test_readyz_on_a_state_directory_that_is_a_file(tmp_path: Path) -> None:
    store = DirectoryStore(tmp_path / "state")
    async with serving(store=store) as server:
        assert (await server.call("GET", "/readyz")).status == 200
        shutil.rmtree(tmp_path / "state")  # the replica's holds file stays open: no matter
        (tmp_path / "state").write_text("not a directory")
        message = assert_error(await server.call("GET", "/readyz"), 503)
        assert "state directory" in message


async def test_readyz_needs_no_token_and_is_503_while_stopping() -> None:
    async with serving(agent=ScriptedAgent(Hang()), token=TOKEN) as server:
        assert (await server.call("GET", "/readyz")).status == 200
        auth = {"Authorization": f"Bearer {TOKEN}"}
        started = await server.call("POST", "/run", {"name": "adhoc", "wait": False}, headers=auth)
        assert started.status == 202
        server.scheduler.stop(grace=30)  # the hanging turn keeps the server up meanwhile
        assert "stopping" in assert_error(await server.call("GET", "/readyz"), 503)
        server.scheduler.stop(grace=0)


async def test_run_returns_the_reply_text() -> None:
    agent = ScriptedAgent(Complete(reply="Here is the digest: ✓ all green"))
    async with serving(agent=agent) as server:
        reply = await server.call("POST", "/run", {"name": "adhoc"})
        assert reply.status == 200
        assert reply.json["reply"] == "Here is the digest: ✓ all green"
        assert reply.json["truncated"] is False
        assert reply.json["outcome"] == "completed"


async def test_run_reply_is_bounded_at_64k_and_says_so() -> None:
    long = "é" * MAX_REPLY  # two bytes each: twice the bound
    agent = ScriptedAgent(Complete(reply=long))
    async with serving(agent=agent) as server:
        reply = await server.call("POST", "/run", {"name": "adhoc"})
        assert reply.json["truncated"] is True
        kept = reply.json["reply"]
        assert kept == "é" * (MAX_REPLY // 2)
        assert len(kept.encode()) == MAX_REPLY


async def test_a_failed_run_keeps_what_was_said() -> None:
    agent = ScriptedAgent(Fail("quota exceeded"))
    async with serving(agent=agent) as server:
        reply = await server.call("POST", "/run", {"name": "adhoc"})
        assert reply.json["outcome"] == "failed"
        assert reply.json["failed"] == "quota exceeded"
        assert reply.json["truncated"] is False
