"""Clock skew on real processes: ``serve`` under libfaketime, its wall clock moved while it runs.

Debian's ``faketime`` package ships ``libfaketime.so.1``; preloaded into ``serve`` it fakes the
wall clock only (``FAKETIME_DONT_FAKE_MONOTONIC=1``), so Trio's clock -- what the scheduler
sleeps on -- stays real, exactly as on a machine whose time is stepped by NTP or a VM restore.
The fake time is an offset read from a file at every call (``FAKETIME_TIMESTAMP_FILE`` with
``FAKETIME_NO_CACHE=1``), so a test moves the clock of a running process by rewriting it.

The scenarios put the faked clock a few seconds before a minute boundary, so that a
``* * * * *`` routine comes due without a minute of waiting, then jump. Checked: no slot fires
before its instant on the firing process's own clock, none fires twice (also across two
processes whose clocks disagree), a forward jump past several slots fires the one that was due
exactly once, and every jump is logged as a WARN.

Without libfaketime the tests skip, except under CI (``CI`` set), where they fail: CI
installs the ``faketime`` package.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from procs import Env, FakeClock, faketime_library, lines, wait_for

from trio_routines.instants import format_iso, parse_iso

pytestmark = pytest.mark.slow

M1 = datetime(2031, 3, 3, 10, 1, tzinfo=UTC)  # a minute boundary: a slot of "* * * * *"
LEAD = 4.0  # seconds between the faked start and M1: time enough to boot, little to wait


@pytest.fixture(scope="module")
def libfaketime() -> str:
    path = faketime_library()
    if path is None:
        message = "libfaketime is not installed (apt-get install faketime)"
        if os.environ.get("CI"):
            pytest.fail(message + " -- CI must install it")
        pytest.skip(message)
    return path


class Skew:
    def __init__(self, env: Env, library: str) -> None:
        self.env = env
        self.library = library
        self.procs: list[subprocess.Popen[bytes]] = []
        # The agent's shell would inherit the fake clock; it only needs `echo`, but unset it.
        self.agent = (
            f"cmd:env -u LD_PRELOAD sh -c "
            f"'echo \"$TRIO_ROUTINES_ROUTINE $TRIO_ROUTINES_SLOT\" >> {env.marker}'"
        )

    def clock(self, name: str) -> FakeClock:
        return FakeClock(self.env.root / f"{name}.faketime", self.library)

    def serve(self, clock: FakeClock, log: str) -> subprocess.Popen[bytes]:
        with (self.env.root / log).open("wb") as err:
            proc = subprocess.Popen(
                self.env.argv(
                    "serve",
                    "--agent",
                    self.agent,
                    "--poll",
                    "0.5",
                    "--grace",
                    "1",
                    "--log-level",
                    "debug",  # a duplicate claim is logged at DEBUG
                ),
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=self.env.root,
                env={**self.env.environ(), **clock.environ()},
            )
        self.procs.append(proc)
        return proc

    def serving(self, log: str) -> str:
        # The routine's "armed … — next …" line, which follows the "serving" one: the log is
        # read as it is written, and the first line alone says nothing of the next slot.
        text = wait_for(
            lambda: " — next " in self.env.log(log) and self.env.log(log), 20, f"{log} to boot"
        )
        # The faked start is close to M1; a boot slower than the lead would make the scenario
        # test something else, so say so rather than pass or fail for the wrong reason.
        assert f"next {format_iso(M1)}" in text, f"serve booted too late:\n{text}"
        return text

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0

    def fires(self) -> list[str]:
        return lines(self.env.marker)

    def check_never_early(self) -> None:
        for entry in self.env.history("minutely"):
            fired_at, slot = parse_iso(entry["firedAt"]), parse_iso(entry["slot"])
            assert fired_at is not None
            assert slot is not None
            assert fired_at >= slot, entry


@pytest.fixture
def skew(tmp_path: Path, libfaketime: str) -> Iterator[Skew]:
    env = Env(tmp_path)
    env.routine("minutely", cron='"* * * * *"')
    rig = Skew(env, libfaketime)
    yield rig
    for proc in rig.procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_faketime_moves_the_wall_clock_of_a_running_process(skew: Skew) -> None:
    clock = skew.clock("probe")
    clock.set(M1)
    probe = [
        "/bin/sh",
        "-c",
        "date -u +%Y-%m-%dT%H:%M; while [ ! -e go ]; do :; done; date -u +%Y-%m-%dT%H:%M",
    ]
    proc = subprocess.Popen(
        probe,
        stdout=subprocess.PIPE,
        text=True,
        cwd=skew.env.root,
        env={**os.environ, **clock.environ()},
    )
    assert proc.stdout is not None
    # The first date is out (not merely the process started) before the clock moves.
    assert select.select([proc.stdout], [], [], 20)[0], "the probe printed nothing"
    first = proc.stdout.readline()
    clock.set(M1 - timedelta(days=1))
    (skew.env.root / "go").touch()
    out, _ = proc.communicate(timeout=10)
    assert [first.strip(), *out.split()] == ["2031-03-03T10:01", "2031-03-02T10:01"]


def test_a_forward_jump_past_several_slots_fires_the_due_one_once_and_is_logged(
    skew: Skew,
) -> None:
    clock = skew.clock("wall")
    clock.set(M1 - timedelta(seconds=LEAD))
    proc = skew.serve(clock, "serve.log")
    skew.serving("serve.log")
    clock.set(M1 + timedelta(minutes=2, seconds=30))  # past 10:01, 10:02 and 10:03
    wait_for(skew.fires, 15, "the due slot to fire")
    wait_for(lambda: "jumped forward" in skew.env.log(), 10, "the jump to be logged")
    time.sleep(1.0)  # room for a second fire, were there one
    skew.stop(proc)
    assert skew.fires() == [f"minutely {format_iso(M1)}"]
    history = skew.env.history("minutely")
    (entry,) = [e for e in history if "gap" not in e]
    assert entry["slot"] == format_iso(M1)
    # The slots the jump passed over, after the one that fired, are a recorded gap.
    (gap,) = [e["gap"] for e in history if "gap" in e]
    assert (gap["count"], gap["reason"]) == (2, "caught-up"), gap
    assert parse_iso(entry["firedAt"]) >= M1 + timedelta(minutes=2, seconds=30)  # type: ignore[operator]
    log = skew.env.log()
    assert "WARN  the wall clock jumped forward by 2m" in log
    assert log.count("jumped forward") == 1  # once, however many loops noticed


def test_a_backward_jump_fires_nothing_early_and_is_logged(skew: Skew) -> None:
    clock = skew.clock("wall")
    clock.set(M1 - timedelta(seconds=LEAD))
    proc = skew.serve(clock, "serve.log")
    skew.serving("serve.log")
    booted = time.monotonic()
    clock.set(M1 - timedelta(hours=1))
    wait_for(lambda: "jumped backward" in skew.env.log(), 10, "the jump to be logged")
    # Past the moment the loop's sleep towards M1 ends (on Trio's clock, which is real).
    time.sleep(max(0.0, booted + LEAD + 1.5 - time.monotonic()))
    skew.stop(proc)
    assert skew.fires() == []
    assert skew.env.history("minutely") == []
    # About an hour: the jump is measured against Trio's clock, which went on meanwhile.
    assert re.search(r"WARN  the wall clock jumped backward by (59m \d+s|1h)", skew.env.log())


def test_two_serves_whose_clocks_disagree_fire_a_slot_once(skew: Skew) -> None:
    ahead, behind = skew.clock("ahead"), skew.clock("behind")
    ahead.set(M1 - timedelta(seconds=LEAD))
    behind.set(M1 - timedelta(seconds=LEAD + 3))  # three seconds slow
    first = skew.serve(ahead, "ahead.log")
    second = skew.serve(behind, "behind.log")
    skew.serving("ahead.log")
    skew.serving("behind.log")
    wait_for(lambda: "already claimed" in skew.env.log("behind.log"), 20, "the slow one's try")
    skew.stop(first)
    skew.stop(second)
    assert skew.fires() == [f"minutely {format_iso(M1)}"]
    (entry,) = skew.env.history("minutely")
    assert entry["slot"] == format_iso(M1)
    skew.check_never_early()


def test_a_restart_with_the_clock_set_back_does_not_fire_a_slot_again(skew: Skew) -> None:
    clock = skew.clock("wall")
    clock.set(M1 - timedelta(seconds=LEAD))
    first = skew.serve(clock, "first.log")
    skew.serving("first.log")
    wait_for(skew.fires, 15, "the slot to fire")
    wait_for(lambda: skew.env.history("minutely")[0].get("outcome"), 10, "the fire to settle")
    skew.stop(first)

    clock.set(M1 - timedelta(seconds=LEAD))  # the same seconds again, as after a VM restore
    second = skew.serve(clock, "second.log")
    text = wait_for(lambda: "serving " in skew.env.log("second.log"), 20, "the second boot")
    assert text
    booted = time.monotonic()
    # A redelivery of the same slot from outside, while this clock has not reached it again,
    # is refused before anything is claimed: a slot never fires before its instant.
    fire = subprocess.run(
        skew.env.argv("fire", "minutely", "--slot", format_iso(M1), "--agent", skew.agent),
        capture_output=True,
        text=True,
        cwd=skew.env.root,
        env={**skew.env.environ(), **clock.environ()},
        timeout=60,
    )
    assert fire.returncode == 1, fire.stderr
    assert "has not arrived yet" in fire.stderr
    time.sleep(max(0.0, booted + LEAD + 1.5 - time.monotonic()))
    skew.stop(second)
    assert skew.fires() == [f"minutely {format_iso(M1)}"]
    assert len(skew.env.history("minutely")) == 1
    skew.check_never_early()
