"""The runtime's series pinned whole (metrics.py): the exposition of every family, line by line,
and what each call counts into them (see docs/mutation.md)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from prometheus_client.parser import text_string_to_metric_families

from trio_routines.metrics import Family, Metrics, Sample, render

T0 = datetime(2026, 7, 7, 7, tzinfo=UTC)  # 1783407600 in Unix time
HOUR = timedelta(hours=1)
QUIET = {"in_flight": 0, "armed": 0, "clock_jumps": 0}


def values(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of every family: (name, labels) -> value."""
    return {
        (sample.name, sample.labels): sample.value
        for family in metrics.families(**QUIET)
        for sample in family.samples
    }


def lines_of(metrics: Metrics, name: str) -> list[str]:
    return [line for line in metrics.render(**QUIET).splitlines() if line.startswith(name)]


EVERY_FAMILY = """\
# HELP trio_routines_fires_total Claimed slots by routine and outcome.
# TYPE trio_routines_fires_total counter
trio_routines_fires_total{routine="daily",outcome="completed"} 1
# HELP trio_routines_claims_refused_total Slots not claimed, by routine and reason \
(duplicate, stale or paused).
# TYPE trio_routines_claims_refused_total counter
trio_routines_claims_refused_total{routine="daily",reason="stale"} 1
# HELP trio_routines_slots_missed_total Slots passed over (never claimed), by routine and \
reason (overlap, down, paused, caught-up, late, store, removed): the gaps this scheduler recorded.
# TYPE trio_routines_slots_missed_total counter
trio_routines_slots_missed_total{routine="daily",reason="down"} 3
# HELP trio_routines_turn_seconds Turn duration of claimed slots.
# TYPE trio_routines_turn_seconds histogram
trio_routines_turn_seconds_bucket{routine="daily",le="0.1"} 0
trio_routines_turn_seconds_bucket{routine="daily",le="0.5"} 1
trio_routines_turn_seconds_bucket{routine="daily",le="1"} 1
trio_routines_turn_seconds_bucket{routine="daily",le="5"} 1
trio_routines_turn_seconds_bucket{routine="daily",le="15"} 1
trio_routines_turn_seconds_bucket{routine="daily",le="60"} 1
trio_routines_turn_seconds_bucket{routine="daily",le="300"} 1
trio_routines_turn_seconds_bucket{routine="daily",le="900"} 1
trio_routines_turn_seconds_bucket{routine="daily",le="3600"} 1
trio_routines_turn_seconds_bucket{routine="daily",le="+Inf"} 1
trio_routines_turn_seconds_sum{routine="daily"} 0.25
trio_routines_turn_seconds_count{routine="daily"} 1
# HELP trio_routines_lateness_seconds How late a claimed slot's turn began behind the slot.
# TYPE trio_routines_lateness_seconds histogram
trio_routines_lateness_seconds_bucket{routine="daily",le="0.005"} 1
trio_routines_lateness_seconds_bucket{routine="daily",le="0.01"} 1
trio_routines_lateness_seconds_bucket{routine="daily",le="0.05"} 1
trio_routines_lateness_seconds_bucket{routine="daily",le="0.1"} 1
trio_routines_lateness_seconds_bucket{routine="daily",le="0.5"} 1
trio_routines_lateness_seconds_bucket{routine="daily",le="1"} 1
trio_routines_lateness_seconds_bucket{routine="daily",le="5"} 1
trio_routines_lateness_seconds_bucket{routine="daily",le="30"} 1
trio_routines_lateness_seconds_bucket{routine="daily",le="60"} 1
trio_routines_lateness_seconds_bucket{routine="daily",le="300"} 1
trio_routines_lateness_seconds_bucket{routine="daily",le="+Inf"} 1
trio_routines_lateness_seconds_sum{routine="daily"} 0.003
trio_routines_lateness_seconds_count{routine="daily"} 1
# HELP trio_routines_loop_restarts_total Loops restarted after an unexpected exception \
(cron by routine, wake, clock).
# TYPE trio_routines_loop_restarts_total counter
trio_routines_loop_restarts_total{loop="cron",routine="daily"} 1
trio_routines_loop_restarts_total{loop="wake"} 1
# HELP trio_routines_tokens_total Tokens the agent reported its turns spent, by routine \
(empty for wake-up turns) and direction (in, out).
# TYPE trio_routines_tokens_total counter
trio_routines_tokens_total{routine="daily",direction="in"} 1000
trio_routines_tokens_total{routine="daily",direction="out"} 200
# HELP trio_routines_cost_total Cost the agent reported its turns spent, by routine (empty \
for wake-up turns) and currency.
# TYPE trio_routines_cost_total counter
trio_routines_cost_total{routine="daily",currency="USD"} 0.25
# HELP trio_routines_over_budget_total Turns not started because their budget was spent, by \
routine (empty for wake-up turns).
# TYPE trio_routines_over_budget_total counter
trio_routines_over_budget_total{routine=""} 1
# HELP trio_routines_settle_failures_total Outcomes lost: the store could not record them \
within the settle's retries.
# TYPE trio_routines_settle_failures_total counter
trio_routines_settle_failures_total{routine="daily"} 1
# HELP trio_routines_last_success_timestamp_seconds When a routine last completed a claimed \
slot (Unix time; seeded at boot from its claims). Before any success is known: the oldest \
instant known of it (its oldest claim, or when it was first armed here), so the series exists.
# TYPE trio_routines_last_success_timestamp_seconds gauge
trio_routines_last_success_timestamp_seconds{routine="daily"} 1783407600
# HELP trio_routines_consecutive_failures Claimed slots that ended failed or interrupted since \
the routine last completed one (skipped ones do not count; seeded at boot from its claims).
# TYPE trio_routines_consecutive_failures gauge
trio_routines_consecutive_failures{routine="daily"} 0
# HELP trio_routines_routine_paused 1 for each loaded routine paused in the store (it claims none).
# TYPE trio_routines_routine_paused gauge
trio_routines_routine_paused{routine="daily"} 1
# HELP trio_routines_routine_files_kept_broken Routine files a reload could not load, whose \
previous version still runs.
# TYPE trio_routines_routine_files_kept_broken gauge
trio_routines_routine_files_kept_broken 1
# HELP trio_routines_routine_files_broken Routine files the last reload could not load, \
skipped or their previous version kept: the next start refuses them.
# TYPE trio_routines_routine_files_broken gauge
trio_routines_routine_files_broken 2
# HELP trio_routines_pending_wakeups Wake-ups pending in the store (re-read every few polls \
of the wake loop).
# TYPE trio_routines_pending_wakeups gauge
trio_routines_pending_wakeups 4
# HELP trio_routines_next_fire_timestamp_seconds The next slot an armed routine will fire \
(Unix time).
# TYPE trio_routines_next_fire_timestamp_seconds gauge
trio_routines_next_fire_timestamp_seconds{routine="daily"} 1783494000
# HELP trio_routines_future_claim_timestamp_seconds A routine's newest claim, when it lies in \
the future (a clock that ran ahead): nothing fires before the first slot after it.
# TYPE trio_routines_future_claim_timestamp_seconds gauge
trio_routines_future_claim_timestamp_seconds{routine="daily"} 1783411200
# HELP trio_routines_clock_jumps_total Wall-clock jumps noticed.
# TYPE trio_routines_clock_jumps_total counter
trio_routines_clock_jumps_total 3
# HELP trio_routines_in_flight Fires and wake-up turns in flight.
# TYPE trio_routines_in_flight gauge
trio_routines_in_flight 1
# HELP trio_routines_armed_routines Cron routines with a next slot.
# TYPE trio_routines_armed_routines gauge
trio_routines_armed_routines 2
"""


