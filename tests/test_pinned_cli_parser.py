"""The argument parser (``trio_routines.cli.parser``), pinned whole: what each command reads
with no option and with every option, the common options before or after the command, what
argparse refuses (one line, exit 2) and every option's help as ``--help`` shows it."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from trio_routines import __version__
from trio_routines.cli.parser import build_parser, check_url_goes
from trio_routines.cli.values import budgets

SLOT = datetime(2026, 7, 7, 9, tzinfo=UTC)
COMMON = {
    "state": None,
    "routines": "routines",
    "agent": None,
    "replica": None,
    "log_format": None,
    "log_level": "info",
    "url": None,
}

# Each command with the least it needs, and every field it then reads (past the common ones).
DEFAULTS: list[tuple[list[str], dict[str, Any]]] = [
    (
        ["serve"],
        {
            "grace": 10.0,
            "external_clock": False,
            "no_wakeups": False,
            "poll": 30.0,
            "wakeup_timeout": None,
            "session_budget": (),
            "wake_rate": 12,
            "wake_depth": 16,
            "wake_lifetime": timedelta(days=30),
            "http": None,
        },
    ),
    (["run", "d"], {"name": "d", "url": None, "takes_url": True, "grace": 10.0}),
    (
        ["fire", "d", "--slot", "2026-07-07T09:00Z"],
        {"name": "d", "slot": SLOT, "json": False, "url": None, "takes_url": True, "grace": 10.0},
    ),
    (
        ["history", "d"],
        {
            "name": "d",
            "url": None,
            "takes_url": True,
            "n": None,
            "since": None,
            "outcome": None,
            "json": False,
            "output": False,
        },
    ),
    (["list"], {"json": False, "url": None, "takes_url": True}),
    (["status"], {"url": None, "takes_url": True, "json": False}),
    (
        ["next"],
        {"name": None, "cron": None, "tz": None, "seed_name": None, "n": 5, "after": None},
    ),
    (["check"], {}),
    (
        ["wake", "--session", "s", "--in", "5m", "--prompt", "p"],
        {
            "session": "s",
            "delay": timedelta(minutes=5),
            "cron": None,
            "tz": None,
            "until": None,
            "prompt": "p",
            "json": False,
            "url": None,
            "takes_url": True,
        },
    ),
    (
        ["unwake", "i", "--session", "s"],
        {"id": "i", "session": "s", "url": None, "takes_url": True},
    ),
    (["pause", "d"], {"name": "d", "url": None, "takes_url": True}),
    (["resume", "d"], {"name": "d", "url": None, "takes_url": True}),
    (["migrate"], {}),
]


def parsed(*argv: str) -> dict[str, Any]:
    """The namespace of ``argv`` as a dict, with the command's parser checked and left out."""
    fields = vars(build_parser().parse_args(argv))
    sub = fields.pop("command_parser")
    assert isinstance(sub, argparse.ArgumentParser)
    assert sub.prog == f"python -m trio_routines {fields['command']}"
    return fields


@pytest.mark.parametrize(("argv", "fields"), DEFAULTS, ids=[a[0] for a, _ in DEFAULTS])
def test_each_command_reads_its_defaults(argv: list[str], fields: dict[str, Any]) -> None:
    assert parsed(*argv) == {**COMMON, "command": argv[0], **fields}


URL = "http://127.0.0.1:8080"

