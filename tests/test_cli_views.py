"""The read-only commands: history, list, status, next, check; as real processes, or in this
one (``Env.run_cli``) where a test checks only what a command prints and its status."""

from __future__ import annotations

import json
import re
import subprocess
from datetime import UTC, datetime, timedelta

import pytest
from procs import Env, in_process, one_line, stop

from trio_routines.instants import format_iso, parse_iso
from trio_routines.records import Outcome

START = datetime(2026, 7, 1, 9, tzinfo=UTC)


def seed_days(env: Env) -> None:
    """22 days of daily fires: completed, then a late one, a failure, a skip, one unsettled."""
    for day in range(18):
        env.seed("daily", START + timedelta(days=day))
    late = START + timedelta(days=18)
    env.seed("daily", late, fired_at=late + timedelta(seconds=1, milliseconds=200), ms=65_000)
    env.seed(
        "daily",
        START + timedelta(days=19),
        Outcome.FAILED,
        ms=1200,
        error="exit status 2:\nAPI key \x1b[31mexpired",
    )
    env.seed("daily", START + timedelta(days=20), Outcome.SKIPPED, ms=3)
    env.seed("daily", START + timedelta(days=21), outcome=None)


#: What ``history`` shows first of :func:`seed_days`'s fires: the header and the five newest.
SEEDED_HISTORY_TOP = [
    "SLOT               FIRED AT                  LATE  OUTCOME     TOOK   BY  REASON",
    "2026-07-22T09:00Z  2026-07-22T09:00:00.000Z  0ms   unreported  -      -",
    "2026-07-21T09:00Z  2026-07-21T09:00:00.000Z  0ms   skipped     3ms    -   "
    "its session was busy: another turn of it was still running",
    "2026-07-20T09:00Z  2026-07-20T09:00:00.000Z  0ms   failed      1.2s   -   "
    "exit status 2: API key \\x1b[31mexpired",
    "2026-07-19T09:00Z  2026-07-19T09:00:01.200Z  1.2s  completed   1m05s  -",
    "2026-07-18T09:00Z  2026-07-18T09:00:00.000Z  0ms   completed   5ms    -",
]