def test_every_family_is_written_whole_its_name_type_help_and_samples() -> None:
    metrics = Metrics()
    metrics.fired("daily", "completed", 250, 0.003, at=T0)
    metrics.refuse("daily", "stale")
    metrics.slots_missed("daily", "down", 3)
    metrics.spent("daily", 1000, 200, 0.25, "USD")
    metrics.budget_stopped("")
    metrics.restarted("cron", "daily")
    metrics.restarted("wake", None)
    metrics.settle_failed("daily")
    text = metrics.render(
        in_flight=1,
        armed=2,
        clock_jumps=3,
        future_claims={"daily": T0 + HOUR},
        next_due={"daily": T0 + 24 * HOUR, "unarmed": None},
        paused=["daily"],
        kept_broken=["broken.md"],
        broken=["broken.md", "new.md"],
        pending_wakeups=4,
    )
    assert text == EVERY_FAMILY
    # Every family's samples carry its own name: a client's parser takes none for another's.
    parsed = {family.name: family for family in text_string_to_metric_families(text)}
    assert len(parsed) == 21
    assert all(family.samples for family in parsed.values())


def test_a_family_with_no_sample_is_still_announced_and_an_unknown_count_is_left_out() -> None:
    text = Metrics().render(**QUIET)
    assert "# TYPE trio_routines_fires_total counter\n# HELP trio_routines_claims" in text
    assert "pending_wakeups" in text
    assert "\ntrio_routines_pending_wakeups " not in text  # not read yet: no sample, not a 0


