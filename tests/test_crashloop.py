"""The crash loop: real processes on one state directory, killed at random, checked each round.

Every round adds work to the shared state and then lets it race with SIGKILL:

* three routines new this round (``0 0 1 1 *``, seeded with a claim three years old, so each
  one's catch-up fires the moment ``serve`` boots -- no waiting for a cron minute);
* one routine fired only from outside: four ``fire`` processes contend for one slot on its
  grid;
* two one-shot wake-ups, already due, which ``serve`` drains one at a time at boot.

Then ``serve`` and every ``fire`` process are killed at random moments -- during boot, the
claim, the turn or the settle -- mostly with SIGKILL, sometimes with SIGTERM. The ``cmd:``
agent appends ``<session> <slot> <pid>`` to a file as the first thing every turn does, so the
file is the truth about which turns started. After every round:

* no (routine, slot) and no wake-up ever started twice, and every started routine turn has a
  stamped claim behind it (the claim is durable before the turn);
* every claim file is empty (killed between the exclusive create and the stamp) or a valid
  claim record, and the wake-up journal reads back (a fresh store catches up on it);
* every claim is settled or is the newest of its routine, and a claim left unsettled is
  recorded ``interrupted`` by the next ``serve`` that boots -- without its turn running again;
* every wake-up added is still pending or has fired, except at most the one a SIGKILLed
  ``serve`` had taken and not yet started.

The default run (20 rounds) takes about 40 seconds. ``TRIO_ROUTINES_CRASHLOOP_ROUNDS=<n>``
runs longer, and
``TRIO_ROUTINES_CRASHLOOP_SEED=<n>`` replays the kill schedule of a failed run (the seed is in
every assertion message).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import attrs
import pytest
from procs import Env, alive, lines, wait_for

from trio_routines.claims import SPARE_CLAIM
from trio_routines.instants import format_iso, parse_iso, slot_name, slot_of

pytestmark = [pytest.mark.slow, pytest.mark.longest]

ROUNDS = int(os.environ.get("TRIO_ROUTINES_CRASHLOOP_ROUNDS", "20"))
SEED = int(os.environ.get("TRIO_ROUTINES_CRASHLOOP_SEED", str(random.randrange(2**32))))
EXTERNAL_BASE = datetime(2099, 1, 1, tzinfo=UTC)  # far future: serve's own clock never gets there
OUTCOMES = {"completed", "failed", "skipped", "interrupted"}


@attrs.define
class Ledger:
    """What the harness put into the state, and what it learned about it."""

    wakeups: dict[str, str] = attrs.Factory(dict)  # id -> session
    lost_allowance: int = 0  # wake-ups a SIGKILLed serve may have taken and never started
    unsettled: set[tuple[str, str]] = attrs.Factory(set)  # (routine, claim name) left open
    kills: int = 0


class Loop:
    def __init__(self, env: Env) -> None:
        self.env = env
        self.rng = random.Random(SEED)
        self.turns = env.root / "turns"
        self.ledger = Ledger()
        self.claims = env.state / "schedule" / "claims"
        self.agent = (
            f'cmd:echo "$TRIO_ROUTINES_SESSION $TRIO_ROUTINES_SLOT $$" >> {self.turns}; sleep 0.3'
        )

    def why(self, round_: int) -> str:
        return f"(crash loop seed {SEED}, round {round_})"

    # --- setting a round up ---------------------------------------------------------------

    def prepare(self, round_: int) -> tuple[list[str], str, datetime]:
        catch_ups = [f"r{round_}-{j}" for j in range(3)]
        seeded = datetime(datetime.now(UTC).year - 3, 1, 1, tzinfo=UTC)
        for name in catch_ups:
            self.env.routine(name, cron='"0 0 1 1 *"')
            self.env.seed(name, seeded)
        external = f"f{round_}"
        self.env.routine(external, cron='"0 * * * *"')
        slot = EXTERNAL_BASE + timedelta(hours=round_)
        pending = self.env.wakeups()
        due = format_iso(datetime.now(UTC) - timedelta(minutes=5))
        for i in range(2):
            wakeup_id = str(uuid.uuid4())
            session = f"wake-{round_}-{i}"
            self.ledger.wakeups[wakeup_id] = session
            pending.append({"id": wakeup_id, "session": session, "prompt": "w", "fireAt": due})
        self.env.write_wakeups(pending)
        return catch_ups, external, slot

    def popen(self, *args: str, log: str) -> subprocess.Popen[bytes]:
        with (self.env.root / log).open("wb") as err:
            return subprocess.Popen(
                self.env.argv(*args),
                stdout=subprocess.DEVNULL,
                stderr=err,
                cwd=self.env.root,
                env=self.env.environ(),
            )

    # --- one round ------------------------------------------------------------------------

    def run_round(self, round_: int) -> None:
        _, external, slot = self.prepare(round_)
        serve_log = f"serve-{round_}.log"
        serve = self.popen("serve", "--agent", self.agent, "--grace", "0.5", log=serve_log)
        fires = [
            self.popen(
                "fire", external, "--slot", format_iso(slot), "--agent", self.agent,
                log=f"fire-{round_}-{i}.log",
            )
            for i in range(4)
        ]  # fmt: skip
        # The kill schedule: serve always dies (SIGKILL, or now and then SIGTERM); each fire
        # process is killed with even odds, else left to finish.
        # Half the rounds kill serve at any moment from its start (boot included); the other
        # half aim at the turns: a moment shortly after it logs that it is serving.
        schedule: list[tuple[float, subprocess.Popen[bytes], int]] = []
        graceful = self.rng.random() < 0.2
        aimed = self.rng.random() < 0.5
        serve_signal = signal.SIGTERM if graceful else signal.SIGKILL
        if not aimed:
            schedule.append((self.rng.uniform(0.2, 2.5), serve, serve_signal))
        for proc in fires:
            if self.rng.random() < 0.5:
                schedule.append((self.rng.uniform(0.2, 2.0), proc, signal.SIGKILL))
        started = time.monotonic()
        if aimed:
            deadline = started + 15
            while "serving " not in self.env.log(serve_log) and serve.poll() is None:
                assert time.monotonic() < deadline, f"serve did not start {self.why(round_)}"
                time.sleep(0.01)
            at = time.monotonic() - started + self.rng.uniform(0.0, 0.8)
            schedule.append((at, serve, serve_signal))
        for at, proc, signum in sorted(schedule, key=lambda item: item[0]):
            time.sleep(max(0.0, started + at - time.monotonic()))
            if proc.poll() is None:
                proc.send_signal(signum)
                if proc is serve and signum == signal.SIGKILL:
                    self.ledger.kills += 1
                    self.ledger.lost_allowance += 1
        for proc in [serve, *fires]:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise AssertionError(f"a process did not exit {self.why(round_)}") from None
        booted = "serving " in self.env.log(serve_log)
        if graceful and booted:
            # SIGTERM before the handler is installed just ends the process, which is fine;
            # once serving, it is a graceful stop.
            assert serve.returncode == 0, self.env.log(serve_log)
        self.wait_for_orphans()
        self.check(round_, booted)
        self.check_stale_redelivery(round_, external, slot)

    def wait_for_orphans(self) -> None:
        # A turn dies with its SIGKILLed serve (the cmd: lifeline); a fire's may still be ending.
        pids = {int(line.split()[-1]) for line in lines(self.turns)}
        wait_for(lambda: not any(alive(pid) for pid in pids), 10, "orphaned agent turns to end")

    def check_stale_redelivery(self, round_: int, external: str, slot: datetime) -> None:
        """Once a slot is claimed, the hour before it can never fire: it is stale."""
        directory = self.claims / external
        if not directory.is_dir() or max(os.listdir(directory), default="") != slot_name(slot):
            return
        before = len(lines(self.turns))
        earlier = format_iso(slot - timedelta(hours=1))
        result = self.env.cli("fire", external, "--slot", earlier, "--agent", self.agent)
        assert result.returncode == 0, result.stderr
        assert "not claimed (stale)" in result.stdout, (result.stdout, self.why(round_))
        assert len(lines(self.turns)) == before

    # --- the invariants -------------------------------------------------------------------

    def started(self) -> list[tuple[str, str]]:
        entries = []
        for line in lines(self.turns):
            session, _, rest = line.partition(" ")
            entries.append((session, rest.rpartition(" ")[0]))
        return entries

    def claim_files(self) -> dict[str, dict[str, bytes]]:
        found: dict[str, dict[str, bytes]] = {}
        if not self.claims.is_dir():
            return found
        for routine in sorted(os.listdir(self.claims)):
            found[routine] = {
                name: (self.claims / routine / name).read_bytes()
                for name in sorted(os.listdir(self.claims / routine))
                # The spare claim file (spares.py): no claim, whatever a kill left in it.
                if name != SPARE_CLAIM or not (self.claims / routine / name).is_file()
            }
        return found

    def check(self, round_: int, booted: bool) -> None:
        why = self.why(round_)
        started = self.started()
        # No turn ran twice: not a slot of a routine, not a one-shot wake-up.
        assert len(started) == len(set(started)), (sorted(started), why)
        files = self.claim_files()

        # Every state file parses.
        for routine, claims in files.items():
            for name, raw in claims.items():
                assert slot_of(name) is not None, (routine, name, why)
                if raw == b"":
                    continue  # killed between the exclusive create and the stamp
                record = json.loads(raw)
                assert isinstance(record, dict), (routine, name, raw, why)
                assert parse_iso(record["firedAt"]) is not None, (routine, name, raw, why)
                # error: the stored failure reason; replica: who claimed it
                fields = {"firedAt", "outcome", "ms", "error", "replica"}
                assert set(record) <= fields, (routine, name, raw, why)
                assert record.get("outcome", "completed") in OUTCOMES, (routine, name, raw, why)
        pending = self.env.wakeups()
        assert isinstance(pending, list), why

        # A routine turn starts only once its claim is stamped and durable.
        for session, slot in started:
            if not session.startswith("routine:"):
                continue
            routine = session.removeprefix("routine:")
            instant = parse_iso(slot)
            assert instant is not None, (session, slot, why)
            name = slot_name(instant)
            assert files.get(routine, {}).get(name), (routine, slot, why)

        # The claims a boot reconciled: settled `interrupted`, not run again.
        if booted:
            for routine, name in self.ledger.unsettled:
                raw = files[routine][name]
                assert raw, (routine, name, why)
                assert json.loads(raw).get("outcome") == "interrupted", (routine, name, raw, why)
            self.ledger.unsettled.clear()

        # Every claim is settled, or the newest of its routine (which the next boot settles).
        for routine, claims in files.items():
            names = sorted(claims)
            for name in names[:-1]:
                raw = claims[name]
                assert raw, (routine, name, why)
                assert "outcome" in json.loads(raw), (routine, name, raw, why)
            newest = claims[names[-1]] if names else b"{}"
            if names and (newest == b"" or "outcome" not in json.loads(newest)):
                self.ledger.unsettled.add((routine, names[-1]))

        # No wake-up is lost but the one a killed serve was holding.
        fired = {session for session, _ in started if session.startswith("wake-")}
        waiting = {entry["id"] for entry in pending}
        lost = [
            wakeup_id
            for wakeup_id, session in self.ledger.wakeups.items()
            if wakeup_id not in waiting and session not in fired
        ]
        assert len(lost) <= self.ledger.lost_allowance, (lost, self.ledger, why)

    def finish(self) -> None:
        """A clean boot at the end: everything open gets settled, nothing runs twice."""
        round_ = ROUNDS
        before = self.started()
        serve = self.popen("serve", "--agent", self.agent, "--poll", "0.2", log="final.log")
        try:
            wait_for(lambda: "serving " in self.env.log("final.log"), 20, "the final boot")

            def quiet() -> bool:
                files = self.claim_files()
                settled = all(
                    raw and "outcome" in json.loads(raw)
                    for claims in files.values()
                    for name, raw in claims.items()
                    if name == max(claims)
                )
                due = [w for w in self.env.wakeups() if w["id"] in self.ledger.wakeups]
                return settled and not due

            wait_for(quiet, 30, "the final serve to settle everything")
        finally:
            serve.send_signal(signal.SIGTERM)
            assert serve.wait(timeout=30) == 0, self.env.log("final.log")
        self.wait_for_orphans()
        self.check(round_, booted=True)
        assert not self.ledger.unsettled, (self.ledger, self.why(round_))
        assert self.started()[: len(before)] == before
        for claims in self.claim_files().values():
            for raw in claims.values():
                assert raw
                assert "outcome" in json.loads(raw)


def test_crash_loop_never_runs_a_turn_twice_nor_loses_a_claim(tmp_path: Path) -> None:
    env = Env(tmp_path)
    loop = Loop(env)
    for round_ in range(ROUNDS):
        loop.run_round(round_)
    loop.finish()
    assert loop.ledger.kills > 0, loop.why(ROUNDS)
