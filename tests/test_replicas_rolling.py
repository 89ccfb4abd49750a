"""A rolling restart of three replicas on one PostgreSQL database, under a minutely routine
whose turns take 75 s: no two turns of its session overlap, no running turn is called dead,
and every slot from the first fire on is claimed once (completed, skipped as busy, or
interrupted by a stop's grace)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pg import schema_url
from procs import Env, assert_no_overlap, before_a_minute, lines, stop, turn_spans, wait_for


@pytest.mark.slow
@pytest.mark.longest
def test_a_rolling_restart_of_three_replicas_under_long_turns(tmp_path: Path) -> None:
    with schema_url() as url:
        env = Env(tmp_path)
        env.state = url  # type: ignore[assignment]
        env.routine("slow", cron="* * * * *")
        # The replicas' wall clock starts 6 s before a minute boundary (they boot in ~3.5 s
        # here), so the first turn starts then; were they slower, it starts a minute later.
        env.clock = before_a_minute(tmp_path / "wall.faketime", 6)
        # The turn notes its start and its end (a stop's too), in wall seconds.
        note_end = f'echo "end $t $(date +%s.%N)" >> {env.marker}'
        agent = (
            f"cmd:t=$$; trap '{note_end}; exit 1' TERM; "
            f'echo "start $t $(date +%s.%N)" >> {env.marker}; sleep 75 & wait; {note_end}'
        )

        def start(n: int, generation: int) -> object:
            return env.start(
                "serve",
                "--agent",
                agent,
                "--replica",
                f"r{n}",
                "--grace",
                "2",
                "--poll",
                "1",
                log=f"r{n}-{generation}.log",
            )

        began = datetime.now(UTC)
        replicas = {n: start(n, 0) for n in range(3)}
        try:
            for n in range(3):
                wait_for(lambda n=n: "wake-ups:" in env.log(f"r{n}-0.log"), 30, f"r{n} up")
            wait_for(lambda: lines(env.marker), 90, "the first turn")
            for n in range(3):  # one at a time, 20 s apart, as a deploy does
                time.sleep(20)
                assert stop(replicas[n]) == 0  # type: ignore[arg-type]
                replicas[n] = start(n, 1)
                wait_for(lambda n=n: "wake-ups:" in env.log(f"r{n}-1.log"), 30, f"r{n} back")
            # The last restart came after the next minute's slot; five of the live replicas'
            # one-second watches, in which a running turn called dead would be logged.
            time.sleep(5)
        finally:
            for proc in replicas.values():
                stop(proc)  # type: ignore[arg-type]
        ended = datetime.now(UTC)

        spans = turn_spans(env.marker)
        assert_no_overlap(spans)
        logs = "".join(env.log(f"r{n}-{g}.log") for n in range(3) for g in range(2))
        assert "never finished" not in logs  # no running turn was called dead
        history = env.history("slow")
        slots = [datetime.fromisoformat(h["slot"].replace("Z", "+00:00")) for h in history]
        assert len(slots) == len(set(slots))  # each slot claimed once
        assert all(h.get("outcome") for h in history), history  # every claim settled
        for entry in history:
            if entry["outcome"] == "interrupted":
                assert entry["error"] == "interrupted by stop", entry  # a true interruption
        # From the first claim on, every minute is claimed: none passed over in silence.
        first = min(slots)
        minute = timedelta(minutes=1)
        expected = [first + k * minute for k in range(int((max(slots) - first) / minute) + 1)]
        assert sorted(slots) == expected, (sorted(slots), began, ended)
        assert {h["replica"] for h in history} <= {"r0", "r1", "r2"}
