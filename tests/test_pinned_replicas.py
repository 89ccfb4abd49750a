"""Pinned: replica ids, the keys of holds and a replica's published record, to the value.

Written for the mutation run of replicas.py (docs/mutation.md). A hold's key is shared by every
replica of a store, across processes and releases: the values are pinned, not only their
agreement within one process.
"""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_routines.errors import InvalidOption
from trio_routines.instants import slot_name
from trio_routines.replicas import (
    REPLICA_LIMIT,
    ReplicaInfo,
    check_replica,
    claim_key,
    default_replica,
    key,
    replica_json,
    replica_key,
    replica_problem,
    session_key,
    stored_replica,
)

T0 = datetime(2026, 7, 7, 10, tzinfo=UTC)


def test_the_keys_of_holds_are_fixed_values() -> None:
    assert key("session", "routine:r") == 3026001249204088241
    assert session_key("routine:r") == 3026001249204088241
    assert claim_key("r", T0) == 4821706117280067096
    assert replica_key("web-1:4242") == 5939288108073700952
    assert replica_key("web-1:4242", "s1") == 3780696127659657429
    # A session named by a client may hold a lone surrogate: it still has a key. (`key` itself:
    # `session_key` remembers its answers, which a mutation run's fork inherits.)
    assert key("session", "chat-\ud800") == 8184382045035047948
    session_key.cache_clear()
    assert session_key("chat-\ud800") == 8184382045035047948


@given(
    routine=st.text(max_size=12),
    slot=st.datetimes(timezones=st.just(UTC)),
)
def test_a_claims_key_is_the_key_of_its_routine_and_slot_name(routine: str, slot: datetime) -> None:
    # Made in one step, not through ``key``: the same text, whatever the routine's name holds.
    assert claim_key(routine, slot) == key("claim", routine, slot_name(slot))


def test_a_claims_key_of_a_name_outside_ascii_is_a_fixed_value() -> None:
    assert claim_key("é-\ud800", T0.replace(microsecond=123000)) == 7399423198319192450


def test_a_replica_key_is_apart_per_namespace_and_without_one() -> None:
    assert replica_key("x", "") == key("replica", "x") == 7527181507355671340
    assert replica_key("", "ns") == key("replica", "ns", "") == 4257077303555770342
    assert replica_key("x", "ns") != replica_key("x")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (7, "a replica id must be a string, not int"),
        (None, "a replica id must be a string, not NoneType"),
        ("", "a replica id must be 1 to 128 characters"),
        ("x" * 129, "a replica id must be 1 to 128 characters"),
        ("a\nb", "a replica id must be one line of visible text: 'a b'"),
        (
            "a\x1bb" * 40,
            "a replica id must be one line of visible text: " + repr(("a\\x1bb" * 40)[:64]),
        ),
        ("a\ud800b", "a replica id must be valid Unicode text"),
    ],
)
def test_each_refusal_of_a_replica_id_says_why(value: object, problem: str) -> None:
    assert replica_problem(value) == problem
    if isinstance(value, str):
        with pytest.raises(InvalidOption) as raised:
            check_replica(value)
        assert str(raised.value) == problem
    assert stored_replica(value) is None


def test_a_replica_id_of_the_longest_length_is_kept() -> None:
    longest = "x" * REPLICA_LIMIT
    assert REPLICA_LIMIT == 128
    assert replica_problem(longest) is None
    assert check_replica(longest) == longest
    assert stored_replica(longest) == longest


def test_the_default_replica_is_host_and_pid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket, "gethostname", lambda: "web-1")
    assert default_replica() == f"web-1:{os.getpid()}"
    monkeypatch.setattr(socket, "gethostname", lambda: "")
    assert default_replica() == f"localhost:{os.getpid()}"


def test_a_replica_as_json_outputs_and_its_file_show_it() -> None:
    later = datetime(2026, 7, 7, 10, 5, 30, 250000, tzinfo=UTC)
    info = ReplicaInfo("web-1:42", "0.1.0", "web-1", 42, T0, later)
    record = {
        "id": "web-1:42",
        "version": "0.1.0",
        "host": "web-1",
        "pid": 42,
        "started": "2026-07-07T10:00:00.000Z",
        "lastSeen": "2026-07-07T10:05:30.250Z",
        "inFlight": 0,
    }
    assert replica_json(info) == record | {"alive": True}
    assert replica_json(info, liveness=False) == record
    busy = ReplicaInfo("b", "0.2.0", "h", 7, T0, T0, in_flight=3, alive=False)
    assert replica_json(busy)["inFlight"] == 3
    assert replica_json(busy)["alive"] is False