# Each command with every option it has, and what it reads from them.
EVERY_OPTION: list[tuple[list[str], dict[str, Any]]] = [
    (
        [
            "serve", "--grace", "2.5", "--external-clock", "--no-wakeups", "--poll", "0.5",
            "--wakeup-timeout", "90.5", "--session-budget", "5 USD/day", "--wake-rate", "off",
            "--wake-depth", "3", "--wake-lifetime", "2d", "--http", "127.0.0.1:0",
        ],
        {
            "grace": 2.5,
            "external_clock": True,
            "no_wakeups": True,
            "poll": 0.5,
            "wakeup_timeout": 90.5,
            "session_budget": budgets("5 USD/day"),
            "wake_rate": None,
            "wake_depth": 3,
            "wake_lifetime": timedelta(days=2),
            "http": ("127.0.0.1", 0),
        },
    ),
    (["run", "d", "--url", URL, "--grace", "0"],
     {"name": "d", "url": URL, "takes_url": True, "grace": 0.0}),
    (
        ["fire", "d", "--slot", "2026-07-07T11:00+02:00", "--json", "--url", URL, "--grace", "1"],
        {"name": "d", "slot": SLOT, "json": True, "url": URL, "takes_url": True, "grace": 1.0},
    ),
    (
        [
            "history", "d", "--url", URL, "-n", "3", "--since", "2026-07-07T09:00Z",
            "--outcome", "failed", "--outcome", "missed", "--json", "--output",
        ],
        {
            "name": "d",
            "url": URL, "takes_url": True,
            "n": 3,
            "since": SLOT,
            "outcome": ["failed", "missed"],
            "json": True,
            "output": True,
        },
    ),
    (["list", "--json", "--url", URL], {"json": True, "url": URL, "takes_url": True}),
    (["status", "--url", URL, "--json"], {"url": URL, "takes_url": True, "json": True}),
    (
        [
            "next", "d", "--cron", "H 9 * * *", "--tz", "Europe/Berlin", "--name", "seed",
            "-n", "2", "--after", "2026-07-07T09:00Z",
        ],
        {
            "name": "d",
            "cron": "H 9 * * *",
            "tz": "Europe/Berlin",
            "seed_name": "seed",
            "n": 2,
            "after": SLOT,
        },
    ),
    (
        [
            "wake", "--session", "s", "--cron", "*/10 * * * *", "--tz", "UTC",
            "--until", "2026-07-07T09:00Z", "--prompt", "p", "--json", "--url", URL,
        ],
        {
            "session": "s",
            "delay": None,
            "cron": "*/10 * * * *",
            "tz": "UTC",
            "until": SLOT,
            "prompt": "p",
            "json": True,
            "url": URL, "takes_url": True,
        },
    ),
    (["unwake", "i", "--session", "s", "--url", URL],
     {"id": "i", "session": "s", "url": URL, "takes_url": True}),
    (["pause", "d", "--url", URL], {"name": "d", "url": URL, "takes_url": True}),
    (["resume", "d", "--url", URL], {"name": "d", "url": URL, "takes_url": True}),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "fields"), EVERY_OPTION, ids=[a[0] for a, _ in EVERY_OPTION])
def test_each_option_is_read_into_its_field_as_its_type(
    argv: list[str], fields: dict[str, Any]
) -> None:
    assert parsed(*argv) == {**COMMON, "command": argv[0], **fields}


def test_the_common_options_are_read_before_or_after_the_command() -> None:
    given = [
        "--state", "st", "--routines", "rt", "--agent", "echo", "--replica", "r1",
        "--log-format", "json", "--log-level", "DEBUG",
    ]  # fmt: skip
    want = {
        "state": "st",
        "routines": "rt",
        "routines_given": True,  # not its default (which --url refuses)
        "agent": "echo",
        "replica": "r1",
        "log_format": "json",
        "log_level": "debug",  # read in any case
        "url": None,
        "command": "check",
    }
    assert parsed(*given, "check") == want
    assert parsed("check", *given) == want
    # Given before, an option is not overwritten by the command's own copy's default; given
    # after too, the later one wins.
    assert parsed("--routines", "a", "check", "--routines", "b")["routines"] == "b"
    assert parsed("--log-level", "error", "list")["log_level"] == "error"
    assert parsed("--log-format", "journal", "list")["log_format"] == "journal"


URL_TAKERS = [
    "run d",
    "fire d --slot 2026-07-07T09:00Z",
    "history d",
    "list",
    "status",
    "wake --session s --in 5m --prompt p",
    "unwake i --session s",
    "pause d",
    "resume d",
]


@pytest.mark.parametrize("command", URL_TAKERS)
def test_a_url_before_the_command_goes_with_it(command: str) -> None:
    args = build_parser().parse_args(["--url", URL, *command.split()])
    check_url_goes(build_parser(), args)
    assert (args.url, args.takes_url) == (URL, True)
    later = build_parser().parse_args(["--url", URL, *command.split(), "--url", "http://[::1]:9"])
    assert later.url == "http://[::1]:9"  # given after too, the later one wins


