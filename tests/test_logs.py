"""Log lines an operator can use: stamped, one line, the routine and slot on every fire line."""

from __future__ import annotations

import ipaddress
import json
import logging
import os
import re
import socket
import subprocess
import sys
import traceback
from pathlib import Path

import pytest
from logrecords import SLOT, STAMP, record
from procs import Env

from trio_routines.context import FireContext, firing
from trio_routines.logs import (
    FireFormatter,
    JournalFormatter,
    JsonFormatter,
    TextFormatter,
    journal_stream,
    log_fields,
)


def test_a_fire_line_carries_the_instant_routine_and_slot() -> None:
    why = FireContext("routine", "routine:digest", routine="digest", slot=SLOT)
    with firing(why), log_fields(late_ms=12):
        line = record("%s completed (%dms)", "digest", 1200, outcome="completed", ms=1200)
    text = TextFormatter().format(line)
    assert re.fullmatch(STAMP + r" INFO  digest slot=2026-11-30T09:00Z completed \(1200ms\)", text)
    entry = json.loads(JsonFormatter().format(line))
    assert entry.pop("ts")
    assert entry == {
        "level": "INFO",
        "message": "digest completed (1200ms)",
        "routine": "digest",
        "slot": "2026-11-30T09:00:00.000Z",
        "outcome": "completed",
        "ms": 1200,
        "late_ms": 12,
        "host": socket.gethostname(),
        "pid": os.getpid(),
    }


def test_a_line_outside_a_fire_has_no_routine_fields() -> None:
    line = record("wake-ups: polling every %gs", 30)
    assert re.fullmatch(STAMP + r" INFO  wake-ups: polling every 30s", TextFormatter().format(line))
    entry = json.loads(JsonFormatter().format(line))
    assert set(entry) == {"ts", "level", "message", "host", "pid"}


def test_explicit_fields_win_and_a_message_not_led_by_the_name_is_kept_whole() -> None:
    why = FireContext("routine", "s", routine="other", slot=SLOT)
    with firing(why):
        line = record("claim raced: %s", "x", level=logging.DEBUG, routine="digest", slot=SLOT)
    text = TextFormatter().format(line)
    assert text.endswith("DEBUG digest slot=2026-11-30T09:00Z claim raced: x")


def test_hostile_names_and_errors_stay_on_one_line_in_both_formats() -> None:
    name = "evil\n\u2028\x1b[2J\x85"
    why = FireContext("routine", "s", routine=name, slot=SLOT)
    with firing(why):
        line = record(
            "%s failed: %s", name, "boom\u2029again", level=logging.ERROR, error="a\u2028b"
        )
    text = TextFormatter().format(line)
    assert text.splitlines() == [text]
    assert "\x1b" not in text
    assert "\x85" not in text
    as_json = JsonFormatter().format(line)
    assert as_json.splitlines() == [as_json]
    assert json.loads(as_json)["routine"] == name  # the exact name, escaped only in transit


def test_two_names_that_differ_in_a_line_break_or_a_space_log_apart() -> None:
    """A text a record is given keeps its line breaks visible; folding would log both ``a b``."""
    lines = []
    for name in ("line\nbreak", "line break", "line\tbreak"):
        line = record("%s firing (session=%s)", name, f"routine:{name}")
        lines.append(TextFormatter().format(line).split(" ", 1)[1])
        with firing(FireContext("routine", f"routine:{name}", routine=name, slot=SLOT)):
            fired = record("%s completed (%dms)", name, 3)
        lines.append(TextFormatter().format(fired).split(" ", 1)[1])
    assert lines == [
        "INFO  line\\x0abreak firing (session=routine:line\\x0abreak)",
        "INFO  line\\x0abreak slot=2026-11-30T09:00Z completed (3ms)",
        "INFO  line break firing (session=routine:line break)",
        "INFO  line break slot=2026-11-30T09:00Z completed (3ms)",
        "INFO  line\\x09break firing (session=routine:line\\x09break)",
        "INFO  line\\x09break slot=2026-11-30T09:00Z completed (3ms)",
    ]


def test_a_text_given_for_a_repr_shows_its_own_escapes() -> None:
    line = record("%r of %s, %d%% %s", "sess\tx", "sess\tx", 5, "a%sb")
    said = TextFormatter().format(line).split(" ", 1)[1]
    assert said == "INFO  'sess\\tx' of sess\\x09x, 5% a%sb"
    starred = record("[%*d] %s", 3, 7, "a\nb")  # a width given as an argument: as logging does
    assert TextFormatter().format(starred).endswith(" INFO  [ 7] a b")  # (folded)


def test_the_format_of_a_record_is_folded_and_its_texts_escaped() -> None:
    line = record("first\nsecond:  %s and %d", "a\x1bb", 7)
    assert TextFormatter().format(line).endswith(" INFO  first second: a\\x1bb and 7")
    mapped = record("%(who)s\nasked", {"who": "x\ny"})  # a mapping: as logging formats it
    assert TextFormatter().format(mapped).endswith(" INFO  x y asked")


def _raising_deep() -> None:
    raise KeyError("a\nb\x1b")