def test_every_fire_is_counted_and_the_failure_streak_follows_the_outcomes() -> None:
    metrics = Metrics()
    metrics.fired("r", "failed", 0, 0.0)  # the routine's first outcome: a streak of 1
    assert metrics.failing == {"r": 1}
    metrics.fired("r", "interrupted", 0, 0.0)
    metrics.fired("r", "failed", 0, 0.0)
    assert metrics.failing == {"r": 3}
    metrics.fired("r", "skipped", 0, 0.0)  # a skipped slot neither breaks nor extends it
    assert metrics.failing == {"r": 3}
    metrics.fired("r", "completed", 0, 0.0)
    metrics.fired("r", "completed", 0, 0.0)
    assert metrics.failing == {"r": 0}
    assert metrics.fires == {
        ("r", "failed"): 2,
        ("r", "interrupted"): 1,
        ("r", "skipped"): 1,
        ("r", "completed"): 2,
    }
    assert lines_of(metrics, "trio_routines_consecutive_failures") == [
        'trio_routines_consecutive_failures{routine="r"} 0'
    ]


def test_the_tally_counts_a_routines_outcomes_and_only_its_own() -> None:
    # What the streaks' read compares, to tell that a fire was counted meanwhile.
    metrics = Metrics()
    assert metrics.tally("r") == 0
    metrics.fired("r", "completed", 5, 0.0)
    metrics.fired("r", "failed", 5, 0.0)
    metrics.fired("other", "failed", 5, 0.0)
    metrics.found_interrupted("r")
    metrics.refuse("r", "duplicate")  # a claim refused is no outcome
    assert (metrics.tally("r"), metrics.tally("other"), metrics.tally("none")) == (3, 1, 0)


def test_only_a_completed_fire_with_its_instant_is_a_success() -> None:
    metrics = Metrics()
    metrics.fired("r", "failed", 0, 0.0, at=T0)
    metrics.fired("r", "interrupted", 0, 0.0, at=T0)
    metrics.fired("r", "completed", 0, 0.0)  # no instant given: nothing to show
    assert metrics.last_success == {}
    metrics.fired("r", "completed", 0, 0.0, at=T0)
    metrics.fired("r", "completed", 0, 0.0, at=T0 - HOUR)  # an older one does not go back
    assert metrics.last_success == {"r": T0}
    metrics.succeeded("r", T0 + HOUR)
    assert metrics.last_success == {"r": T0 + HOUR}


def test_the_oldest_instant_known_stands_in_for_a_success_until_one_is_known() -> None:
    metrics = Metrics()
    metrics.known_since("r", T0)  # first armed here then: none known before
    assert metrics.last_success == {"r": T0}
    metrics.known_since("r", T0 + HOUR)  # a later instant is not older
    assert metrics.last_success == {"r": T0}
    metrics.known_since("r", T0 - HOUR)
    assert metrics.last_success == {"r": T0 - HOUR}
    metrics.armed("r", T0 + HOUR, failing=2)  # arming keeps what is known already
    metrics.armed("new", T0 + HOUR, failing=2)
    assert metrics.last_success == {"r": T0 - HOUR, "new": T0 + HOUR}
    assert metrics.failing == {"r": 2, "new": 2}


def test_a_turns_duration_and_lateness_fill_their_buckets_sum_and_count() -> None:
    metrics = Metrics()
    metrics.fired("r", "completed", 100, -2.5)  # early counts as not late
    metrics.fired("r", "completed", 500, 0.25)
    metrics.fired("r", "failed", 2000, 0.5)
    got = values(metrics)
    r = (("routine", "r"),)

    def buckets(name: str, bounds: list[str]) -> list[float]:
        return [got[name + "_bucket", (*r, ("le", le))] for le in bounds]

    # A value on a bound is in that bucket ("le": less than or equal); the counts add up.
    turn = "trio_routines_turn_seconds"
    assert buckets(turn, ["0.1", "0.5", "1", "5", "3600", "+Inf"]) == [1, 2, 2, 3, 3, 3]
    assert (got[turn + "_sum", r], got[turn + "_count", r]) == (0.1 + 0.5 + 2.0, 3)
    late = "trio_routines_lateness_seconds"
    assert buckets(late, ["0.005", "0.1", "0.5", "300", "+Inf"]) == [1, 1, 3, 3, 3]
    assert (got[late + "_sum", r], got[late + "_count", r]) == (0.75, 3)


def test_spending_counts_only_what_was_reported_whole() -> None:
    metrics = Metrics()
    metrics.spent("r", None, None, 0.5, None)  # a cost without its currency
    metrics.spent("r", None, None, None, "USD")  # a currency without a cost
    metrics.spent("r", 0, 0, 0.5, "")
    assert (dict(metrics.tokens), dict(metrics.costs)) == ({}, {})
    metrics.spent("r", 10, None, 0.0, "EUR")
    metrics.spent("r", 5, 7, 0.25, "EUR")
    assert dict(metrics.tokens) == {("r", "in"): 15, ("r", "out"): 7}
    assert dict(metrics.costs) == {("r", "EUR"): 0.25}


