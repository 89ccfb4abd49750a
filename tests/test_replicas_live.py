"""Replicas as real processes, on one state directory and on one PostgreSQL database.

A turn in flight in one process is held: another replica's boot leaves it alone (no false
``interrupted``), a ``run`` of its session from a third process answers busy without
starting, and no two turns of one session overlap. SIGKILL of the holder: a live replica
records the claim ``interrupted`` within its watch interval.
"""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta

import pytest
from procs import Env, assert_no_overlap, lines, stop, turn_spans, wait_for

from trio_routines.scheduler.members import SWEPT_INTERRUPTED
from trio_routines.scheduler.openclaims import OPEN_INTERRUPTED, SETTLED_ELSEWHERE, found_by


def _hour(back: int) -> datetime:
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    return now - timedelta(hours=back)


def _iso(slot: datetime) -> str:
    return slot.strftime("%Y-%m-%dT%H:%M:%S.000Z")


@pytest.fixture
def env(env_on_either_store: Env) -> Env:
    """On a state directory and on PostgreSQL (``conftest.py``)."""
    return env_on_either_store


@pytest.mark.slow
def test_a_turn_in_flight_is_held_across_another_replicas_boot(env: Env) -> None:
    env.routine("slow", cron="0 * * * *")
    # Each turn writes its start and end (wall seconds) to the marker.
    # ... and runs until the test says so (a file appears), at most a minute.
    go = env.root / "go"
    agent = (
        f'cmd:t=$$; echo "start $t $(date +%s.%N)" >> {env.marker}; '
        f"for _ in $(seq 600); do [ -e {go} ] && break; sleep 0.1; done; "
        f'echo "end $t $(date +%s.%N)" >> {env.marker}'
    )
    slot = _hour(2)
    holder = env.start(
        "fire",
        "slow",
        "--slot",
        _iso(slot),
        "--agent",
        agent,
        "--replica",
        "holder",
        log="holder.log",
    )
    wait_for(lambda: len(lines(env.marker)) >= 1, 30, "the holder's turn to start")
    other = env.start(
        "serve", "--agent", agent, "--replica", "booted", "--poll", "1", log="booted.log"
    )
    twin = env.start("serve", "--agent", agent, "--replica", "twin", "--poll", "1", log="twin.log")
    wait_for(lambda: "wake-ups:" in env.log("booted.log"), 30, "the second replica to boot")
    wait_for(lambda: "wake-ups:" in env.log("twin.log"), 30, "the third replica to boot")
    running = env.history("slow")
    assert [(h["slot"], h.get("outcome"), h.get("replica"), h.get("running")) for h in running] == [
        (_iso(slot), None, "holder", True)
    ]
    shown = env.cli("history", "slow").stdout.splitlines()
    assert shown[1].split()[3:5] == ["running", "-"]  # in flight, not unreported
    busy = env.cli("run", "slow", "--agent", agent, "--replica", "third")
    assert busy.returncode == 0, busy.stderr
    assert "session busy" in busy.stderr
    go.touch()  # the holder's turn may end now
    assert holder.wait(timeout=60) == 0
    for log in ("booted.log", "twin.log"):
        booted = env.log(log)
        assert "never finished" not in booted
        assert "is running on replica holder" in booted
    (done,) = env.history("slow")
    assert (done["outcome"], done["replica"]) == ("completed", "holder")
    assert "running" not in done
    assert len(turn_spans(env.marker)) == 1  # the busy run started nothing

    # SIGKILL of a holder mid-turn: the live replica records its claim interrupted.
    go.unlink()
    later = _hour(1)
    killed = env.start(
        "fire",
        "slow",
        "--slot",
        _iso(later),
        "--agent",
        agent,
        "--replica",
        "killed",
        log="killed.log",
    )
    wait_for(lambda: len(lines(env.marker)) >= 3, 30, "the second holder's turn to start")
    killed.send_signal(signal.SIGKILL)
    killed.wait()

    def interrupted() -> dict[str, object] | None:
        newest = env.history("slow")[-1]
        return newest if newest.get("outcome") == "interrupted" else None

    newest = wait_for(interrupted, 30, "the killed holder's claim to be recorded interrupted")
    assert (newest["slot"], newest["replica"]) == (_iso(later), "killed")
    # Recorded by the live replica's watch, by whichever of its two looks sees the holder dead
    # first: the sweep of dead members' newest claims, or the open claims whose hold is free
    # (a holder that dies between the watch's read of the members and its read of the holds).
    # Both live replicas look, each at its own watch: the one whose record landed says so,
    # and the other, if it came to it at all, that it was settled meanwhile.
    (writer,) = [
        replica
        for replica in ("booted", "twin")
        for reason in (SWEPT_INTERRUPTED, OPEN_INTERRUPTED)
        if newest["error"] == found_by(reason, replica)
    ]
    assert stop(other) == 0
    assert stop(twin) == 0
    slot_lines = {
        replica: [
            line.rpartition("; ")[2]
            for line in env.log(f"{replica}.log").splitlines()
            if f"slot {_iso(later)} claimed" in line and "never finished" in line
        ]
        for replica in ("booted", "twin")
    }
    assert slot_lines.pop(writer) == ["recorded as interrupted"]
    (others,) = slot_lines.values()
    assert others in ([], [SETTLED_ELSEWHERE])
    assert_no_overlap(turn_spans(env.marker))