def _raising_elsewhere() -> None:
    ipaddress.ip_address("x")  # raised in another module, two frames down


def test_an_exception_a_record_carries_is_said_on_its_line_and_whole_in_json() -> None:
    # ``log.exception`` (a request's unexpected error): its cause, where it was raised, never
    # a line of its own; the JSON line carries the whole traceback, escaped.
    try:
        _raising_deep()
    except KeyError:
        line = record("GET /: unexpected error", level=logging.ERROR)
        line.exc_info = sys.exc_info()
    raised_at = _raising_deep.__code__.co_firstlineno + 1
    said = f" — KeyError: 'a\\nb\\x1b' (at test_logs.py:{raised_at} in _raising_deep)"
    text = TextFormatter().format(line)
    assert re.fullmatch(STAMP + " ERROR GET /: unexpected error" + re.escape(said), text)
    assert JournalFormatter().format(line) == "<3>ERROR GET /: unexpected error" + said
    entry = json.loads(JsonFormatter().format(line))
    assert entry["message"] == "GET /: unexpected error"
    assert entry["exception"].startswith("Traceback (most recent call last):\n")
    assert entry["exception"].endswith(
        ", in _raising_deep\n    raise KeyError(\"a\\nb\\x1b\")\nKeyError: 'a\\nb\\x1b'\n"
    )
    bare = record("plain", level=logging.ERROR)
    bare.exc_info = (RuntimeError, RuntimeError(), None)  # no traceback, no message
    assert TextFormatter().format(bare).endswith("ERROR plain — RuntimeError")
    assert json.loads(JsonFormatter().format(bare))["exception"] == "RuntimeError\n"
    # Where it was raised: the innermost frame, in whichever module.
    try:
        _raising_elsewhere()
    except ValueError:
        deep = record("deep", level=logging.ERROR)
        deep.exc_info = sys.exc_info()
        where = traceback.extract_tb(deep.exc_info[2])[-1]
    assert where.name == "ip_address"
    assert (
        TextFormatter()
        .format(deep)
        .endswith(
            f"ERROR deep — ValueError: 'x' does not appear to be an IPv4 or IPv6 address "
            f"(at ipaddress.py:{where.lineno} in ip_address)"
        )
    )
    assert "exception" not in json.loads(JsonFormatter().format(record("no exception")))