def test_restarts_and_lost_settles_add_up_and_restarts_are_listed_by_loop_then_routine() -> None:
    metrics = Metrics()
    for loop, routine in [
        ("wake", None),
        ("cron", "b"),
        ("cron", "a b"),
        ("clock", None),
        ("cron", "a"),
        ("clock", None),
    ]:
        metrics.restarted(loop, routine)
    metrics.settle_failed("r")
    metrics.settle_failed("r")
    # Ordered as every other family: by name, "a" before "a b" (a loop of no routine has none).
    assert lines_of(metrics, "trio_routines_loop_restarts_total") == [
        'trio_routines_loop_restarts_total{loop="clock"} 2',
        'trio_routines_loop_restarts_total{loop="cron",routine="a"} 1',
        'trio_routines_loop_restarts_total{loop="cron",routine="a b"} 1',
        'trio_routines_loop_restarts_total{loop="cron",routine="b"} 1',
        'trio_routines_loop_restarts_total{loop="wake"} 1',
    ]
    assert lines_of(metrics, "trio_routines_settle_failures_total") == [
        'trio_routines_settle_failures_total{routine="r"} 2'
    ]
    # A loop counted both with and without a routine (the runtime never does): listed still,
    # the one without first.
    metrics.restarted("wake", "Alpha")
    assert lines_of(metrics, 'trio_routines_loop_restarts_total{loop="wake"') == [
        'trio_routines_loop_restarts_total{loop="wake"} 1',
        'trio_routines_loop_restarts_total{loop="wake",routine="Alpha"} 1',
    ]


def test_render_escapes_help_and_labels_and_writes_every_kind_of_number() -> None:
    help_text = 'a back\\slash, a "quote"\nand a second line'
    family = Family(
        "x",
        "gauge",
        help_text,
        (
            Sample("x", (("k", 'quo"te\\\n'),), 2.0),
            Sample("x", (("k", "fraction"),), 0.125),
            Sample("x", (("k", "up"),), math.inf),
            Sample("x", (("k", "down"),), -math.inf),
            Sample("x", (("k", "negative"),), -3.0),
            Sample("x", (), 1e20),
        ),
    )
    text = render([family])
    assert text == (
        '# HELP x a back\\\\slash, a "quote"\\nand a second line\n'
        "# TYPE x gauge\n"
        'x{k="quo\\"te\\\\\\n"} 2\n'
        'x{k="fraction"} 0.125\n'
        'x{k="up"} +Inf\n'
        'x{k="down"} -Inf\n'
        'x{k="negative"} -3\n'
        "x 100000000000000000000\n"
    )
    # A client's parser reads back what was written.
    [parsed] = text_string_to_metric_families(text)
    assert parsed.documentation == help_text
    assert [(s.labels, s.value) for s in parsed.samples] == [
        ({"k": 'quo"te\\\n'}, 2.0),
        ({"k": "fraction"}, 0.125),
        ({"k": "up"}, math.inf),
        ({"k": "down"}, -math.inf),
        ({"k": "negative"}, -3.0),
        ({}, 1e20),
    ]


def test_a_value_above_every_bound_is_counted_only_in_the_last_bucket() -> None:
    metrics = Metrics()
    metrics.fired("r", "completed", 4_000_000, 400.0)  # over an hour, over five minutes late
    metrics.fired("r", "completed", 3_600_000, 300.0)  # on the last bounds
    got = values(metrics)
    r = (("routine", "r"),)
    for name, last in (
        ("trio_routines_turn_seconds", "3600"),
        ("trio_routines_lateness_seconds", "300"),
    ):
        assert got[name + "_bucket", (*r, ("le", last))] == 1
        assert got[name + "_bucket", (*r, ("le", "+Inf"))] == 2
        assert got[name + "_count", r] == 2


def test_a_turn_found_interrupted_counts_as_a_fire_and_takes_the_streak_it_is_given() -> None:
    metrics = Metrics()
    metrics.found_interrupted("r")  # a routine this process knew nothing of yet
    metrics.found_interrupted("r")
    assert (metrics.fires["r", "interrupted"], metrics.failing.get("r")) == (2, None)
    ended = datetime(2026, 7, 7, 9, tzinfo=UTC)
    metrics.found_interrupted("r", (3, ended))  # as the history holding it reads
    assert (metrics.fires["r", "interrupted"], metrics.failing["r"]) == (3, 3)
    assert metrics.last_success["r"] == ended
    metrics.found_interrupted("r", (1, ended - timedelta(hours=1)))  # never moves it back
    assert (metrics.failing["r"], metrics.last_success["r"]) == (1, ended)
    metrics.found_interrupted("r", (4, None))
    assert (metrics.failing["r"], metrics.last_success["r"]) == (4, ended)
    assert dict(metrics.fires) == {("r", "interrupted"): 5}
