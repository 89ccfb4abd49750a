"""Changing the routines of a running scheduler: update_routines() and reload_routines()."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from trio_routines import Gap, GapReason, InvalidRoutine, Outcome, Routine, Scheduler
from trio_routines.testing import Complete, MemoryStore, ScriptedAgent, WallClock

T0 = datetime(2026, 7, 7, 10, 30, tzinfo=UTC)
HOURLY = Routine(name="hourly", prompt="p", cron="0 * * * *")
DAILY = Routine(name="daily", prompt="d", cron="0 9 * * *")


def at(hour: int, minute: int = 0) -> datetime:
    return datetime(2026, 7, 7, hour, minute, tzinfo=UTC)


class Rig:
    def __init__(self, *routines: Routine, store: MemoryStore | None = None) -> None:
        self.wall = WallClock(T0)
        self.store = store or MemoryStore()
        self.agent = ScriptedAgent(wall=self.wall)
        self.scheduler = Scheduler(
            agent=self.agent, store=self.store, routines=routines, now=self.wall, wakeups=False
        )

    async def until(self, when: datetime) -> None:
        await trio.sleep((when - self.wall()).total_seconds())

    def fired(self, session: str) -> list[tuple[datetime | None, str]]:
        return [(t.wall, t.text) for t in self.agent.turns if t.session == session]

    async def history(self, name: str) -> list[tuple[datetime, Outcome | None]]:
        return [(f.slot, f.outcome) for f in await self.store.history(name)]


@pytest.fixture(autouse=True)
def _capture(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_routines")


async def test_an_added_routine_arms_from_now_and_never_back_fires(autojump_clock: Any) -> None:
    store = MemoryStore()
    await store.claim("new", at(8), at(8))  # an earlier life of the same name
    await store.settle("new", at(8), Outcome.COMPLETED, 1)
    rig = Rig(HOURLY, store=store)
    new = Routine(name="new", prompt="n", cron="0 * * * *")
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.scheduler.run)
        await rig.until(at(10, 45))
        changes = rig.scheduler.update_routines([HOURLY, new])
        assert (changes.added, changes.changed, changes.removed) == (("new",), (), ())
        await trio.sleep(0.001)
        assert rig.scheduler.statistics().next_due == {"hourly": at(11), "new": at(11)}
        await rig.until(at(12, 30))
        rig.scheduler.stop()
    assert await rig.history("new") == [
        (at(8), Outcome.COMPLETED),  # 09:00 and 10:00 were missed, and stay so
        (at(11), Outcome.COMPLETED),
        (at(12), Outcome.COMPLETED),
    ]
    # ... recorded, as a boot records what it missed: no silent gaps.
    assert await store.gaps("new") == [Gap(at(9), at(10), 2, GapReason.REMOVED)]
    assert [w for w, _ in rig.fired("routine:hourly")] == [at(11), at(12)]  # untouched


async def test_a_routine_removed_and_added_again_records_what_it_passed_meanwhile(
    autojump_clock: Any,
) -> None:
    # The slots between the removal and the add went unrecorded: no claim, no gap, no count,
    # while a restart at the same moment recorded them.
    rig = Rig(HOURLY)
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.scheduler.run)
        await rig.until(at(11, 30))
        assert rig.scheduler.update_routines([]).removed == ("hourly",)
        await rig.until(at(14, 30))
        assert rig.scheduler.update_routines([HOURLY]).added == ("hourly",)
        await rig.until(at(15, 30))
        rig.scheduler.stop()
    assert [w for w, _ in rig.fired("routine:hourly")] == [at(11), at(15)]  # none caught up
    assert await rig.store.gaps("hourly") == [Gap(at(12), at(14), 3, GapReason.REMOVED)]
    metrics = rig.scheduler.render_metrics()
    assert 'trio_routines_slots_missed_total{routine="hourly",reason="removed"} 3' in metrics
    # Removed and added again before its next slot: nothing passed, nothing recorded.
    rig = Rig(HOURLY)
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.scheduler.run)
        await rig.until(at(11, 30))
        rig.scheduler.update_routines([])
        await rig.until(at(11, 40))
        rig.scheduler.update_routines([HOURLY])
        await rig.until(at(12, 30))
        rig.scheduler.stop()
    assert [w for w, _ in rig.fired("routine:hourly")] == [at(11), at(12)]
    assert await rig.store.gaps("hourly") == []


async def test_a_removed_routine_stops_and_its_fire_in_flight_settles(
    autojump_clock: Any,
) -> None:
    rig = Rig(HOURLY, DAILY)
    rig.agent.script(Complete(duration=600), session="routine:hourly")
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.scheduler.run)
        await rig.until(at(11, 5))  # the 11:00 turn runs until 11:10
        assert rig.scheduler.statistics().in_flight == 1
        changes = rig.scheduler.update_routines([DAILY])
        assert changes.removed == ("hourly",)
        assert rig.scheduler.statistics().armed == ("daily",)
        assert "hourly" not in rig.scheduler.statistics().next_due
        await rig.until(at(13, 30))
        assert rig.scheduler.statistics().in_flight == 0
        rig.scheduler.stop()
    assert await rig.history("hourly") == [(at(11), Outcome.COMPLETED)]
    assert [w for w, _ in rig.fired("routine:hourly")] == [at(11)]


async def test_a_changed_cron_re_arms_after_the_fire_in_flight_without_double_fire(
    autojump_clock: Any,
) -> None:
    rig = Rig(HOURLY)
    rig.agent.script(Complete(duration=600), session="routine:hourly")
    half_past = attrs.evolve(HOURLY, cron="30 * * * *", prompt="p2")
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.scheduler.run)
        await rig.until(at(11, 5))
        changes = rig.scheduler.update_routines([half_past])
        assert changes.changed == ("hourly",)
        await rig.until(at(11, 20))  # the old fire settled at 11:10, the new loop armed then
        assert rig.scheduler.statistics().next_due == {"hourly": at(11, 30)}
        await rig.until(at(12, 45))
        rig.scheduler.stop()
    assert await rig.history("hourly") == [
        (at(11), Outcome.COMPLETED),
        (at(11, 30), Outcome.COMPLETED),
        (at(12, 30), Outcome.COMPLETED),
    ]
    assert rig.fired("routine:hourly") == [(at(11), "p"), (at(11, 30), "p2"), (at(12, 30), "p2")]


async def test_a_changed_cron_never_catches_up_a_slot_it_would_have_had(
    autojump_clock: Any,
) -> None:
    store = MemoryStore()
    await store.claim("hourly", at(10), at(10))
    await store.settle("hourly", at(10), Outcome.COMPLETED, 1)
    rig = Rig(HOURLY, store=store)
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.scheduler.run)
        await rig.until(at(10, 45))
        # 10:40 lies between the newest claim and now: it is not fired
        rig.scheduler.update_routines([attrs.evolve(HOURLY, cron="40 * * * *")])
        await rig.until(at(11, 50))
        rig.scheduler.stop()
    assert [w for w, _ in rig.fired("routine:hourly")] == [at(11, 40)]


async def test_an_unchanged_routine_keeps_its_loop_and_nothing_is_logged(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(HOURLY)
    async with trio.open_nursery() as nursery:
        await nursery.start(rig.scheduler.run)
        await rig.until(at(10, 45))
        kept = rig.scheduler.routines["hourly"]
        changes = rig.scheduler.update_routines([attrs.evolve(HOURLY)])  # equal, not the same
        assert not changes
        assert rig.scheduler.routines["hourly"] is kept
        await rig.until(at(11, 30))
        rig.scheduler.stop()
    assert [w for w, _ in rig.fired("routine:hourly")] == [at(11)]
    assert not [r for r in caplog.records if "routines updated" in r.getMessage()]


async def test_two_routines_of_one_name_change_nothing(autojump_clock: Any) -> None:
    rig = Rig(HOURLY)
    with pytest.raises(InvalidRoutine, match="two routines are named 'x'"):
        rig.scheduler.update_routines(
            [HOURLY, Routine(name="x", prompt="a"), Routine(name="x", prompt="b")]
        )
    assert list(rig.scheduler.routines) == ["hourly"]


@pytest.mark.parametrize(
    ("routines", "error"),
    [
        ("abc", "routines must be a collection of Routine objects (routines=[...]): 'abc'"),
        (None, "routines must be a collection of Routine objects (routines=[...]): None"),
        (5, "routines must be a collection of Routine objects (routines=[...]): 5"),
        ([HOURLY, None], "routines must be Routine objects: None"),
        ([HOURLY, "x"], "routines must be Routine objects: 'x'"),
    ],
)
async def test_what_is_no_routine_is_refused_as_the_constructor_does(
    autojump_clock: Any, routines: Any, error: str
) -> None:
    rig = Rig(HOURLY)
    with pytest.raises(InvalidRoutine) as refused:
        rig.scheduler.update_routines(routines)
    assert str(refused.value) == error
    assert list(rig.scheduler.routines) == ["hourly"]
    with pytest.raises(InvalidRoutine, match=re.escape(error)):
        Scheduler(agent=ScriptedAgent(), store=MemoryStore(), routines=routines)


async def test_with_an_external_clock_routines_change_and_nothing_is_armed(
    autojump_clock: Any,
) -> None:
    wall = WallClock(T0)
    agent = ScriptedAgent(wall=wall)
    scheduler = Scheduler(
        agent=agent, store=MemoryStore(), routines=[HOURLY], now=wall, external_clock=True
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        scheduler.update_routines([HOURLY, DAILY])
        await trio.sleep(3 * 3600)
        assert scheduler.statistics().armed == ()
        result = await scheduler.fire("daily", datetime(2026, 7, 7, 9, tzinfo=UTC))
        assert result.claimed
        scheduler.stop()
    assert [t.session for t in agent.turns] == ["routine:daily"]


def write(directory: Path, name: str, cron: str, prompt: str = "do it") -> None:
    (directory / f"{name}.md").write_text(f"---\ncron: {cron}\n---\n{prompt}\n")


async def loaded_a_and_b(directory: Path) -> tuple[Rig, Routine]:
    """A scheduler that loaded ``a`` and ``b`` from ``directory``, and its version of ``a``."""
    write(directory, "a", "0 * * * *")
    write(directory, "b", "0 9 * * *")
    rig = Rig()
    changes = await rig.scheduler.reload_routines(directory)
    assert (changes.added, changes.kept) == (("a", "b"), ())
    return rig, rig.scheduler.routines["a"]


async def test_reload_from_a_directory_keeps_the_old_version_of_a_broken_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rig, old_a = await loaded_a_and_b(tmp_path)

    (tmp_path / "a.md").write_text("---\ncron: not a cron\n---\nbroken\n")
    (tmp_path / "b.md").unlink()
    write(tmp_path, "c", "*/5 * * * *")
    (tmp_path / "d.md").write_text("no front matter")
    caplog.clear()
    changes = await rig.scheduler.reload_routines(tmp_path)
    assert (changes.added, changes.changed, changes.removed, changes.kept) == (
        ("c",),
        (),
        ("b",),
        ("a",),
    )
    assert rig.scheduler.routines["a"] is old_a
    assert sorted(rig.scheduler.routines) == ["a", "c"]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2
    assert any(
        m.startswith("reload: ") and "a.md" in m and "keeping the version" in m for m in errors
    )
    assert any("d.md" in m and m.endswith("— skipped") for m in errors)


async def test_a_routine_file_replaced_by_a_directory_keeps_its_version_on_reload(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rig, old_a = await loaded_a_and_b(tmp_path)
    (tmp_path / "a.md").unlink()
    (tmp_path / "a.md").mkdir()
    caplog.clear()
    changes = await rig.scheduler.reload_routines(tmp_path)
    assert (changes.removed, changes.kept) == ((), ("a",))
    assert rig.scheduler.routines["a"] is old_a
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [
        f"reload: {tmp_path / 'a.md'}: is a directory, not a routine file — keeping the version"
        " loaded before"
    ]
    assert rig.scheduler.statistics().broken_files == (str(tmp_path / "a.md"),)


async def test_reload_from_a_directory_that_cannot_be_read_changes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(HOURLY)
    (tmp_path / "file").write_text("")
    changes = await rig.scheduler.reload_routines(tmp_path / "file")
    assert not changes
    assert list(rig.scheduler.routines) == ["hourly"]
    assert any("reload:" in r.getMessage() for r in caplog.records if r.levelno == logging.ERROR)


async def test_a_reload_of_a_directory_that_is_gone_changes_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(HOURLY, DAILY)
    for gone in (tmp_path / "missing", tmp_path / "dangling"):
        if gone.name == "dangling":
            gone.symlink_to(tmp_path / "nowhere")
        caplog.clear()
        changes = await rig.scheduler.reload_routines(gone)
        assert not changes
        assert sorted(rig.scheduler.routines) == ["daily", "hourly"]
        (error,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert error == (
            f"reload: {gone}: the routines directory is gone — the routines loaded before keep"
            " running"
        )


async def test_a_reload_that_would_remove_every_routine_needs_the_no_routines_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    rig = Rig(HOURLY, DAILY)
    (tmp_path / "notes.txt").write_text("not a routine")
    (tmp_path / "new.md").write_text("no front matter")  # broken, and never loaded before
    changes = await rig.scheduler.reload_routines(tmp_path)
    assert not changes
    assert sorted(rig.scheduler.routines) == ["daily", "hourly"]
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors[-1] == (
        f"reload: {tmp_path} holds no routine — not removing all 2 loaded (to run none, create"
        " .no-routines in it); the routines loaded before keep running"
    )
    # Its broken file is counted all the same: the next start would refuse it.
    assert rig.scheduler.statistics().broken_files == (str(tmp_path / "new.md"),)

    (tmp_path / "new.md").unlink()
    (tmp_path / ".no-routines").write_text("")
    changes = await rig.scheduler.reload_routines(tmp_path)
    assert changes.removed == ("hourly", "daily")
    assert rig.scheduler.routines == {}
    # Once none is loaded, an empty directory removes nothing and needs no word.
    (tmp_path / ".no-routines").unlink()
    caplog.clear()
    assert not await rig.scheduler.reload_routines(tmp_path)
    assert not [r for r in caplog.records if r.levelno == logging.ERROR]
    # The file means nothing while the directory holds routines.
    (tmp_path / ".no-routines").write_text("")
    write(tmp_path, "a", "0 * * * *")
    assert (await rig.scheduler.reload_routines(tmp_path)).added == ("a",)


async def test_a_reload_given_up_while_its_directory_does_not_answer_leaves_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mock_clock: trio.testing.MockClock
) -> None:
    # A SIGHUP, then a stop, while the routines' file system holds every read (a dead
    # mount): the reload is left to its thread, and what it reads later changes nothing.
    import threading

    from trio_routines.scheduler import reload as reloading

    write(tmp_path, "a", "0 * * * *")
    rig = Rig()
    entered, thaw, returned = threading.Event(), threading.Event(), threading.Event()
    real = reloading._load_again

    def hung(directory: Any) -> Any:
        entered.set()
        thaw.wait(10)
        returned.set()
        return real(directory)

    monkeypatch.setattr(reloading, "_load_again", hung)
    try:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(rig.scheduler.reload_routines, tmp_path)
                await trio.to_thread.run_sync(entered.wait, 10)
                scope.cancel()  # the stop
        left = not returned.is_set()
    finally:
        thaw.set()
    assert left  # it left before the directory answered
    assert "a" not in rig.scheduler.routines
