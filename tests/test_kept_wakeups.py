"""Wake-ups this version cannot use, kept by the state directory as PostgreSQL keeps them.

A replica (another machine's zones, a newer version) may write an entry this one cannot
parse: a zone this machine does not know, a cron or a field shape it does not read. Such an
entry is never fired, listed or counted here, but it stays in the journal through every new
generation, in its place, and can be removed by its id: a compaction here once dropped it."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from trio_routines import wakelimits
from trio_routines.errors import InvalidWakeup
from trio_routines.instants import format_iso
from trio_routines.stores.directory import DirectoryStore
from trio_routines.stores.directory.wakeupindex import WakeupIndex, del_op
from trio_routines.wakeups import WakeupRequest

T0 = datetime(2026, 7, 7, 9, tzinfo=UTC)
HOUR = timedelta(hours=1)


def foreign(wakeup_id: str, **fields: Any) -> dict[str, Any]:
    """A recurring entry as a replica that knows a zone this machine does not wrote it."""
    entry = {
        "id": wakeup_id,
        "session": "s",
        "prompt": "p",
        "fireAt": format_iso(T0 + HOUR),
        "cron": "0 * * * *",
        "tz": "Mars/Olympus_Mons",
    }
    return {**entry, **fields}


def journal_lines(root: Path) -> list[dict[str, Any]]:
    text = (root / "schedule" / "wakeups.journal").read_text()
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize(
    ("unusable", "why"),
    [
        ({}, 'invalid cron/tz: unknown time zone "Mars/Olympus_Mons"'),
        (  # a cron of seconds (a newer version's, say)
            {"tz": None, "cron": "*/5 * * * * *"},
            "invalid cron/tz: expected 5 fields (minute hour day-of-month month day-of-week), "
            "got 6 — seconds and year fields are not supported",
        ),
        ({"attempts": "many"}, "expected an integer, got str"),  # a shape not read here
    ],
    ids=["zone", "cron", "shape"],
)
async def test_an_entry_this_version_cannot_use_outlives_a_compaction_and_is_never_fired(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, unusable: dict[str, Any], why: str
) -> None:
    store = DirectoryStore(tmp_path)
    first = await store.add_wakeup(WakeupRequest(session="s", prompt="p", fire_at=T0 + HOUR), T0)
    written = foreign("kept", **unusable)
    journal = tmp_path / "schedule" / "wakeups.journal"
    with journal.open("a") as handle:
        handle.write(json.dumps({"op": "add", "n": 2, "wakeup": written}) + "\n")
        handle.write("not json: damage, so the next change compacts\n")
    last = await store.add_wakeup(WakeupRequest(session="s", prompt="p", fire_at=T0 + HOUR), T0)
    assert [line.get("wakeup", {}).get("id") for line in journal_lines(tmp_path)[1:]] == [
        first.id,
        "kept",
        last.id,
    ]
    assert journal_lines(tmp_path)[2] == {"op": "add", "n": 2, "wakeup": written}  # as written
    assert [
        r.getMessage() for r in caplog.records if "cannot be used by this version" in r.getMessage()
    ] == [
        f"wake-up kept of session 's' cannot be used by this version ({why}): kept as "
        f"written in {journal}, never fired here"
    ]
    again = DirectoryStore(tmp_path)  # another process reads the new generation
    assert [w.id for w in await again.list_wakeups()] == [first.id, last.id]
    taken = [await again.take_due_wakeup(T0 + 2 * HOUR) for _ in range(3)]
    assert [w.id if w else None for w in taken] == [first.id, last.id, None]
    assert "kept" in {line.get("wakeup", {}).get("id") for line in journal_lines(tmp_path)}


async def test_an_entry_kept_unused_is_removed_by_its_id_within_its_session(
    tmp_path: Path,
) -> None:
    store = DirectoryStore(tmp_path)
    await store.add_wakeup(WakeupRequest(session="s", prompt="p", fire_at=T0 + HOUR), T0)
    with (tmp_path / "schedule" / "wakeups.journal").open("a") as handle:
        handle.write(json.dumps({"op": "add", "n": 5, "wakeup": foreign("kept")}) + "\n")
    assert await store.remove_wakeup("kept", "another session") is False
    assert await store.remove_wakeup("kept", "s") is True
    assert await store.remove_wakeup("kept", "s") is False  # gone
    assert journal_lines(tmp_path)[-1] == {"op": "del", "id": "kept"}
    assert len(await DirectoryStore(tmp_path).list_wakeups()) == 1


async def test_an_entry_kept_unused_counts_toward_the_stores_room(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It is stored, as PostgreSQL's row is: one place of the store's room, and its text's
    # bytes (its session, its prompt "éé" written by hand, its cron and its zone: 31) part of
    # the room's text.
    monkeypatch.setattr(wakelimits, "MAX_PENDING", 2)
    monkeypatch.setattr(wakelimits, "MAX_PENDING_TEXT", 35)
    store = DirectoryStore(tmp_path)
    await store.add_wakeup(WakeupRequest(session="s", prompt="p", fire_at=T0 + HOUR), T0)
    with (tmp_path / "schedule" / "wakeups.journal").open("a") as handle:
        handle.write(
            json.dumps({"op": "add", "n": 5, "wakeup": foreign("kept", prompt="éé")}) + "\n"
        )
    request = WakeupRequest(session="t", prompt="p", fire_at=T0 + HOUR)
    with pytest.raises(InvalidWakeup, match="the store holds 2 pending wake-ups"):
        await store.add_wakeup(request, T0)
    monkeypatch.setattr(wakelimits, "MAX_PENDING", 3)
    with pytest.raises(InvalidWakeup, match="fills the store's room"):  # 2 + 31 + 3 bytes
        await store.add_wakeup(WakeupRequest(session="t", prompt="pp", fire_at=T0 + HOUR), T0)
    await store.add_wakeup(request, T0)  # 2 + 31 + 2: full
    assert await store.remove_wakeup("kept", "s")
    await store.add_wakeup(request, T0)


def usable(wakeup_id: str, **fields: Any) -> dict[str, Any]:
    return {**foreign(wakeup_id), "tz": "UTC", **fields}


def test_a_set_moves_an_entry_between_used_and_kept_in_its_place() -> None:
    # A newer version advanced an entry in a way this one cannot read, then back again.
    index = WakeupIndex()
    for n, wakeup_id in enumerate(("a", "b", "c"), 1):
        assert index.apply({"op": "add", "n": n, "wakeup": usable(wakeup_id)}) is None
    why = (
        "wake-up b of session 's' cannot be used by this version "
        '(invalid cron/tz: unknown time zone "Mars/Olympus_Mons")'
    )
    assert index.apply({"op": "set", "wakeup": foreign("b")}) == why
    assert [w.id for w in index] == ["a", "c"]
    assert index.kept_session("b") == "s"
    assert [op["n"] for op in index.stored()] == [1, 2, 3]
    assert index.stored()[1] == {"op": "add", "n": 2, "wakeup": foreign("b")}
    assert index.apply({"op": "set", "wakeup": foreign("b", prompt="q")}) == why  # still kept
    assert index.stored()[1]["wakeup"]["prompt"] == "q"
    with pytest.raises(ValueError, match="moves it to another session"):
        index.apply({"op": "set", "wakeup": foreign("b", session="t")})
    with pytest.raises(ValueError, match="already pending"):
        index.apply({"op": "add", "n": 9, "wakeup": foreign("b")})
    assert index.apply({"op": "set", "wakeup": usable("b")}) is None  # readable again
    assert [w.id for w in index] == ["a", "b", "c"]
    assert index.kept_session("b") is None
    assert index.order_of("b") == 2


def test_a_kept_entry_removed_is_put_back_as_written_by_its_inverse() -> None:
    index = WakeupIndex()
    index.apply({"op": "add", "n": 4, "wakeup": foreign("k")})
    assert index.next_n == 5  # its order number is taken
    assert index.inverse([del_op("k")]) == [{"op": "add", "n": 4, "wakeup": foreign("k")}]
    # With the changes after it in the same batch undone too, last first.
    other = {"op": "add", "n": 5, "wakeup": usable("o")}
    assert index.inverse([del_op("k"), other]) == [
        del_op("o"),
        {"op": "add", "n": 4, "wakeup": foreign("k")},
    ]
    index.apply(del_op("k"))
    assert index.stored() == []
    assert index.kept_session("k") is None
    with pytest.raises(ValueError, match="not pending"):
        index.apply(del_op("k"))


def test_an_entry_that_names_no_id_or_session_is_damage_not_kept() -> None:
    index = WakeupIndex()
    for broken in ({"session": "s"}, {"id": "x"}, {"id": "", "session": "s"}, "an entry"):
        with pytest.raises(ValueError, match=r"without an id and a session|must be an object"):
            index.apply({"op": "add", "n": 1, "wakeup": broken})
    # An id or a session no store can hold (a lone surrogate) is damage, even in a shape this
    # version would keep unread: no `unwake` could name it.
    for field in ("id", "session"):
        unheld = foreign("x", attempts="many", **{field: "x\ud800"})
        with pytest.raises(ValueError, match=f"^the {field} is not storable text"):
            index.apply({"op": "add", "n": 1, "wakeup": unheld})
    assert index.stored() == []


async def test_a_wake_up_set_unusable_meanwhile_is_deferred_in_its_place(
    tmp_path: Path,
) -> None:
    # Taken here, then set by another replica in a form this version cannot read: the
    # deferral's add met it kept, failed with a traceback after its line was written, and left
    # a line every reader took for damage.
    store = DirectoryStore(tmp_path)
    added = await store.add_wakeup(
        WakeupRequest(session="s", prompt="p", cron="0 * * * *"), T0 - HOUR
    )
    taken = await store.take_due_wakeup(T0 + HOUR)
    assert taken is not None
    assert taken.id == added.id
    written = foreign(added.id)
    with (tmp_path / "schedule" / "wakeups.journal").open("a") as handle:
        handle.write(json.dumps({"op": "set", "wakeup": written}) + "\n")
    assert await store.defer_wakeup(taken, T0 + 2 * HOUR) is True
    again = DirectoryStore(tmp_path)
    assert [w.id for w in await again.list_wakeups()] == [added.id]
    assert not any(
        line.get("op") not in ("gen", "add", "set", "del") for line in journal_lines(tmp_path)
    )


async def test_entries_kept_unused_count_toward_when_the_journal_is_rewritten(
    tmp_path: Path,
) -> None:
    # Past 4,096 kept entries beyond the pending ones, every write rewrote the whole journal.
    store = DirectoryStore(tmp_path)
    await store.add_wakeup(WakeupRequest(session="s", prompt="p", fire_at=T0 + HOUR), T0)
    lines = [json.dumps({"op": "add", "n": n, "wakeup": foreign(f"k{n}")}) for n in range(2, 5002)]
    with (tmp_path / "schedule" / "wakeups.journal").open("a") as handle:
        handle.write("\n".join(lines) + "\nnot json: damage, so the next change compacts\n")
    generations = set()
    for _ in range(4):
        await store.add_wakeup(WakeupRequest(session="t", prompt="p", fire_at=T0 + HOUR), T0)
        generations.add(journal_lines(tmp_path)[0]["id"])
    assert len(generations) == 1  # compacted once, then appended to
    assert len(journal_lines(tmp_path)) == 1 + 1 + 5000 + 4
