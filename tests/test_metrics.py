"""The Prometheus text the runtime writes for GET /metrics."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import trio
import trio.testing
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from trio_routines import Outcome, Routine, Scheduler, StateFault
from trio_routines.metrics import Metrics
from trio_routines.prometheus import register
from trio_routines.testing import Complete, MemoryStore, ScriptedAgent, WallClock


def test_rendering() -> None:
    metrics = Metrics()
    metrics.fired('we"ird\nname\\', "completed", 250, 0.003)
    metrics.fired("daily", "failed", 90_000, 12.0)
    metrics.refuse("daily", "stale")
    text = metrics.render(in_flight=2, armed=3, clock_jumps=1)
    assert 'trio_routines_fires_total{routine="we\\"ird\\nname\\\\",outcome="completed"} 1' in text
    assert 'trio_routines_fires_total{routine="daily",outcome="failed"} 1' in text
    assert 'trio_routines_claims_refused_total{routine="daily",reason="stale"} 1' in text
    assert 'trio_routines_turn_seconds_bucket{routine="daily",le="60"} 0' in text
    assert 'trio_routines_turn_seconds_bucket{routine="daily",le="300"} 1' in text
    assert 'trio_routines_turn_seconds_sum{routine="daily"} 90' in text
    assert 'trio_routines_lateness_seconds_bucket{routine="daily",le="5"} 0' in text
    assert 'trio_routines_lateness_seconds_bucket{routine="daily",le="30"} 1' in text
    assert "trio_routines_clock_jumps_total 1" in text
    assert "trio_routines_in_flight 2" in text
    assert "trio_routines_armed_routines 3" in text
    assert text.endswith("\n")
    assert len(text.splitlines()) == len(set(text.splitlines()))  # no series written twice


def test_a_pause_is_shown_only_for_a_loaded_routine() -> None:
    # A removed routine's pause stays in the store (it shows again if the routine comes
    # back), but no alert should say a routine that is gone has been paused for long.
    metrics = Metrics()
    snapshot: dict[str, Any] = {"in_flight": 0, "armed": 1, "clock_jumps": 0}
    paused = ("gone", "held")
    every = metrics.render(**snapshot, paused=paused)
    assert 'trio_routines_routine_paused{routine="gone"} 1' in every
    assert 'trio_routines_routine_paused{routine="held"} 1' in every
    shown = metrics.render(**snapshot, paused=paused, loaded=("held", "other"))
    assert 'trio_routines_routine_paused{routine="gone"}' not in shown
    assert 'trio_routines_routine_paused{routine="held"} 1' in shown
    assert 'trio_routines_routine_paused{routine="other"}' not in shown


# -- one set of series, two ways out -------------------------------------------------------------


def _parsed(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


def _samples(families: Iterable[Any]) -> set[tuple[str, tuple[tuple[str, str], ...], float]]:
    return {(s.name, tuple(sorted(s.labels.items())), s.value) for f in families for s in f.samples}


@asynccontextmanager
async def _scheduler_after_a_fire(clock: trio.testing.MockClock) -> AsyncIterator[Scheduler]:
    """A scheduler an hour into its run, after its fire: still running (a stopped one has
    nothing armed), until the block ends."""
    wall = WallClock(datetime(2026, 7, 7, 6, 59, 50, tzinfo=UTC))
    store = MemoryStore()
    # Completed on a previous run: seeds the last success at boot.
    await store.claim(
        "weekly", datetime(2026, 7, 6, 8, tzinfo=UTC), datetime(2026, 7, 6, 8, tzinfo=UTC)
    )
    await store.settle("weekly", datetime(2026, 7, 6, 8, tzinfo=UTC), Outcome.COMPLETED, 1500)
    agent = ScriptedAgent(Complete(duration=2.0))
    routines = [
        Routine(name="daily", prompt="p", cron="0 9 * * *", tz="Europe/Berlin"),
        Routine(name="weekly", prompt="p", cron="0 10 * * 1", tz="Europe/Berlin"),
    ]
    scheduler = Scheduler(agent=agent, store=store, routines=routines, now=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.sleep(3600)  # virtual: the 09:00 Berlin slot fires 10 s in, 2 s long
        [fire] = await store.history("daily")
        assert fire.outcome is Outcome.COMPLETED
        yield scheduler
        nursery.cancel_scope.cancel()


async def test_the_text_parses_with_prometheus_clients_own_parser_help_and_type_on_every_family(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with _scheduler_after_a_fire(autojump_clock) as scheduler:
        text = scheduler.render_metrics()
        families = _parsed(text)
        ours = scheduler.metric_families()
        assert {f.name for f in ours} == set(families)
        for family in ours:
            parsed = families[family.name]
            assert parsed.type == family.kind
            assert parsed.documentation == family.help
            assert family.help
        # Every family announces itself before its samples, once.
        for family in ours:
            shown = family.name + ("_total" if family.kind == "counter" else "")
            assert text.count(f"# HELP {shown} ") == 1
            assert text.count(f"# TYPE {shown} {family.kind}\n") == 1
        fired_at = datetime(2026, 7, 7, 7, tzinfo=UTC) + timedelta(seconds=2)
        samples = _samples(families.values())
        assert (
            "trio_routines_last_success_timestamp_seconds",
            (("routine", "daily"),),
            fired_at.timestamp(),
        ) in samples
        seeded = datetime(2026, 7, 6, 8, 0, 1, 500_000, tzinfo=UTC).timestamp()
        assert (
            "trio_routines_last_success_timestamp_seconds",
            (("routine", "weekly"),),
            seeded,
        ) in samples
        # Next: tomorrow 09:00 Berlin (07:00Z) and Monday 10:00 Berlin (08:00Z).
        assert (
            "trio_routines_next_fire_timestamp_seconds",
            (("routine", "daily"),),
            datetime(2026, 7, 8, 7, tzinfo=UTC).timestamp(),
        ) in samples
        assert (
            "trio_routines_next_fire_timestamp_seconds",
            (("routine", "weekly"),),
            datetime(2026, 7, 13, 8, tzinfo=UTC).timestamp(),
        ) in samples
        assert (
            "trio_routines_fires_total",
            (("outcome", "completed"), ("routine", "daily")),
            1.0,
        ) in samples


async def test_a_routine_removed_by_a_reload_loses_its_success_and_failure_gauges(
    autojump_clock: trio.testing.MockClock,
) -> None:
    # Left behind, "no success for a day" would fire for a routine that is gone; its counters
    # (which only grow) stay.
    async with _scheduler_after_a_fire(autojump_clock) as scheduler:
        scheduler.update_routines([scheduler.routines["weekly"]])
        shown = [[*key] for *key, _ in _samples(_parsed(scheduler.render_metrics()).values())]
        daily = (("routine", "daily"),)
        weekly = (("routine", "weekly"),)
        assert ["trio_routines_last_success_timestamp_seconds", daily] not in shown
        assert ["trio_routines_consecutive_failures", daily] not in shown
        assert ["trio_routines_last_success_timestamp_seconds", weekly] in shown
        assert ["trio_routines_consecutive_failures", weekly] in shown
        fired = ["trio_routines_fires_total", (("outcome", "completed"), ("routine", "daily"))]
        assert fired in shown
        scheduler.update_routines(
            [scheduler.routines["weekly"], Routine(name="daily", prompt="p", cron="0 9 * * *")]
        )  # added again: its history's success is shown again
        again = _samples(_parsed(scheduler.render_metrics()).values())
        assert any(
            name == "trio_routines_last_success_timestamp_seconds" and labels == daily
            for name, labels, _ in again
        )


async def test_the_collector_gives_a_registry_the_same_series(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with _scheduler_after_a_fire(autojump_clock) as scheduler:
        registry = CollectorRegistry()
        collector = register(scheduler, registry)
        through_client = generate_latest(registry).decode()
        ours = scheduler.render_metrics()
        assert _samples(text_string_to_metric_families(through_client)) == _samples(
            text_string_to_metric_families(ours)
        )
        assert {
            (f.name, f.type, f.documentation) for f in text_string_to_metric_families(ours)
        } == {(f.name, f.type, f.documentation) for f in registry.collect()}
        registry.unregister(collector)
        assert list(registry.collect()) == []


async def test_a_registry_refuses_the_series_a_second_time_and_keeps_one_copy(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with _scheduler_after_a_fire(autojump_clock) as scheduler:
        registry = CollectorRegistry()  # describes nothing by itself: the collector must
        collector = register(scheduler, registry)
        once = generate_latest(registry)
        with pytest.raises(ValueError, match=r"^Duplicated timeseries in CollectorRegistry: "):
            register(scheduler, registry)
        assert generate_latest(registry) == once
        described = {(f.name, f.documentation, f.type) for f in collector.describe()}
        assert described == {(f.name, f.documentation, f.type) for f in collector.collect()}
        assert all(f.samples == [] for f in collector.describe())
        registry.unregister(collector)
        register(scheduler, registry)  # once let go, it may be registered again
        assert generate_latest(registry) == once


# -- a turn that died with its process -----------------------------------------------------------


def _series(scheduler: Scheduler, name: str, routine: str) -> dict[str, float]:
    """The samples of family ``name`` for ``routine``: by outcome, or ``""`` when unlabelled."""
    family = _parsed(scheduler.render_metrics())[name]
    return {
        s.labels.get("outcome", ""): s.value
        for s in family.samples
        if s.labels.get("routine") == routine and not s.name.endswith("_created")
    }


async def died_mid_turn(store: MemoryStore, t0: datetime, first: Outcome) -> Scheduler:
    """An hourly routine's claims three hours before ``t0`` (``first``, 2 s), two (failed)
    and one, left open by a replica that died mid-turn; and a scheduler five minutes after."""
    hour = timedelta(hours=1)
    await store.claim("hourly", t0 - 3 * hour, t0 - 3 * hour, replica="gone:1")
    await store.settle("hourly", t0 - 3 * hour, first, 2000)
    await store.claim("hourly", t0 - 2 * hour, t0 - 2 * hour, replica="gone:1")
    await store.settle("hourly", t0 - 2 * hour, Outcome.FAILED, 10, error="no")
    await store.claim("hourly", t0 - hour, t0 - hour, replica="gone:1")  # its process died
    routines = [Routine(name="hourly", prompt="p", cron="0 * * * *")]
    wall = WallClock(t0 - hour + timedelta(minutes=5))
    return Scheduler(agent=ScriptedAgent(), store=store, routines=routines, now=wall)


async def test_a_turn_that_died_with_its_process_counts_as_interrupted_at_the_next_boot(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A restarted replica records the claim its process left open ``interrupted``: counted,
    in the failure streak, and the last success stays the last completed turn's end, not the
    open claim's slot (the boot read the newest claim before recording it)."""
    hour = timedelta(hours=1)
    t0 = datetime(2026, 7, 7, 9, tzinfo=UTC)
    store = MemoryStore()
    scheduler = await died_mid_turn(store, t0, Outcome.COMPLETED)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        # Counted by the boot, one failure more; its history is read after the boot.
        assert _series(scheduler, "trio_routines_fires", "hourly") == {"interrupted": 1.0}
        assert _series(scheduler, "trio_routines_consecutive_failures", "hourly") == {"": 1.0}
        await trio.testing.wait_all_tasks_blocked()
        [*_, open_one] = await store.history("hourly")
        assert open_one.outcome is Outcome.INTERRUPTED
        assert _series(scheduler, "trio_routines_fires", "hourly") == {"interrupted": 1.0}
        assert _series(scheduler, "trio_routines_consecutive_failures", "hourly") == {"": 2.0}
        last = (t0 - 3 * hour + timedelta(seconds=2)).timestamp()
        assert _series(scheduler, "trio_routines_last_success_timestamp_seconds", "hourly") == {
            "": last
        }
        nursery.cancel_scope.cancel()


