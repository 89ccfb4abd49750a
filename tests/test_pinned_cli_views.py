"""The commands that change nothing (``trio_routines.cli.views``: ``history``, ``next``,
``check``), run in this process and compared whole: the history's table and what it says
under it, its filters and their edges, a gap and a running claim in it, a server's answer,
``next``'s usage errors and ``check``'s agent and counts."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest
from procs import Env, in_process, one_line
from test_cli_views import SEEDED_HISTORY_TOP, START, seed_days

from trio_routines.agent import Usage
from trio_routines.cli.client import Server
from trio_routines.cli.views import RUNS_UNRECORDED
from trio_routines.converter import history_to_json
from trio_routines.records import Fire, Gap, GapReason, Outcome
from trio_routines.stores.directory import DirectoryStore
from trio_routines.stores.directory.gaps import record_gap_sync

NOTHING_KEPT = (
    "(no reply's end is kept for these: a turn keeps one when its routine's file sets "
    "output: as it runs; what each run said is the agent's, in session routine:daily)"
)


def test_history_shows_the_newest_20_whole_and_says_how_many_more(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    seed_days(env)
    result = env.run_cli("history", "daily")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert len(out) == 21
    assert out[:6] == SEEDED_HISTORY_TOP
    assert out[-1].startswith("2026-07-03T09:00Z")
    # No word of the replies' ends, which were not asked for (--output: why none is there).
    assert result.stderr.splitlines() == ["(the newest 20 of 22 — -n N or --json for more)"]
    # --json has every entry, and -n cuts either.
    assert len(json.loads(env.run_cli("history", "daily", "--json").stdout)) == 22
    last_two = json.loads(env.run_cli("history", "daily", "-n", "2", "--json").stdout)
    assert [e["slot"][:10] for e in last_two] == ["2026-07-21", "2026-07-22"]
    two = env.run_cli("history", "daily", "-n", "2")
    assert [line[:17] for line in two.stdout.splitlines()[1:]] == [
        "2026-07-22T09:00Z",
        "2026-07-21T09:00Z",
    ]
    assert two.stderr.splitlines()[0] == "(the newest 2 of 22 — -n N or --json for more)"
    every = env.run_cli("history", "daily", "-n", "22")
    assert len(every.stdout.splitlines()) == 23
    assert every.stderr == ""
    asked = env.run_cli("history", "daily", "-n", "22", "--output")
    assert asked.stdout == every.stdout
    assert asked.stderr.splitlines() == [NOTHING_KEPT]


def test_a_fire_late_by_under_a_second_shows_its_milliseconds(env: Env) -> None:
    env.seed("daily", START, fired_at=START + timedelta(milliseconds=999), ms=999)
    out = env.run_cli("history", "daily").stdout.splitlines()
    assert out[1] == "2026-07-01T09:00Z  2026-07-01T09:00:00.999Z  999ms  completed  999ms  -"


def test_the_filters_keep_their_edges_and_say_when_nothing_matches(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    env.seed("daily", START)
    env.seed("daily", START + timedelta(days=1), Outcome.FAILED, error="boom")
    record_gap_sync(
        env.state,
        "daily",
        Gap(START + timedelta(days=2), START + timedelta(days=3), 2, GapReason.DOWN),
        None,
    )
    since = env.run_cli("history", "daily", "--since", "2026-07-02T09:00Z")
    assert [line[:17] for line in since.stdout.splitlines()[1:]] == [
        "2026-07-03T09:00Z",
        "2026-07-02T09:00Z",
    ]
    gap_end = env.run_cli("history", "daily", "--since", "2026-07-04T09:00Z")
    assert [line.split()[3] for line in gap_end.stdout.splitlines()[1:]] == ["missed"]
    # One fire and one gap recorded, none matching: the filters' message, not "no recorded".
    for args in (["--since", "2026-07-05T09:00Z"], ["--outcome", "skipped"]):
        none = env.run_cli("history", "daily", *args)
        assert (none.returncode, none.stdout) == (0, "")
        assert one_line(none.stderr) == (
            f'no fires matching --since/--outcome for "daily" (state: {env.state})\n'
        )
    missed = env.run_cli("history", "daily", "--outcome", "missed")
    assert [line.split()[3] for line in missed.stdout.splitlines()[1:]] == ["missed"]
    # As many gaps as fires recorded: still recorded, so the filters' message.
    env.seed("weekly", START)
    record_gap_sync(env.state, "weekly", Gap(START, START, 1, GapReason.PAUSED), None)
    none = env.run_cli("history", "weekly", "--since", "2026-07-05T09:00Z")
    assert one_line(none.stderr).startswith('no fires matching --since/--outcome for "weekly"')


def test_the_spent_column_has_a_dash_for_a_gap_and_a_turn_that_reported_nothing(
    env: Env,
) -> None:
    env.routine("daily", cron="0 9 * * *")
    env.seed("daily", START, usage=Usage(12_345, 678, 0.0421, "USD"))
    env.seed("daily", START + timedelta(days=1))
    record_gap_sync(
        env.state,
        "daily",
        Gap(START + timedelta(days=2), START + timedelta(days=2), 1, GapReason.DOWN),
        None,
    )
    assert env.run_cli("history", "daily").stdout.splitlines() == [
        "SLOT               FIRED AT                  LATE  OUTCOME    TOOK  "
        "SPENT                          BY  REASON",
        "2026-07-03T09:00Z  -                         -     missed     -     "
        "-                              -   missed 1 slot 2026-07-03T09:00Z: no scheduler ran, "
        "and nothing was caught up (catchup: none, it had never fired, it was paused when one "
        "came back, or another slot was fired by hand)",
        "2026-07-02T09:00Z  2026-07-02T09:00:00.000Z  0ms   completed  5ms   "
        "-                              -",
        "2026-07-01T09:00Z  2026-07-01T09:00:00.000Z  0ms   completed  5ms   "
        "12.3k in, 678 out, 0.0421 USD  -",
    ]


def test_an_open_claim_held_by_a_live_replica_shows_running(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    env.routine("daily", cron="0 9 * * *")
    env.seed("daily", START)
    env.seed("daily", START + timedelta(days=1), outcome=None)

    async def alive(_store: DirectoryStore, claims: Sequence[tuple[str, datetime]]) -> list[bool]:
        return [routine == "daily" for routine, _ in claims]

    monkeypatch.setattr(DirectoryStore, "claims_alive", alive)
    out = env.run_cli("history", "daily").stdout.splitlines()
    assert [line.split()[3] for line in out[1:]] == ["running", "completed"]
    entries = json.loads(env.run_cli("history", "daily", "--json").stdout)
    assert [entry.get("running") for entry in entries] == [None, True]


def test_kept_replies_are_counted_under_the_table_or_shown_under_their_rows(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    env.seed("daily", START, output="first")
    env.seed("daily", START + timedelta(days=1))
    env.seed("daily", START + timedelta(days=2), output="third")
    plain = env.run_cli("history", "daily")
    assert plain.stderr == "(2 of these kept the end of their reply: --output shows it)\n"
    shown = env.run_cli("history", "daily", "--output")
    assert shown.stderr == ""
    assert [line for line in shown.stdout.splitlines() if line.startswith("    |")] == [
        "    | third",
        "    | first",
    ]


def answering(monkeypatch: pytest.MonkeyPatch, answer: Any) -> list[str]:
    """``Server.get`` answering every path with ``answer`` (no server is reached); the paths
    asked for are appended to the list returned."""
    paths: list[str] = []

    async def get(_server: Server, path: str) -> Any:
        paths.append(path)
        return answer

    monkeypatch.setattr(Server, "get", get)
    return paths


def test_a_servers_history_is_shown_with_its_running_slots(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    fires = [
        Fire(slot=START, fired_at=START, outcome=Outcome.COMPLETED, ms=5),
        Fire(slot=START + timedelta(days=1), fired_at=START + timedelta(days=1)),
    ]
    paths = answering(monkeypatch, history_to_json(fires, {START + timedelta(days=1)}))

    def remote(*args: str) -> subprocess.CompletedProcess[str]:
        argv = ["history", *args, "--url", "http://127.0.0.1:9"]
        return in_process(argv, cwd=env.root, environ=env.environ())

    done = remote("da ily")
    assert done.returncode == 0, done.stderr
    assert paths == ["/routines/da%20ily/history"]
    assert [line.split()[3] for line in done.stdout.splitlines()[1:]] == ["running", "completed"]
    entries = json.loads(remote("daily", "--json").stdout)
    assert entries[1]["running"] is True
    answering(monkeypatch, {"not": "a history"})
    refused = remote("daily")
    assert (refused.returncode, refused.stdout) == (1, "")
    assert one_line(refused.stderr) == (
        "error: http://127.0.0.1:9: the answer is not a history (a history must be an array)\n"
    )
    answering(monkeypatch, [])
    empty = remote("daily")
    assert one_line(empty.stderr) == (
        f'no recorded fires for "daily" (http://127.0.0.1:9) — {RUNS_UNRECORDED}\n'
    )


def test_a_broken_file_is_not_reported_by_history_and_once_by_next(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    (env.routines / "bad.md").write_text("oops")
    env.state.mkdir()  # (else that is said too)
    quiet = env.run_cli("history", "daily")
    assert quiet.stderr.splitlines() == [
        f'no recorded fires for "daily" (state: {env.state}) — {RUNS_UNRECORDED}'
    ]
    listed = env.run_cli("next", "daily", "--after", "2026-03-28T12:00Z", "-n", "1")
    assert listed.stdout == "2026-03-29T09:00:00.000Z\n"
    assert len(listed.stderr.splitlines()) == 1
    assert "bad.md" in listed.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "next needs either a routine NAME or --cron EXPR (not both)"),
        (
            ["daily", "--cron", "0 9 * * *"],
            "next needs either a routine NAME or --cron EXPR (not both)",
        ),
        (["daily", "--tz", "UTC"], "--tz goes with --cron (a routine's own tz is used for NAME)"),
        (
            ["daily", "--name", "x"],
            "--name goes with --cron (it seeds H as a routine of that name would)",
        ),
    ],
)
def test_next_refuses_a_wrong_mix_of_options(env: Env, args: list[str], message: str) -> None:
    env.routine("daily", cron="0 9 * * *")
    done = env.run_cli("next", *args)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines()[-1].endswith(f"error: {message} (see --help)")


def test_next_says_why_it_lists_nothing(env: Env) -> None:
    env.routine("adhoc")
    on_demand = env.run_cli("next", "adhoc")
    assert (on_demand.returncode, on_demand.stdout) == (1, "")
    assert one_line(on_demand.stderr) == 'error: "adhoc" runs on demand only (it has no cron)\n'
    unknown = env.run_cli("next", "nope")
    assert one_line(unknown.stderr) == (
        f'error: unknown routine "nope" — looked in {env.routines}; available: adhoc\n'
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tz", "Nowhere/Land"], 'argument --cron/--tz: unknown time zone "Nowhere/Land"'),
        (["--name", "a/b"], 'argument --name: "a/b" cannot be a routine name'),
    ],
)
def test_next_takes_a_bad_cron_zone_or_name_for_a_usage_error(
    env: Env, args: list[str], message: str
) -> None:
    done = env.run_cli("next", "--cron", "0 9 * * *", *args)
    assert (done.returncode, done.stdout) == (2, "")
    assert one_line(done.stderr).startswith(f"python -m trio_routines next: error: {message}")
    bogus = env.run_cli("next", "--cron", "0 9 * *")
    assert (bogus.returncode, one_line(bogus.stderr)) == (
        2,
        "python -m trio_routines next: error: argument --cron/--tz: expected 5 fields (minute "
        "hour day-of-month month day-of-week), got 4 (see --help)\n",
    )


def test_next_says_what_h_resolved_to_only_for_a_seed(env: Env) -> None:
    after = ["--after", "2026-03-28T12:00Z", "-n", "1"]
    unseeded = env.run_cli("next", "--cron", "0 9 * * *", *after)
    assert unseeded.returncode == 0, unseeded.stderr
    assert unseeded.stderr == ""
    plain = env.run_cli("next", "--cron", "0 9 * * *", "--name", "daily", *after)
    assert plain.stderr == ""
    seeded = env.run_cli("next", "--cron", "H 9 * * *", "--name", "daily", *after)
    assert seeded.stderr.startswith('(H resolved for "daily": "')


def test_check_counts_routines_on_cron_and_checks_the_agent(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    env.routine("hourly", cron="0 * * * *")
    env.routine("adhoc")
    done = env.run_cli("check", "--agent", "echo")
    assert done.stdout == f"ok — 3 routine(s) in {env.routines}: 2 on cron, 1 on demand\n"
    for args, environ in (
        (["--agent", "bogus:"], {}),
        ([], {"TRIO_ROUTINES_AGENT": "bogus:"}),
        (["--agent", "bogus:"], {"TRIO_ROUTINES_AGENT": "echo"}),
    ):
        argv = env.argv("check", *args)[3:]
        refused = in_process(argv, cwd=env.root, environ={**env.environ(), **environ})
        assert (refused.returncode, refused.stdout) == (1, ""), (args, environ)
        assert one_line(refused.stderr).startswith('error: unknown agent "bogus:"')


def test_check_names_the_files_it_passed_over(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    (env.routines / "weekly.toml").write_text('cron = "0 9 * * 1"\n')
    (env.routines / "UPPER.MD").write_text("---\n---\nhi\n")
    (env.routines / ".hidden").write_text("x")  # an editor's: not named
    (env.routines / "drafts").mkdir()  # a subdirectory: kept there on purpose
    with open(os.path.join(os.fsencode(env.routines), b"caf\xe9\n.txt"), "w"):
        pass  # a name that is no UTF-8, with a line break: one visible line still
    done = env.run_cli("check")
    assert done.stdout == (
        "passed over (a routine file is named <name>.md): "
        '"UPPER.MD", "caf\\\\xe9\\x0a.txt", "weekly.toml"\n'
        f"ok — 1 routine(s) in {env.routines}: 1 on cron, 0 on demand\n"
    )
    assert done.returncode == 0
    for n in range(5):
        (env.routines / f"f{n}.txt").write_text("x")
    (env.routines / "broken.md").write_text("no frontmatter\n")
    refused = env.run_cli("check")
    assert refused.returncode == 1
    assert refused.stdout == (
        "passed over (a routine file is named <name>.md): "
        '"UPPER.MD", "caf\\\\xe9\\x0a.txt", "f0.txt", "f1.txt", "f2.txt" and 3 more\n'
    )
    # The edges: five names are all shown, a sixth is "and 1 more".
    for name in ("UPPER.MD", "weekly.toml", "f0.txt", "f1.txt", "f2.txt"):
        (env.routines / name).unlink()
    os.unlink(os.path.join(os.fsencode(env.routines), b"caf\xe9\n.txt"))
    assert env.run_cli("check").stdout == (
        'passed over (a routine file is named <name>.md): "f3.txt", "f4.txt"\n'
    )
    for n in range(5, 8):
        (env.routines / f"f{n}.txt").write_text("x")
    assert env.run_cli("check").stdout == (
        "passed over (a routine file is named <name>.md): "
        '"f3.txt", "f4.txt", "f5.txt", "f6.txt", "f7.txt"\n'
    )
    (env.routines / "f8.txt").write_text("x")
    assert env.run_cli("check").stdout == (
        "passed over (a routine file is named <name>.md): "
        '"f3.txt", "f4.txt", "f5.txt", "f6.txt", "f7.txt" and 1 more\n'
    )


def test_check_lists_every_broken_file_before_a_bad_agent(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    (env.routines / "broken.md").write_text("---\ncron: nope\n---\nhi\n")
    (env.routines / "zoned.md").write_text("---\ncron: 0 9 * * *\ntz: Nowhere/Land\n---\nhi\n")
    refused = env.run_cli("check", "--agent", "bogus:")
    assert (refused.returncode, refused.stdout) == (1, "")
    lines = refused.stderr.splitlines()
    assert [line.split(":", 1)[0] for line in lines[:2]] == sorted(
        [str(env.routines / "broken.md"), str(env.routines / "zoned.md")]
    ), refused.stderr
    assert lines[2] == f"2 broken routine file(s) in {env.routines}"
    assert lines[3].startswith('error: unknown agent "bogus:"')
    assert len(lines) == 4


def test_check_refuses_a_routine_whose_cron_never_fires(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    env.routine("feb", cron="0 9 31 2 *")
    env.routine("april", cron="H 9 31 4 *", tz="Europe/Berlin")
    refused = env.run_cli("check", "--agent", "echo")
    assert (refused.returncode, refused.stdout) == (1, "")
    assert refused.stderr.splitlines() == [
        '"april": cron "H 9 31 4 *" never fires: no day matches it',
        '"feb": cron "0 9 31 2 *" never fires: no day matches it',
    ]
    (env.routines / "feb.md").unlink()
    (env.routines / "april.md").unlink()
    assert env.run_cli("check", "--agent", "echo").returncode == 0


def test_unreadable_gaps_leave_the_claims_shown_with_one_line_and_exit_1(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    env.seed("daily", START)
    env.seed("daily", START + timedelta(days=1), outcome=Outcome.FAILED)
    gaps = env.state / "schedule" / "gaps"
    elsewhere = env.root / "elsewhere"
    elsewhere.mkdir()
    if gaps.exists():
        gaps.rmdir()
    gaps.symlink_to(elsewhere)  # refused, as every link in the state is
    for json_out in (False, True):
        done = env.run_cli("history", "daily", *(["--json"] if json_out else []))
        assert done.returncode == 1
        said = done.stderr.splitlines()[0]
        assert said.startswith(f"the gaps of 'daily' are unreadable: {gaps} is a symbolic link")
        assert said.endswith(" — its claims alone are shown")
        if json_out:
            assert [entry["outcome"] for entry in json.loads(done.stdout)] == [
                "completed",  # oldest first, as --json lists them
                "failed",
            ]
        else:
            assert [line.split()[3] for line in done.stdout.splitlines()[1:]] == [
                "failed",
                "completed",
            ]
    assert list(elsewhere.iterdir()) == []  # nothing written through the link