@pytest.mark.slow
def test_a_fire_in_a_real_process_logs_its_fields_and_a_duplicate_only_at_debug(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    slot = "2026-07-07T09:00:00.000Z"
    failing = "cmd:echo 'key expired' >&2; exit 2"
    result = env.cli("--log-format", "json", "fire", "daily", "--slot", slot, "--agent", failing)
    assert result.returncode == 1
    records = [json.loads(line) for line in result.stderr.splitlines()]
    (outcome,) = [r for r in records if "outcome" in r]
    assert outcome["level"] == "ERROR"
    assert outcome["routine"] == "daily"
    assert outcome["slot"] == slot
    assert outcome["replica"] == f"{socket.gethostname()}:{outcome['pid']}"  # the default id
    assert outcome["outcome"] == "failed"
    assert outcome["error"] == "exit status 2: key expired"
    assert isinstance(outcome["ms"], int)
    assert outcome["late_ms"] > 0  # the slot is long past
    assert (outcome["host"], outcome["pid"]) == (socket.gethostname(), outcome["pid"])
    assert {r["pid"] for r in records} == {outcome["pid"]}

    # What a duplicate logs, not the process: in this one (whose replica is no longer host:pid).
    again = env.run_cli("fire", "daily", "--slot", slot, "--agent", "echo")
    assert (again.returncode, again.stderr) == (0, "")  # a duplicate is normal: not INFO
    debug = env.cli("--log-level", "debug", "fire", "daily", "--slot", slot, "--agent", "echo")
    (line,) = [line for line in debug.stderr.splitlines() if "already claimed" in line]
    replica = re.escape(f"{socket.gethostname()}:")
    assert re.fullmatch(
        STAMP + f" DEBUG daily slot=2026-07-07T09:00Z replica={replica}\\d+ skipping — .*", line
    )


def test_the_journal_line_has_no_stamp_of_ours_and_leads_with_the_priority() -> None:
    with firing(FireContext("routine", "routine:digest", routine="digest", slot=SLOT)):
        line = JournalFormatter().format(record("digest: completed (%dms)", 12))
    warning = JournalFormatter().format(record("clock\njumped", level=logging.WARNING))
    assert line == "<6>INFO  digest slot=2026-11-30T09:00Z completed (12ms)"
    assert warning == "<4>WARN  clock jumped"
    assert JournalFormatter().format(record("x", level=logging.ERROR)).startswith("<3>ERROR ")
    assert JournalFormatter().format(record("x", level=logging.DEBUG)).startswith("<7>DEBUG ")


def test_journal_stream_is_stderr_only_when_its_device_and_inode_match(tmp_path: Path) -> None:
    with (tmp_path / "err").open("w") as stream, (tmp_path / "other").open("w") as other:
        own = os.fstat(stream.fileno())
        named = {"JOURNAL_STREAM": f"{own.st_dev}:{own.st_ino}"}
        assert journal_stream(named, stream)
        assert not journal_stream(named, other)  # inherited, but stderr went elsewhere
        assert not journal_stream({}, stream)
        assert not journal_stream({"JOURNAL_STREAM": "nonsense"}, stream)


@pytest.mark.slow
def test_under_the_journal_the_command_line_writes_journal_lines(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    slot = "2026-07-07T09:00:00.000Z"
    argv = env.argv("fire", "daily", "--slot", slot, "--agent", "echo")
    for journal in (True, False):
        with (env.root / "err").open("w+") as err:
            environ = env.environ()
            if journal:
                own = os.fstat(err.fileno())
                environ["JOURNAL_STREAM"] = f"{own.st_dev}:{own.st_ino}"
            done = subprocess.run(argv, stderr=err, env=environ, cwd=env.root, timeout=60)
            err.seek(0)
            lines = err.read().splitlines()
        assert done.returncode == 0
        completed = [line for line in lines if re.search(r"completed \(\d+ms\)$", line)]
        if journal:
            assert completed[0].startswith("<6>INFO  daily slot=2026-07-07T09:00Z replica=")
        else:
            assert re.match(STAMP + " INFO  daily slot=", completed[0])
        slot = "2026-07-08T09:00:00.000Z"
        argv = env.argv("fire", "daily", "--slot", slot, "--agent", "echo")
    explicit = env.run_cli(
        "--log-format", "journal", "fire", "daily", "--slot", "2026-07-09T09:00Z", "--agent", "echo"
    )
    assert explicit.stderr.splitlines()[-1].startswith("<6>INFO  daily slot=2026-07-09T09:00Z")


@pytest.mark.parametrize("level", ["info", "error"])
def test_the_errors_that_end_a_command_are_written_in_the_logs_format(env: Env, level: str) -> None:
    # A service that refuses to start says why where its log is: with a priority in the
    # journal (`journalctl -p err` shows it), as JSON for a collector.
    (env.routines / "broken.md").write_text("---\ncron: nope\n---\nhi\n")
    said = "invalid cron/tz — expected 5 fields"
    refusal = (
        f"serve refuses to start: 1 broken routine file(s) in {env.routines} "
        "(see `python -m trio_routines check`)"
    )
    base = ("--log-level", level, "--agent", "echo")
    plain = env.run_cli(*base, "--log-format", "text", "serve")
    assert plain.returncode == 1
    assert plain.stderr.splitlines() == [
        f"error: {env.routines / 'broken.md'}: {said} (minute hour day-of-month month "
        "day-of-week), got 1",
        f"error: {refusal}",
    ]
    journal = env.run_cli(*base, "--log-format", "journal", "serve")
    assert journal.returncode == 1
    lines = journal.stderr.splitlines()
    assert [line[:9] for line in lines] == ["<3>ERROR ", "<3>ERROR "]
    assert said in lines[0]
    assert lines[1].endswith(refusal)
    as_json = env.run_cli(*base, "--log-format", "json", "serve")
    assert as_json.returncode == 1
    entries = [json.loads(line) for line in as_json.stderr.splitlines()]
    assert [(e["level"], e["message"]) for e in entries][1] == ("ERROR", refusal)
    assert entries[0]["level"] == "ERROR"
    assert said in entries[0]["message"]


def test_a_hosts_own_format_gets_the_fire_fields_in_its_message() -> None:
    own = FireFormatter("%(name)s [%(levelname)s] %(message)s")
    why = FireContext("routine", "routine:digest", routine="digest", slot=SLOT, replica="web-1")
    with firing(why):
        made = record("digest: completed (%dms)", 12)
    assert own.format(made) == (
        "trio_routines [INFO] digest slot=2026-11-30T09:00Z replica=web-1 completed (12ms)"
    )
    assert made.getMessage() == "digest: completed (12ms)"  # the record itself is unchanged
    outside = own.format(record("clock\njumped \x1b[2J", level=logging.WARNING))
    assert outside == "trio_routines [WARNING] clock jumped \\x1b[2J"


def test_a_message_that_merely_begins_with_the_routines_letters_is_kept_whole() -> None:
    # Lines of a store or of the runtime logged during the turn of routine "c", or of "wake".
    def line(routine: str, message: str) -> str:
        with firing(FireContext("routine", f"routine:{routine}", routine=routine, slot=SLOT)):
            made = record(message, level=logging.WARNING)
        return TextFormatter().format(made).split(" ", 1)[1]

    assert line("c", "could not prune fired-slot claims") == (
        "WARN  c slot=2026-11-30T09:00Z could not prune fired-slot claims"
    )
    assert line("wake", "wake-ups: polling every 30s") == (
        "WARN  wake slot=2026-11-30T09:00Z wake-ups: polling every 30s"
    )
    # Led by the name as a word, it is taken off: alone, before a colon or a space.
    assert line("c", "c") == "WARN  c slot=2026-11-30T09:00Z"
    assert line("c", "c: ran") == "WARN  c slot=2026-11-30T09:00Z ran"
    assert line("c", "c ran") == "WARN  c slot=2026-11-30T09:00Z ran"