class SettledMeanwhile(MemoryStore):
    """A store where another process settles the claim just before the boot's
    ``interrupted`` arrives: the turn's own process ``completed`` (a rolling restart), or
    another replica's watch ``interrupted`` in its own words. The boot's settle then writes
    nothing, and answers True all the same, as the contract says."""

    def __init__(self, outcome: Outcome, error: str | None) -> None:
        super().__init__()
        self.meanwhile = (outcome, error)

    async def settle(
        self, routine: str, slot: datetime, outcome: Outcome, *args: Any, **kw: Any
    ) -> bool:
        if kw.get("if_unsettled"):
            done, why = self.meanwhile
            await super().settle(routine, slot, done, 1000, error=why)
        return await super().settle(routine, slot, outcome, *args, **kw)


@pytest.mark.parametrize(
    ("outcome", "error", "failing"),
    [(Outcome.COMPLETED, None, 0), (Outcome.INTERRUPTED, "another replica's words", 1)],
)
async def test_a_claim_settled_meanwhile_by_another_process_is_not_counted_here(
    autojump_clock: trio.testing.MockClock, outcome: Outcome, error: str | None, failing: int
) -> None:
    """Not counted, and the routine's streak seeded from the record that landed, as a boot
    seeds one it finds settled."""
    t0 = datetime(2026, 7, 7, 9, tzinfo=UTC)
    store = SettledMeanwhile(outcome, error)
    await store.claim("hourly", t0 - timedelta(hours=1), t0 - timedelta(hours=1), replica="old:1")
    routines = [Routine(name="hourly", prompt="p", cron="0 * * * *")]
    wall = WallClock(t0 - timedelta(minutes=55))
    scheduler = Scheduler(agent=ScriptedAgent(), store=store, routines=routines, now=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        [fire] = await store.history("hourly")
        assert (fire.outcome, fire.error) == (outcome, error)  # the other's record stands
        assert _series(scheduler, "trio_routines_fires", "hourly") == {}
        assert _series(scheduler, "trio_routines_consecutive_failures", "hourly") == {
            "": float(failing)
        }
        nursery.cancel_scope.cancel()


class UnreadableAfterTheRecord(MemoryStore):
    """A store whose newest claims become unreadable once the boot recorded one interrupted."""

    async def settle(self, routine: str, slot: datetime, *args: Any, **kw: Any) -> bool:
        written = await super().settle(routine, slot, *args, **kw)
        if kw.get("if_unsettled"):
            self.fail("latest_fire", StateFault("the disk went away"))
        return written


async def test_a_record_unreadable_after_it_was_written_seeds_the_series_from_the_claim(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The boot recorded the claim interrupted, then cannot read it back to count it: the
    routine's series are made as for any open claim (from its slot), nothing counted."""
    t0 = datetime(2026, 7, 7, 9, tzinfo=UTC)
    slot = t0 - timedelta(hours=1)
    store = UnreadableAfterTheRecord()
    await store.claim("hourly", slot, slot, replica="old:1")
    routines = [Routine(name="hourly", prompt="p", cron="0 * * * *")]
    wall = WallClock(t0 - timedelta(minutes=55))
    scheduler = Scheduler(agent=ScriptedAgent(), store=store, routines=routines, now=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        assert _series(scheduler, "trio_routines_fires", "hourly") == {}
        assert scheduler.metrics.last_success == {"hourly": slot}
        nursery.cancel_scope.cancel()


async def test_a_history_unreadable_after_the_boot_leaves_the_record_s_own_streak(
    mock_clock: trio.testing.MockClock,
) -> None:
    """Counted from the record read back; its history cannot be read after the boot: the
    streak stays the one failure the record is, failing since its slot."""
    t0 = datetime(2026, 7, 7, 9, tzinfo=UTC)
    slot = t0 - timedelta(hours=1)
    store = MemoryStore()
    await store.claim("hourly", slot - timedelta(hours=1), slot, replica="old:1")
    await store.settle("hourly", slot - timedelta(hours=1), Outcome.FAILED, 5, error="no")
    await store.claim("hourly", slot, slot, replica="old:1")
    store.fail("history", StateFault("the disk went away"))
    routines = [Routine(name="hourly", prompt="p", cron="0 * * * *")]
    wall = WallClock(t0 - timedelta(minutes=55))
    scheduler = Scheduler(agent=ScriptedAgent(), store=store, routines=routines, now=wall)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        await trio.testing.wait_all_tasks_blocked()
        assert scheduler._parts.streaks.waiting == 0
        assert _series(scheduler, "trio_routines_fires", "hourly") == {"interrupted": 1.0}
        assert _series(scheduler, "trio_routines_consecutive_failures", "hourly") == {"": 1.0}
        assert scheduler.metrics.last_success == {"hourly": slot}
        nursery.cancel_scope.cancel()


class ClaimedNext(MemoryStore):
    """A store where another replica claims the routine's next slot just after the boot
    recorded its open claim interrupted: the newest claim read back is then that one."""

    def __init__(self, after: datetime) -> None:
        super().__init__()
        self.after = after

    async def settle(
        self, routine: str, slot: datetime, outcome: Outcome, *args: Any, **kw: Any
    ) -> bool:
        written = await super().settle(routine, slot, outcome, *args, **kw)
        if kw.get("if_unsettled"):
            await super().claim(routine, self.after, self.after, replica="other:1")
        return written


@pytest.mark.parametrize("completed_before", [True, False])
async def test_a_record_behind_a_newer_claim_is_counted_from_the_history(
    autojump_clock: trio.testing.MockClock, completed_before: bool
) -> None:
    """The newest claim read back is another replica's, made meanwhile: the record is looked
    for in the history, which gives the streak and the last success at once."""
    t0 = datetime(2026, 7, 7, 9, tzinfo=UTC)
    store = ClaimedNext(after=t0)
    first = t0 - timedelta(hours=3)
    outcome = Outcome.COMPLETED if completed_before else Outcome.FAILED
    scheduler = await died_mid_turn(store, t0, outcome)
    async with trio.open_nursery() as nursery:
        await nursery.start(scheduler.run)
        # Counted at the boot itself, from the history: no read left for after it.
        assert scheduler._parts.streaks.waiting == 0
        assert _series(scheduler, "trio_routines_fires", "hourly") == {"interrupted": 1.0}
        failing = 2.0 if completed_before else 3.0
        assert _series(scheduler, "trio_routines_consecutive_failures", "hourly") == {"": failing}
        last = (first + timedelta(seconds=2)) if completed_before else first
        assert _series(scheduler, "trio_routines_last_success_timestamp_seconds", "hourly") == {
            "": last.timestamp()
        }
        nursery.cancel_scope.cancel()