@pytest.mark.slow
def test_history_is_a_table_newest_first_with_the_reason(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    env.state.mkdir()  # a state there (else that is said first)
    empty = env.cli("history", "daily")
    assert (empty.returncode, empty.stdout) == (0, "")
    assert one_line(empty.stderr).startswith('no recorded fires for "daily" (state: ')
    assert env.cli("history", "daily", "--json").stdout == "[]\n"

    seed_days(env)
    result = env.cli("history", "daily")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert len(out) == 21  # the header and the newest 20
    assert out[:6] == SEEDED_HISTORY_TOP
    assert out[-1].startswith("2026-07-03T09:00Z")
    err = result.stderr.splitlines()
    assert err == ["(the newest 20 of 22 — -n N or --json for more)"]

    entries = json.loads(env.cli("history", "daily", "--json").stdout)
    assert len(entries) == 22  # all, oldest first, the same shape plus the reason
    assert entries[0] == {
        "slot": "2026-07-01T09:00:00.000Z",
        "firedAt": "2026-07-01T09:00:00.000Z",
        "outcome": "completed",
        "ms": 5,
    }
    assert entries[19]["error"] == "exit status 2: API key \\x1b[31mexpired"
    assert entries[21] == {"slot": "2026-07-22T09:00:00.000Z", "firedAt": entries[21]["firedAt"]}


HOSTILE_OUTPUT = "All done.\n\x1b[2J\x1b]0;pwned\x07<script>alert(1)</script>\r\n\tend"


def test_history_output_shows_each_fires_kept_reply_escaped(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    env.seed("daily", START, ms=7)  # kept nothing
    env.seed("daily", START + timedelta(days=1), ms=8, output=HOSTILE_OUTPUT)
    plain = env.run_cli("history", "daily")
    assert plain.returncode == 0, plain.stderr
    assert "pwned" not in plain.stdout  # not shown unless asked for
    assert "(1 of these kept the end of their reply: --output shows it)" in plain.stderr

    shown = env.run_cli("history", "daily", "--output")
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout.splitlines()
    assert out[1].startswith("2026-07-02T09:00Z")
    assert out[2:5] == [
        "    | All done.",
        "    | \\x1b[2J\\x1b]0;pwned\\x07<script>alert(1)</script>\\x0d",
        "    | \\x09end",
    ]
    assert out[5].startswith("2026-07-01T09:00Z")  # the fire without output: no lines under it
    assert len(out) == 6
    for raw in ("\x1b", "\r", "\x07"):
        assert raw not in shown.stdout

    entries = json.loads(env.run_cli("history", "daily", "--json").stdout)
    assert "output" not in entries[0]  # only when present
    assert entries[1]["output"] == HOSTILE_OUTPUT
    raw = env.run_cli("history", "daily", "--json").stdout
    assert "\x1b" not in raw  # escaped in JSON
    assert "\x07" not in raw


@pytest.mark.slow
def test_history_filters_by_count_instant_and_outcome(env: Env) -> None:
    seed_days(env)
    newest = env.cli("history", "daily", "-n", "2").stdout.splitlines()
    assert [line[:17] for line in newest[1:]] == ["2026-07-22T09:00Z", "2026-07-21T09:00Z"]
    since = env.cli("history", "daily", "--since", "2026-07-20T11:00+02:00")
    assert [line[:10] for line in since.stdout.splitlines()[1:]] == [
        "2026-07-22",
        "2026-07-21",
        "2026-07-20",
    ]
    failed = env.cli("history", "daily", "--outcome", "failed", "--outcome", "skipped")
    assert [line.split()[3] for line in failed.stdout.splitlines()[1:]] == ["skipped", "failed"]
    as_json = json.loads(env.cli("history", "daily", "--outcome", "unreported", "--json").stdout)
    assert [e["slot"] for e in as_json] == ["2026-07-22T09:00:00.000Z"]
    last_two = json.loads(env.cli("history", "daily", "-n", "2", "--json").stdout)
    assert [e["slot"][:10] for e in last_two] == ["2026-07-21", "2026-07-22"]  # oldest first
    none = env.cli("history", "daily", "--since", "2027-01-01T00:00Z")
    assert none.stdout == ""
    assert one_line(none.stderr).startswith('no fires matching --since/--outcome for "daily"')


@pytest.mark.slow
def test_list_shows_next_left_last_recent_and_wake_ups(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *", tz="Europe/Berlin")
    env.routine("adhoc")
    env.routine("never", cron="0 0 30 2 *")
    seed_days(env)
    wake = ["wake", "--session", "chat", "--cron", "0 8 * * *", "--prompt", "hi", "--json"]
    wake_id = json.loads(env.cli(*wake).stdout)["id"]
    result = env.cli("list")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[0].split() == ["ROUTINE", "NEXT", "LEFT", "LAST", "RECENT", "SCHEDULE"]
    assert out[1].split() == ["adhoc", "-", "-", "-", "-", "on", "demand"]
    daily = out[2].split()
    assert daily[0] == "daily"
    assert parse_iso(daily[1][:-1] + ":00Z") is not None  # 2026-12-01T08:00Z
    assert re.fullmatch(r"\d+(ms|\.\ds|s|m\d\ds|h\d\dm|d\d\dh)", daily[2])
    assert daily[3:] == [
        "2026-07-22T09:00Z",
        "unreported",
        "✓✓✓✓✓✓✓✗·?",  # the last ten, oldest left: a failure, a skip, one never settled
        "cron",
        "0",
        "9",
        "*",
        "*",
        "*",
        "Europe/Berlin",
    ]
    assert out[3].split()[:6] == ["never", "never", "-", "-", "-", "cron"]
    assert out[4] == ""
    assert out[5].split() == ["WAKE-UP", "SESSION", "NEXT", "LEFT", "KIND", "ORIGIN", "PROMPT"]
    assert out[6].startswith(f"{wake_id}  chat     20")
    # A recurring wake-up ends 30 days on unless told otherwise, to the second.
    assert re.search(
        r"  cron 0 8 \* \* \*, until 20\d\d-\d\d-\d\dT\d\d:\d\d(:\d\d)?Z  cli     hi$", out[6]
    )

    data = json.loads(env.cli("list", "--json").stdout)
    assert data["routines"][0] == {
        "name": "adhoc",
        "next": None,
        "last": None,
        "recent": [],
        "paused": False,
    }
    listed = data["routines"][1]
    assert listed.keys() == {
        "name", "cron", "tz", "next", "last", "recent", "paused", "failing", "lastSuccess"
    }  # fmt: skip
    assert listed["last"] == {"slot": "2026-07-22T09:00:00.000Z", "outcome": "unreported"}
    # Failed on the 20th, skipped on the 21st, unsettled on the 22nd: failing for one run.
    assert (listed["failing"], listed["lastSuccess"]) == (1, "2026-07-19T09:00:00.000Z")
    assert listed["recent"][-3:] == ["failed", "skipped", "unreported"]
    assert len(listed["recent"]) == 10
    assert parse_iso(listed["next"]) is not None
    assert data["routines"][2]["next"] is None
    assert data["wakeups"][0]["session"] == "chat"
    assert data["wakeups"][0]["origin"] == {"kind": "cli", "depth": 0}  # added by `wake`
    assert "prompt" not in listed

    assert env.cli("pause", "daily").returncode == 0
    held = env.cli("list").stdout.splitlines()[2].split()
    assert held[:4] == ["daily", "paused", "-", "2026-07-22T09:00Z"]
    assert json.loads(env.cli("list", "--json").stdout)["routines"][1]["paused"] is True


def test_the_strip_falls_back_to_ascii_when_stdout_is_not_utf8(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    seed_days(env)
    ascii_env = {**env.environ(), "PYTHONIOENCODING": "ascii"}
    result = subprocess.run(
        env.argv("status"), capture_output=True, text=True, env=ascii_env, cwd=env.root, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert " +++++++x.? " in result.stdout.splitlines()[1]
    assert result.stdout.isascii()


def test_list_reports_broken_files_and_goes_on(env: Env) -> None:
    env.routine("adhoc")
    env.state.mkdir()  # a state there (else that is said first)
    (env.routines / "bad.md").write_text("oops")
    result = env.run_cli("list")
    assert result.returncode == 0
    assert result.stdout.splitlines()[1].split() == ["adhoc", "-", "-", "-", "-", "on", "demand"]
    assert "bad.md" in one_line(result.stderr)
    (env.root / "empty").mkdir()
    empty = Env(env.root / "empty")
    empty.state.mkdir()  # a state there (else that is said first)
    nothing = empty.run_cli("list")
    assert nothing.returncode == 0
    assert one_line(nothing.stderr).startswith("nothing scheduled")


def test_next_lists_instants_of_a_routine_or_an_expression(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *", tz="Europe/Berlin")
    after = ["--after", "2026-03-28T12:00:00Z", "-n", "2"]
    result = env.run_cli("next", "daily", *after)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "2026-03-29T07:00:00.000Z  2026-03-29 09:00 CEST (Europe/Berlin)",
        "2026-03-30T07:00:00.000Z  2026-03-30 09:00 CEST (Europe/Berlin)",
    ]
    result = env.run_cli("next", "--cron", "*/30 * * * *", *after)
    assert result.stdout.splitlines() == ["2026-03-28T12:30:00.000Z", "2026-03-28T13:00:00.000Z"]
    never = env.run_cli("next", "--cron", "0 0 30 2 *")
    assert never.returncode == 0
    assert never.stdout == ""
    assert "never fires again" in one_line(never.stderr)


def test_check_summarizes_or_lists_every_broken_file(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    env.routine("adhoc")
    result = env.run_cli("check")
    assert result.returncode == 0
    assert result.stdout == f"ok — 2 routine(s) in {env.routines}: 1 on cron, 1 on demand\n"
    (env.routines / "a.md").write_text("---\ntz: UTC\n---\nhi\n")
    (env.routines / "b.md").write_text("---\ncron: 61 * * * *\n---\nhi\n")
    result = env.run_cli("check")
    assert result.returncode == 1
    err = result.stderr.splitlines()
    assert len(err) == 3
    assert err[0].endswith('a.md: "tz" means nothing without "cron"')
    assert "b.md: invalid cron/tz" in err[1]
    assert err[2] == f"2 broken routine file(s) in {env.routines}"


def test_list_and_serve_count_the_next_instant_from_a_claim_in_the_future(env: Env) -> None:
    """A clock that ran ahead left a claim in the future: nothing fires before the next slot
    after it, and that is what `list` and the boot log announce (not the next minute)."""
    env.routine("minutely", cron="* * * * *")
    ahead = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(days=2)
    env.seed("minutely", ahead)
    data = json.loads(env.run_cli("list", "--json").stdout)
    assert data["routines"] == [
        {
            "name": "minutely",
            "cron": "* * * * *",
            "next": format_iso(ahead + timedelta(minutes=1)),
            "last": {"slot": format_iso(ahead), "outcome": "completed"},
            "recent": ["completed"],
            "paused": False,
        }
    ]

    proc = env.serve("echo", "--no-wakeups")
    assert stop(proc) == 0
    log = env.log()
    following = format_iso(ahead + timedelta(minutes=1))
    assert f'armed minutely: cron "* * * * *" — next {following}' in log
    assert "WARN  minutely: newest claim is in the future (slot " in log
    assert env.history("minutely")[-1]["slot"] == format_iso(ahead)  # nothing fired behind it


def test_history_of_a_name_that_is_no_routine_is_an_error(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    env.state.mkdir()  # a state there (else that is said first)
    typo = env.run_cli("history", "dialy")
    assert (typo.returncode, typo.stdout) == (1, "")
    assert one_line(typo.stderr) == (
        f'error: unknown routine "dialy" — looked in {env.routines}; available: daily '
        f"(and no history of it: state: {env.state})\n"
    )
    known = env.run_cli("history", "daily")  # a routine that never fired: an empty history
    assert (known.returncode, known.stdout) == (0, "")
    assert one_line(known.stderr).startswith('no recorded fires for "daily"')
    # A routine whose file is gone keeps its history, and history shows it.
    env.seed("retired", START, Outcome.COMPLETED)
    retired = env.run_cli("history", "retired")
    assert retired.returncode == 0, retired.stderr
    assert "completed" in retired.stdout
    # No routines directory to know the name by, and no history: an error, not an empty list.
    argv = env.argv("history", "daily")
    argv[argv.index("--routines") + 1] = str(env.root / "absent")
    elsewhere = in_process(argv[3:], cwd=env.root, environ=env.environ())
    assert (elsewhere.returncode, elsewhere.stdout) == (1, "")
    assert one_line(elsewhere.stderr).startswith(
        f'error: no history of "daily" (state: {env.state}), and no routines directory '
    )


@pytest.mark.slow
def test_a_cmd_agents_stdout_is_kept_as_the_fires_output(env: Env) -> None:
    # End to end: a real `fire`, a real command, its stdout's last 8 bytes kept with the claim.
    env.routine("daily", cron="0 9 * * *", output="8")
    fired = env.cli(
        "fire",
        "daily",
        "--slot",
        "2026-07-01T09:00Z",
        "--agent",
        "cmd:printf 'line one\\nlast: ok'",
    )
    assert fired.returncode == 0, fired.stderr
    (entry,) = json.loads(env.cli("history", "daily", "--json").stdout)
    assert (entry["outcome"], entry["output"]) == ("completed", "last: ok")
    env.routine("quiet", cron="0 9 * * *")  # without `output:` nothing is kept
    assert (
        env.cli("fire", "quiet", "--slot", "2026-07-01T09:00Z", "--agent", "cmd:echo hi").returncode
        == 0
    )
    (quiet,) = json.loads(env.cli("history", "quiet", "--json").stdout)
    assert "output" not in quiet


def test_wake_records_cli_and_listings_pass_over_hostile_origins(env: Env) -> None:
    added = json.loads(
        env.run_cli("wake", "--session", "chat", "--in", "2h", "--prompt", "hi", "--json").stdout
    )
    assert added["origin"] == {"kind": "cli", "depth": 0}
    (stored,) = env.wakeups()
    assert stored["origin"] == {"kind": "cli", "depth": 0}
    base = {"session": "s", "prompt": "p", "fireAt": "2099-01-01T00:00:00.000Z"}
    env.write_wakeups(
        [
            stored,
            {**base, "id": "esc", "origin": {"kind": "routine", "depth": 1, "routine": "\x1b[2Jx"}},
            {**base, "id": "chain", "origin": {"kind": "wakeup", "depth": 9, "parent": "p" * 40}},
            {**base, "id": "junk1", "origin": {"kind": "robot", "depth": "deep"}},
            {**base, "id": "junk2", "origin": ["not", "an", "object"]},
            {**base, "id": "junk3", "origin": {"kind": "http", "depth": 10**400 // 10**399}},
            {**base, "id": "none"},
        ]
    )
    result = env.run_cli("list")
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout
    rows = {line.split()[0]: line for line in result.stdout.splitlines()[3:]}
    assert "  cli  " in rows[added["id"]]
    assert "routine \\x1b[2Jx (run)  " in rows["esc"]
    assert "wake-up pppppppp depth 9  " in rows["chain"]
    for unknown in ("junk1", "junk2", "junk3", "none"):
        assert "  unknown  " in rows[unknown]  # passed over: the entry itself is kept
    listed = json.loads(env.run_cli("list", "--json").stdout)["wakeups"]
    # In the order of their instants, then of their ids: "chain" before "esc".
    assert [w.get("origin", {}).get("kind") for w in listed] == [
        "cli", "wakeup", "routine", None, None, None, None
    ]  # fmt: skip
    assert "dropping a malformed" not in result.stderr


def test_two_names_that_differ_in_a_line_break_or_a_space_never_show_alike(env: Env) -> None:
    # A routine "a\nb" listed as "a b", beside a routine "a b"; a wake-up's session likewise,
    # and its cancel command named the other session.
    env.routine("a\nb", cron="0 * * * *")
    env.routine("a b", cron="0 * * * *")
    base = {"prompt": "p", "fireAt": "2099-01-01T00:00:00.000Z"}
    env.write_wakeups(
        [
            {**base, "id": "w1", "session": "chat\n42"},
            {**base, "id": "w2", "session": "chat 42"},
            {**base, "id": "w3", "session": "chat\\x0a42"},  # what the first shows as, typed
        ]
    )
    result = env.run_cli("list")
    assert result.returncode == 0, result.stderr
    lines = [re.split(r"\s{2,}", line) for line in result.stdout.splitlines()]
    assert sorted(cells[0] for cells in lines[1:3]) == ["a b", "a\\x0ab"]
    sessions = {cells[0]: cells[1] for cells in lines[5:8]}
    assert sessions == {"w1": "chat\\x0a42", "w2": "chat 42", "w3": "chat\\\\x0a42"}
    missing = env.run_cli("history", "a\tb")
    assert missing.returncode != 0
    assert '"a\\x09b"' in missing.stderr  # quoted as it is, not as "a b"