@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
@pytest.mark.parametrize("command", ["serve", "next d", "check", "migrate"])
def test_a_url_with_a_command_that_cannot_send_itself_is_refused(
    command: str, after: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_parser()
    given = [*command.split(), "--url", URL] if after else ["--url", URL, *command.split()]
    args = parser.parse_args(given)
    with pytest.raises(SystemExit) as exited:
        check_url_goes(parser, args)
    assert exited.value.code == 2
    assert capsys.readouterr() == (
        "",
        f"python -m trio_routines: error: --url does not go with {command.split()[0]}: it "
        "sends run, fire, history, list, status, wake, unwake, pause and resume to a running "
        "serve (see --help)\n",
    )
    check_url_goes(parser, parser.parse_args(command.split()))  # without it: nothing said


def refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What argparse says on stderr when it refuses ``argv`` (it exits 2, printing nothing)."""
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    out, err = capsys.readouterr()
    assert out == ""
    return err


# What argparse refuses, and the start of what it says after `<prog>: error: `.
REFUSED = [
    ([], "the following arguments are required: COMMAND"),
    (["nope"], "argument COMMAND: invalid choice: 'nope'"),
    (["fire", "d"], "the following arguments are required: --slot"),
    (["run"], "the following arguments are required: NAME"),
    (["wake", "--in", "5m", "--prompt", "p"], "the following arguments are required: --session"),
    (["wake", "--session", "s", "--in", "5m"], "the following arguments are required: --prompt"),
    (["wake", "--session", "s", "--prompt", "p"], "one of the arguments --in --cron is required"),
    (["wake", "--session", "s", "--prompt", "p", "--in", "5m", "--cron", "* * * * *"],
     "argument --cron: not allowed with argument --in"),
    (["unwake", "i"], "the following arguments are required: --session"),
    (["list", "--log-format", "xml"], "argument --log-format: invalid choice: 'xml'"),
    (["--log-level", "loud", "list"], "argument --log-level: invalid choice: 'loud'"),
    # An empty value is no value: never the environment's or the default store or agent.
    (["--state", "", "list"], "argument --state: '' is empty (a variable that is not set?)"),
    (["pause", "d", "--state", " "], "argument --state: ' ' is empty"),
    (["--agent", "", "check"], "argument --agent: '' is empty (a variable that is not set?)"),
    (["run", "d", "--agent", "\t"], "argument --agent: '\\t' is empty"),
    (["history", "d", "--outcome", "lost"], "argument --outcome: invalid choice: 'lost'"),
    (["serve", "--poll", "0"], "argument --poll:"),
    (["serve", "--grace", "-1"], "argument --grace:"),
    (["serve", "--wakeup-timeout", "-1"],
     "argument --wakeup-timeout: '-1' must be a finite number of seconds above 0"),
    (["serve", "--wakeup-timeout", "0"],
     "argument --wakeup-timeout: '0' must be a finite number of seconds above 0"),
    (["serve", "--wakeup-timeout", "5m"],
     "argument --wakeup-timeout: '5m' is not a number of seconds"),
    (["serve", "--wakeup-timeout", "inf"],
     "argument --wakeup-timeout: 'inf' must be a finite number of seconds above 0"),
    (["run", "d", "--grace", "-1"], "argument --grace:"),
    (["serve", "--http", "nowhere"], "argument --http:"),
    (["serve", "--wake-rate", "x"], "argument --wake-rate:"),
    (["serve", "--wake-depth", "x"], "argument --wake-depth:"),
    (["serve", "--wake-lifetime", "x"], "argument --wake-lifetime:"),
    (["serve", "--session-budget", "x"], "argument --session-budget:"),
    (["list", "--replica", ""], "argument --replica:"),
    (["list", "--url", "ftp://x"], "argument --url:"),
    (["history", "d", "-n", "0"], "argument -n:"),
    (["history", "d", "--since", "x"], "argument --since:"),
    (["next", "-n", "0"], "argument -n:"),
    (["next", "--after", "x"], "argument --after:"),
    (["wake", "--session", "s", "--prompt", "p", "--in", "x"], "argument --in:"),
    (["wake", "--session", "s", "--prompt", "p", "--cron", "c", "--until", "x"],
     "argument --until:"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "start"), REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_a_refusal_is_one_line_exit_2_pointing_at_help(
    capsys: pytest.CaptureFixture[str], argv: list[str], start: str
) -> None:
    err = refusal(capsys, *argv)
    command = f" {argv[0]}" if argv and argv[0] in DESCRIPTIONS else ""  # its own parser
    assert err.startswith(f"python -m trio_routines{command}: error: {start}")
    assert err.endswith(" (see --help)\n")
    assert err.count("\n") == 1


def test_a_refusal_shows_what_was_typed_with_its_control_characters_escaped(
    capsys: pytest.CaptureFixture[str],
) -> None:
    err = refusal(capsys, "\x1b[2J")
    assert "\x1b" not in err
    # argparse's list of the choices is quoted or not, by Python's version.
    assert err.startswith(
        "python -m trio_routines: error: argument COMMAND: invalid choice: '\\x1b[2J' (choose "
    )
    assert err.endswith(") (see --help)\n")


def test_version_prints_the_packages(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"trio-routines {__version__}\n"


def shown_help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """``argv --help`` as printed, its white space made single spaces (argparse wraps it)."""
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*argv, "--help"])
    assert exited.value.code == 0
    return " ".join(capsys.readouterr().out.split())


URL_HELP = (
    "--url URL send it to a running serve's HTTP surface instead of touching the state, e.g. "
    "http://127.0.0.1:8080 (default: $TRIO_ROUTINES_URL; the token from $TRIO_ROUTINES_TOKEN)"
)
TURN_GRACE_HELP = (
    "--grace SECONDS on SIGINT/SIGTERM, how long the turn may still finish (default: 10; a "
    "second signal stops it at once)"
)
COMMON_HELP = [
    "common options:",
    "--state PATH_OR_URL state directory, or a postgresql:// URL (default: "
    "$TRIO_ROUTINES_STATE, else .state)",
    "--routines DIR the routines directory (default: routines)",
    "--agent SPEC echo, cmd:<shell command>, py:<module>:<attribute> or an http(s):// URL "
    "(default: $TRIO_ROUTINES_AGENT; needed by serve, run and fire)",
    "--replica NAME this process's replica id, stored with every claim it makes (default: "
    "$TRIO_ROUTINES_REPLICA, else <host>:<pid>)",
    "--log-format {text,json,journal} stderr as text ('<instant> INFO digest slot=<slot> "
    "completed (1200ms)'), one JSON object a line (ts, level, message, host, pid; on fire "
    "lines routine, slot, outcome, ms, late_ms, error), or for systemd's journal the text line "
    "without our instant, led by its syslog priority ('<6>INFO digest ...') (default: journal "
    "when stderr is the journal's stream ($JOURNAL_STREAM), else text)",
    "--log-level {debug,info,warning,error} the least level logged; a duplicate claim (normal "
    "with replicas) is debug (default: info)",
]
DESCRIPTIONS = {
    "serve": "run the scheduler until SIGINT or SIGTERM, then stop gracefully",
    "run": "run one routine's turn now, without a claim; the reply goes to stdout",
    "fire": "claim a slot of a routine, run it, settle it (the external clock)",
    "history": "a routine's fires, newest first: slot, lateness, outcome, duration, reason",
    "list": "routines (next, time left, last outcome, recent outcomes) and pending wake-ups",
    "status": "what list shows, then the turns a running serve has in flight",
    "next": "the next instants of a routine, or of --cron EXPR [--tz TZ]",
    "check": "validate the routines directory (and the agent spec, when one is given)",
    "wake": "add a wake-up for a session",
    "unwake": "cancel a pending wake-up of a session",
    "pause": "hold a routine back: no scheduler on this state claims its slots",
    "resume": "fire a paused routine again, from its next slot (no back-fire)",
    "migrate": "bring a PostgreSQL state's tables to this version (serve does it too)",
}
# Each command's usage line (past the common options) and its options' help.
OPTIONS_HELP = {
    "serve": [
        "[--grace SECONDS] [--external-clock] [--no-wakeups] [--poll SECONDS] "
        "[--wakeup-timeout SECONDS] [--session-budget BUDGETS] [--wake-rate N] [--wake-depth N] "
        "[--wake-lifetime SPAN] [--http HOST:PORT]",
        "--grace SECONDS how long in-flight turns may finish on stop (default: 10)",
        "--external-clock arm no cron loops: slots arrive through `fire` or POST /fire",
        "--no-wakeups do not fire wake-ups",
        "--poll SECONDS how often due wake-ups are looked for, and the replica's heartbeat and "
        "its look for dead replicas' claims (default: 30)",
        "--wakeup-timeout SECONDS end a wake-up turn that runs longer, as failed, so that the "
        "wake-ups due after it run (default: no timeout)",
        "--session-budget BUDGETS what each session's wake-up turns may spend per rolling "
        'window, e.g. "200k tokens/day, 5 USD/week" (default: no budget)',
        "--wake-rate N at most N wake-up turns per session in any hour: a turn scheduling more "
        "is refused (default: 12; off: no limit)",
        "--wake-depth N at most N wake-ups in a chain each set by the turn of the one before "
        "(default: 16; off: no limit)",
        "--wake-lifetime SPAN the longest a recurring wake-up lives, and its until when none "
        "is given (default: 30d)",
        "--http HOST:PORT also serve the HTTP API (token from $TRIO_ROUTINES_TOKEN)",
    ],
    "run": ["[--url URL] [--grace SECONDS] NAME", URL_HELP, TURN_GRACE_HELP],
    "fire": [
        "--slot ISO [--json] [--url URL] [--grace SECONDS] NAME",
        "--slot ISO the slot, with its zone: 2026-07-07T10:00Z, 2026-07-07T12:00:00+02:00, ...",
        "--json print the outcome as JSON",
        URL_HELP,
        TURN_GRACE_HELP,
    ],
    "history": [
        "[--url URL] [-n N] [--since ISO] [--outcome "
        "{completed,failed,skipped,interrupted,unreported,unknown,missed}] [--json] [--output] "
        "NAME",
        URL_HELP,
        "-n N the newest N (default: 20 as text, all as JSON)",
        "--since ISO only the slots at or after this instant (a gap that reaches it is shown "
        "whole)",
        "only fires that ended so (repeatable); unreported: claimed, never settled; unknown: "
        "settled with an outcome this version does not know; missed: the gaps (slots passed "
        "over, with the reason)",
        '--json oldest first, as [{slot, firedAt, outcome, ...} or {"gap": {from, to, count, '
        "reason}}]; a fire's kept output, if any, as its output field",
        "--output under each fire, the end of its reply, for a routine that keeps it (output: "
        "in its file), control characters escaped",
    ],
    "list": ["[--json] [--url URL]", URL_HELP],
    "status": ["[--url URL] [--json]", URL_HELP],
    "next": [
        "[--cron EXPR] [--tz TZ] [--name NAME] [-n N] [--after ISO] [NAME]",
        "--name NAME with --cron: the routine name that resolves H fields (as that routine would)",
        "-n N how many (default: 5)",
        "--after ISO count from this instant (default: now)",
    ],
    "check": [],
    "wake": [
        "--session SESSION (--in DELAY | --cron EXPR) [--tz TZ] [--until ISO] --prompt PROMPT "
        "[--json] [--url URL]",
        "--in DELAY 90s, 30m, 1.5h, 2d",
        "--cron EXPR recurring, at most every 10 minutes",
        "--tz TZ the time zone of --cron (default: UTC)",
        "--until ISO with --cron: stop repeating after this instant (default: 30 days from now)",
        "--prompt PROMPT what the woken turn does (- reads stdin)",
        "--json print the stored wake-up as JSON",
        URL_HELP,
    ],
    "unwake": ["--session SESSION [--url URL] ID", URL_HELP],
    "pause": ["[--url URL] NAME", URL_HELP],
    "resume": ["[--url URL] NAME", URL_HELP],
    "migrate": [],
}


def test_the_program_lists_every_command_and_the_common_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shown = shown_help(capsys)
    assert shown.startswith(
        "usage: python -m trio_routines [-h] [--state PATH_OR_URL] [--routines DIR] "
        "[--agent SPEC] [--replica NAME] [--log-format {text,json,journal}] [--log-level "
        "{debug,info,warning,error}] [--url URL] [--version] COMMAND ... Fire cron routines and "
        "self-scheduled wake-ups into an agent, each cron slot at most once."
    )
    listing = " ".join(f"{name} {what}" for name, what in DESCRIPTIONS.items())
    assert f"COMMAND {listing} options:" in shown
    for line in COMMON_HELP:
        assert line in shown


@pytest.mark.parametrize(
    ("argv0", "prog"),
    [
        ("/usr/local/bin/trio-routines", "trio-routines"),
        ("trio-routines", "trio-routines"),
        ("/x/trio_routines/__main__.py", "python -m trio_routines"),
        ("/x/trio-routines-other", "python -m trio_routines"),
        ("", "python -m trio_routines"),
    ],
)
def test_the_usage_names_the_command_as_it_was_run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, argv0: str, prog: str
) -> None:
    monkeypatch.setattr("sys.argv", [argv0])
    assert shown_help(capsys).startswith(f"usage: {prog} [-h] ")
    assert shown_help(capsys, "list").startswith(f"usage: {prog} list [-h] ")


@pytest.mark.parametrize("command", list(OPTIONS_HELP))
def test_each_commands_help_describes_it_and_every_option(
    capsys: pytest.CaptureFixture[str], command: str
) -> None:
    shown = shown_help(capsys, command)
    common = (
        "[-h] [--state PATH_OR_URL] [--routines DIR] [--agent SPEC] [--replica NAME] "
        "[--log-format {text,json,journal}] [--log-level {debug,info,warning,error}]"
    )
    assert shown.startswith(f"usage: python -m trio_routines {command} {common}")
    usage, _, rest = shown.partition(f" {DESCRIPTIONS[command]} ")
    assert rest, f"no description in {shown!r}"
    assert usage.endswith(
        common + (f" {OPTIONS_HELP[command][0]}" if OPTIONS_HELP[command] else "")
    )
    for line in OPTIONS_HELP[command][1:] + COMMON_HELP:
        assert line in rest


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        # A routine file -daily.md: its name read as an option, and the name found missing.
        (
            ["run", "-daily", "--agent", "echo"],
            "the following arguments are required: NAME — if -daily is a name, give it after "
            "--, as in python -m trio_routines run -- -daily",
        ),
        (
            ["history", "-x=1"],
            "the following arguments are required: NAME — if -x=1 is a name, give it after "
            "--, as in python -m trio_routines history -- -x=1",
        ),
        # An option's abbreviation is no name; nor is a dashed word where no name is missing.
        (["pause", "--stat=x"], "the following arguments are required: NAME (see --help)"),
        (["fire", "daily", "-x"], "the following arguments are required: --slot (see --help)"),
        (
            ["wake", "--session", "s", "--in", "1h", "-verbose"],
            "the following arguments are required: --prompt (see --help)",
        ),
        (
            ["wake", "--session", "-x", "--in", "5m", "--prompt", "p"],
            "argument --session: expected one argument — a value that begins with a dash goes "
            "after =, as in --session=-x",
        ),
        (["--state", "-s", "list"], "argument --state: expected one argument — a value that "),
        # Nothing dashed to name: argparse's words alone.
        (["run"], "the following arguments are required: NAME (see --help)"),
        (["wake", "--session"], "argument --session: expected one argument (see --help)"),
        (["pause", "--state", "x"], "the following arguments are required: NAME (see --help)"),
        (["pause", "--state=x"], "the following arguments are required: NAME (see --help)"),
        (["run", "--agent", "echo", "--"], "the following arguments are required: NAME (see"),
    ],
)
def test_a_word_beginning_with_a_dash_where_a_name_or_value_was_wanted_is_hinted_at(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    err = refusal(capsys, *argv)
    assert err.split(": error: ", 1)[1].startswith(said), err
