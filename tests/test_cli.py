"""The command line, run as real processes against a real state directory and clock.

Races and kills are real: several ``fire`` processes contend for one slot, ``serve`` is killed
with SIGKILL mid-turn or stopped with SIGTERM. Crons that would make a test wait are avoided:
a serve test seeds an old claim so that its routine's catch-up fires at boot, and wake-ups are
made due by editing the pending wake-ups rather than by waiting out the 60 s minimum delay.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
from datetime import UTC, datetime, timedelta

import pytest
from procs import Env, alive, in_process, lines, one_line, stop, wait_for, years_ago

from trio_routines.instants import format_iso, parse_iso

SLOT = "2026-07-07T09:00:00.000Z"  # on the grid of "0 9 * * *"


# --- fire: the external clock ---------------------------------------------------------------


@pytest.mark.slow
def test_concurrent_fires_of_one_slot_run_exactly_one_turn(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    agent = f'cmd:echo "$TRIO_ROUTINES_SLOT" >> {env.marker}; sleep 0.3; echo done'
    argv = env.argv("fire", "daily", "--slot", "2026-07-07T09:00:00Z", "--json", "--agent", agent)
    procs = [
        subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env.environ(), cwd=env.root
        )
        for _ in range(5)
    ]
    results = [proc.communicate(timeout=60) for proc in procs]
    assert [proc.returncode for proc in procs] == [0] * 5
    answers = [json.loads(out) for out, _ in results]
    claimed = [a for a in answers if a["claimed"]]
    assert len(claimed) == 1
    assert claimed[0]["outcome"] == "completed"
    assert claimed[0]["slot"] == SLOT
    assert sorted(a["reason"] for a in answers if not a["claimed"]) == ["duplicate"] * 4
    assert lines(env.marker) == [SLOT]  # one turn, told its slot
    (entry,) = env.history("daily")
    assert entry["slot"] == SLOT
    assert entry["outcome"] == "completed"


def test_fire_json_reports_a_failed_turn_and_exits_1(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    result = env.run_cli(
        "fire", "daily", "--slot", SLOT, "--json", "--agent", "cmd:echo boom >&2; exit 4"
    )
    assert result.returncode == 1
    answer = json.loads(result.stdout)
    assert answer == {
        "name": "daily",
        "slot": SLOT,
        "claimed": True,
        "outcome": "failed",
        "reason": None,
        "ms": answer["ms"],
        "failed": "exit status 4: boom",
    }
    assert isinstance(answer["ms"], int)
    assert re.search(r"ERROR daily slot=2026-07-07T09:00Z replica=\S+ failed \(", result.stderr)
    assert env.history("daily")[0]["outcome"] == "failed"


def test_fire_of_an_older_slot_is_stale_and_still_success(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    assert env.run_cli("fire", "daily", "--slot", SLOT, "--agent", "echo").returncode == 0
    result = env.run_cli("fire", "daily", "--slot", "2026-07-06T09:00:00Z", "--agent", "echo")
    assert result.returncode == 0
    assert result.stdout == "daily 2026-07-06T09:00:00.000Z: not claimed (stale)\n"
    assert len(env.history("daily")) == 1


def test_fire_without_cron_accepts_any_instant(env: Env) -> None:
    env.routine("adhoc")
    result = env.run_cli(
        "fire", "adhoc", "--slot", "2026-07-07T09:13:27.5+02:00", "--agent", "echo"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("adhoc 2026-07-07T07:13:27.500Z: completed (")


@pytest.mark.slow
def test_fire_stopped_by_sigterm_settles_interrupted_and_kills_the_command(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    agent = f"cmd:sleep 30 & echo $! >> {env.marker}; wait"
    proc = env.start("fire", "daily", "--slot", SLOT, "--grace", "0.3", "--agent", agent)
    (pid,) = wait_for(lambda: lines(env.marker), 20, "the turn to start")
    try:
        assert stop(proc, timeout=10) == 1  # an interrupted turn is no success
        assert env.history("daily")[0]["outcome"] == "interrupted"
        wait_for(lambda: not alive(int(pid)), 5, "the command's grandchild to exit")
    finally:
        if alive(int(pid)):
            os.kill(int(pid), signal.SIGKILL)


def test_serve_refuses_a_public_http_address_without_a_token(env: Env) -> None:
    result = env.run_cli("serve", "--agent", "echo", "--http", "0.0.0.0:0")
    assert result.returncode == 2  # a usage error: a restart repeats it
    assert "without a token" in one_line(result.stderr)


# --- serve: crashes, stops, catch-up --------------------------------------------------------


@pytest.mark.slow
def test_sigkill_mid_turn_leaves_the_claim_open_and_the_next_boot_records_it(env: Env) -> None:
    env.routine("yearly", cron="0 0 1 1 *")
    env.seed("yearly", years_ago(2))  # so the boot catches up one missed slot at once
    agent = f"cmd:echo $$ >> {env.marker}; sleep 30"
    first = env.start("serve", "--agent", agent)
    (pid,) = wait_for(lambda: lines(env.marker), 20, "the turn to start")
    try:
        assert stop(first, signal.SIGKILL) == -signal.SIGKILL
        _, crashed = env.claims("yearly")
        assert "outcome" not in crashed  # claimed, never settled
        assert crashed["slot"] == format_iso(years_ago(1))
    finally:
        if alive(int(pid)):  # the command dies with serve (test_agents pins it); be sure
            os.kill(int(pid), signal.SIGKILL)

    second = env.serve(agent, log="second.log")
    assert stop(second) == 0
    log = env.log("second.log")
    assert "never finished" in log
    assert "firing" not in log
    _, crashed = env.claims("yearly")
    assert crashed["outcome"] == "interrupted"
    assert len(lines(env.marker)) == 1  # not replayed


@pytest.mark.slow
def test_sigterm_lets_a_turn_shorter_than_the_grace_complete(env: Env) -> None:
    env.routine("yearly", cron="0 0 1 1 *")
    env.seed("yearly", years_ago(2))
    proc = env.start("serve", "--grace", "10", "--agent", f"cmd:echo $$ >> {env.marker}; sleep 1")
    wait_for(lambda: lines(env.marker), 20, "the turn to start")
    assert stop(proc) == 0
    _, fire = env.claims("yearly")
    assert fire["outcome"] == "completed"
    assert fire["ms"] >= 900
    assert "SIGTERM received" in env.log()


@pytest.mark.slow
def test_sigterm_interrupts_a_turn_longer_than_the_grace_and_kills_its_group(env: Env) -> None:
    env.routine("yearly", cron="0 0 1 1 *")
    env.seed("yearly", years_ago(2))
    agent = f"cmd:sleep 30 & echo $! >> {env.marker}; wait"
    proc = env.start("serve", "--grace", "0.5", "--agent", agent)
    (pid,) = wait_for(lambda: lines(env.marker), 20, "the turn to start")
    try:
        assert stop(proc, timeout=10) == 0
        # The seeded claim, the catch-up's, and (once written) the gap of the slot passed over.
        claims = env.claims("yearly")
        assert len(claims) == 2, claims
        assert claims[-1]["outcome"] == "interrupted"
        wait_for(lambda: not alive(int(pid)), 5, "the command's grandchild to exit")
    finally:
        if alive(int(pid)):
            os.kill(int(pid), signal.SIGKILL)


@pytest.mark.slow
def test_restart_after_missed_slots_fires_exactly_one_catch_up(env: Env) -> None:
    env.routine("minutely", cron="* * * * *")
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    seeded = now - timedelta(hours=3)
    env.seed("minutely", seeded)
    proc = env.start("serve", "--agent", f"cmd:echo fired >> {env.marker}")
    wait_for(lambda: lines(env.marker), 20, "the catch-up to fire")

    def claims() -> list[dict[str, object]]:
        return [entry for entry in env.history("minutely") if "slot" in entry]

    wait_for(lambda: claims()[1].get("outcome"), 10, "the catch-up to settle")
    wait_for(lambda: len(env.history("minutely")) > 2, 10, "the gap to be recorded")
    assert stop(proc) == 0
    fires = claims()
    missed = [f for f in fires if seeded < parse_iso(f["slot"]) <= now]  # type: ignore[operator]
    assert [f["slot"] for f in missed] == [format_iso(seeded + timedelta(minutes=1))]
    assert missed[0]["outcome"] == "completed"
    # Any other fire is a regular slot that came due while the test ran, not a back-fire.
    assert all(parse_iso(f["slot"]) > now for f in fires[2:])  # type: ignore[operator]
    # Every other slot missed while down is one caught-up gap, right after the catch-up.
    entries = env.history("minutely")
    gap = entries[2]["gap"]
    first, last = parse_iso(gap["from"]), parse_iso(gap["to"])
    assert first == seeded + timedelta(minutes=2)
    assert last is not None
    assert last >= now
    assert gap["count"] == (last - first) // timedelta(minutes=1) + 1
    assert gap["reason"] == "caught-up"
    log = env.log()
    assert (
        f"minutely: missed {gap['count'] + 1} slots {format_iso(seeded + timedelta(minutes=1))}"
        in log
    )
    assert "catching up a missed run" in env.log()


def test_serve_tells_a_cmd_agent_which_slot_it_fires(env: Env) -> None:
    env.routine("yearly", cron="0 0 1 1 *")
    env.seed("yearly", years_ago(2))
    agent = f'cmd:echo "$TRIO_ROUTINES_ROUTINE $TRIO_ROUTINES_SLOT" >> {env.marker}'
    proc = env.start("serve", "--agent", agent)
    wait_for(lambda: lines(env.marker), 20, "the catch-up to fire")
    assert stop(proc) == 0
    assert lines(env.marker) == [f"yearly {format_iso(years_ago(1))}"]


def test_serve_refuses_to_start_with_a_broken_routine_file(env: Env) -> None:
    env.routine("good", cron="0 9 * * *")
    (env.routines / "bad.md").write_text("cron: * * * * *\nno frontmatter\n")
    (env.routines / "worse.md").write_text("---\ncolour: blue\n---\nhi\n")
    result = env.run_cli("serve", "--agent", "echo")
    assert result.returncode == 1
    err = result.stderr.splitlines()
    assert len(err) == 3
    assert "bad.md: must start with a '---'" in err[0]
    assert "worse.md: line 2: unknown key 'colour'" in err[1]
    assert "serve refuses to start: 2 broken routine file(s)" in err[2]
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_serve_logs_armed_routines_as_text_or_json(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *", tz="Europe/Berlin")
    env.routine("adhoc")
    proc = env.serve("echo")
    assert stop(proc) == 0
    log = env.log().splitlines()
    assert 'INFO  armed daily: cron "0 9 * * *" Europe/Berlin — next ' in "\n".join(log)
    assert any(line.endswith("Z INFO  on demand: adhoc") for line in log)
    assert log[-1].endswith("Z INFO  stopped")
    assert all(parse_iso(line.split(" ", 1)[0]) is not None for line in log)  # each stamped

    proc = env.serve("echo", "--log-format", "json", "--no-wakeups", log="json.log")
    assert stop(proc) == 0
    records = [json.loads(line) for line in env.log("json.log").splitlines()]
    assert {tuple(sorted(r)) for r in records} == {("host", "level", "message", "pid", "ts")}
    assert {r["pid"] for r in records} == {proc.pid}
    assert {"message": "wake-ups: off", "level": "INFO"} in [
        {"message": r["message"], "level": r["level"]} for r in records
    ]
    assert parse_iso(records[0]["ts"]) is not None


# --- wake-ups -------------------------------------------------------------------------------


def make_due(env: Env) -> None:
    past = format_iso(datetime.now(UTC) - timedelta(minutes=5))
    env.write_wakeups([{**entry, "fireAt": past} for entry in env.wakeups()])


@pytest.mark.slow
def test_a_wake_up_added_with_wake_fires_into_its_session_when_due(env: Env) -> None:
    result = env.cli(
        "wake", "--session", "chat-1", "--in", "2m", "--prompt", "check the build", "--json"
    )
    assert result.returncode == 0, result.stderr
    added = json.loads(result.stdout)
    assert added["session"] == "chat-1"
    listed = env.cli("list")
    assert listed.stdout.splitlines()[3].startswith(f"{added['id']}  chat-1   ")
    assert listed.stdout.splitlines()[3].endswith("  one-shot  cli     check the build")

    make_due(env)  # as if two minutes had passed
    agent = f'cmd:echo "$TRIO_ROUTINES_SESSION" >> {env.marker}; cat >> {env.marker}'
    proc = env.serve(agent)
    wait_for(lambda: len(lines(env.marker)) >= 2, 10, "the wake-up to fire")
    assert stop(proc) == 0
    session, envelope = lines(env.marker)
    assert session == "chat-1"
    assert envelope.startswith(f"[wake-up {added['id']} fired")
    assert envelope.endswith("check the build")
    assert env.wakeups() == []


@pytest.mark.slow
def test_unwake_cancels_a_wake_up_before_it_fires(env: Env) -> None:
    ids = {}
    result = env.cli("wake", "--session", "a", "--in", "5m", "--prompt", "p")
    (added,) = result.stdout.splitlines()
    ids["a"] = added.split()[1]
    assert added.startswith(f"wake-up {ids['a']} at 20")
    assert added.endswith(f'for session "a" — cancel with: unwake {ids["a"]} --session a')
    result = env.cli("wake", "--session", "b", "--in", "5m", "--prompt", "p", "--json")
    ids["b"] = json.loads(result.stdout)["id"]
    wrong = env.cli("unwake", ids["b"], "--session", "a")
    assert wrong.returncode == 1
    assert one_line(wrong.stderr) == (
        f'error: no pending wake-up "{ids["b"]}" for session "a" '
        "(already fired, cancelled, or another session's)\n"
    )
    result = env.cli("unwake", ids["a"], "--session", "a")
    assert result.returncode == 0
    assert result.stdout == f"wake-up {ids['a']} cancelled\n"
    again = env.cli("unwake", ids["a"], "--session", "a")
    assert again.returncode == 1

    make_due(env)
    proc = env.serve(f'cmd:echo "$TRIO_ROUTINES_SESSION" >> {env.marker}')
    wait_for(lambda: lines(env.marker), 10, "the remaining wake-up to fire")
    assert stop(proc) == 0
    assert lines(env.marker) == ["b"]


@pytest.mark.slow
def test_two_serves_on_one_state_never_fire_a_wake_up_twice(env: Env) -> None:
    past = format_iso(datetime.now(UTC) - timedelta(minutes=1))
    sessions = [f"s{i}" for i in range(16)]
    env.write_wakeups(
        [
            {"id": f"w{i}", "session": s, "prompt": "p", "fireAt": past}
            for i, s in enumerate(sessions)
        ]
    )
    agent = f'cmd:echo "$TRIO_ROUTINES_SESSION" >> {env.marker}; sleep 0.05'
    procs = [env.start("serve", "--agent", agent, log=f"serve{i}.log") for i in range(2)]
    wait_for(lambda: len(lines(env.marker)) >= len(sessions), 20, "every wake-up to fire")
    wait_for(lambda: all("wake-ups:" in env.log(f"serve{i}.log") for i in range(2)), 20)
    assert [stop(proc) for proc in procs] == [0, 0]
    assert sorted(lines(env.marker)) == sorted(sessions)
    assert env.wakeups() == []


# --- run, and options every command shares -------------------------------------------------


def test_run_streams_the_reply_without_a_claim_or_history(env: Env) -> None:
    env.routine("adhoc", prompt="hello from adhoc")
    result = env.run_cli("run", "adhoc", "--agent", "echo")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "hello from adhoc\n"
    assert "INFO  adhoc completed (" in result.stderr
    # Only the session's hold was taken (busy across replicas); no claim, and the replica's
    # record is gone with it.
    assert sorted(p.name for p in (env.state / "schedule").iterdir()) == [
        "holds",
        "holds2",
        "replicas",
    ]
    assert list((env.state / "schedule" / "replicas").iterdir()) == []
    failed = env.run_cli("run", "adhoc", "--agent", "cmd:echo half; exit 2")
    assert failed.returncode == 1
    assert failed.stdout == "half\n"
    assert "ERROR adhoc failed" in failed.stderr


def test_common_options_work_before_the_command_too(env: Env) -> None:
    env.routine("adhoc", prompt="hi")
    argv = ["--routines", str(env.routines), "--agent", "echo", "--log-level", "WARNING"]
    result = in_process([*argv, "run", "adhoc"], cwd=env.root, environ=env.environ())
    assert (result.returncode, result.stdout, result.stderr) == (0, "hi\n", "")


def test_agent_from_the_environment(env: Env) -> None:
    env.routine("adhoc", prompt="hi")
    result = in_process(
        env.argv("run", "adhoc")[3:],
        cwd=env.root,
        environ={**env.environ(), "TRIO_ROUTINES_AGENT": "cmd:tr a-z A-Z"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "HI\n"


@pytest.mark.slow
def test_status_lists_the_live_replicas_of_the_state(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    proc = env.serve("echo", "--replica", "web-1")
    try:
        text = env.cli("status")
        assert text.returncode == 0, text.stderr
        assert "replicas (1 live):" in text.stdout
        assert "  web-1  v" in text.stdout
        shown = env.cli("status", "--json")
        members = json.loads(shown.stdout)["replicas"]
        assert [(m["id"], m["alive"]) for m in members] == [("web-1", True)]
        fired = env.cli(
            "fire",
            "daily",
            "--slot",
            "2026-07-07T09:00:00Z",
            "--agent",
            "echo",
            "--replica",
            "cli-7",
        )
        assert fired.returncode == 0, fired.stderr
        (row,) = json.loads(env.cli("status", "--json").stdout)["routines"]
        assert row["last"] == {
            "slot": "2026-07-07T09:00:00.000Z",
            "outcome": "completed",
            "replica": "cli-7",
        }
    finally:
        assert stop(proc) == 0
    after = json.loads(env.cli("status", "--json").stdout)["replicas"]
    assert after == []  # a clean stop leaves the store


def test_serve_binds_http_before_it_touches_the_state(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        result = env.run_cli("serve", "--agent", "echo", "--http", f"127.0.0.1:{port}")
    assert result.returncode == 1
    # As every refusal to start: "error: ..." (an ERROR record with --log-format json).
    assert (
        result.stderr == f"error: cannot serve HTTP on 127.0.0.1:{port}: Address already in use\n"
    )
    assert not env.state.exists()  # nothing was touched
