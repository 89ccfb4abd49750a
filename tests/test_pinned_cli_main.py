"""Pins of the command line's entry and ``migrate``, run in this process (``scripts/mutation.py
climain``): each command found in its module; the exit status and the one line on stderr for
every expected failure, alone or in a group; what is re-raised (a bug); an interrupt; a reader
gone away; streams that cannot take a character; and ``migrate``'s line for a state directory,
a new PostgreSQL schema, one up to date and one of an older version.

The commands' own work is replaced by a stand-in raising what a case needs; their processes
are tested in ``test_cli.py`` and ``test_postgres_upgrades.py``.
"""

from __future__ import annotations

import argparse
import ast
import errno
import fcntl
import importlib
import io
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pg import admin, fresh_schema, require_server
from psycopg import sql
from test_postgres_upgrades import build_old

from trio_routines import cli
from trio_routines.cli.migrating import cmd_migrate
from trio_routines.cli.output import CliError, state_label
from trio_routines.errors import InvalidWakeup, StateFault, TrioRoutinesError
from trio_routines.stores.postgres.schema import SCHEMA_VERSION


@pytest.fixture(autouse=True)
def no_logging_setup(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """``main`` sets up the process's logging: not this test process's."""
    calls: list[tuple[str, str]] = []
    monkeypatch.setattr(cli, "configure_logging", lambda *args: calls.append(args))
    return calls


def commanding(monkeypatch: pytest.MonkeyPatch, error: BaseException | None) -> list[Any]:
    """Every command replaced by one that raises ``error`` (or returns 7): the name it was
    found by, then what it was given."""
    given: list[Any] = []

    async def command(args: argparse.Namespace) -> int:
        given.append(args)
        if error is not None:
            raise error
        return 7

    def found(name: str) -> Any:
        given.append(name)
        return command

    monkeypatch.setattr(cli, "_command", found)
    return given


def test_every_command_is_found_in_its_module_and_every_one_the_parser_knows_has_one() -> None:
    parser_commands = set(cli.build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    assert set(cli._COMMANDS) == parser_commands
    for name, (module, function) in cli._COMMANDS.items():
        found = getattr(importlib.import_module(f"trio_routines.cli.{module}"), function)
        assert cli._command(name) is found
        assert function == f"cmd_{name}"


def test_main_runs_the_command_with_its_arguments_and_logging_set_up_as_asked(
    monkeypatch: pytest.MonkeyPatch, no_logging_setup: list[tuple[str, str]]
) -> None:
    given = commanding(monkeypatch, None)
    assert cli.main(["--log-level", "debug", "--log-format", "json", "list"]) == 7
    name, args = given
    assert name == "list"
    assert args.command == "list"
    assert no_logging_setup == [(args.log_format, args.log_level)]
    assert (args.log_format, args.log_level) == ("json", "debug")


def test_main_refuses_a_url_before_a_command_that_cannot_send_itself_and_runs_nothing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    given = commanding(monkeypatch, None)
    with pytest.raises(SystemExit) as exited:
        cli.main(["--url", "http://127.0.0.1:8080", "check"])
    assert exited.value.code == 2
    assert "error: --url does not go with check: " in capsys.readouterr().err
    assert given == []
    assert cli.main(["--url", "http://127.0.0.1:8080", "list"]) == 7
    assert given[1].url == "http://127.0.0.1:8080"


@pytest.mark.parametrize(
    ("error", "code", "line"),
    [
        (CliError("no such routine", code=2), 2, "error: no such routine"),
        (CliError("refused"), 1, "error: refused"),
        (StateFault("the disk is gone"), 1, "error: the disk is gone"),
        (OSError(errno.EACCES, "Permission denied"), 1, "error: [Errno 13] Permission denied"),
        (InvalidWakeup("too deep"), 1, "error: too deep"),
        (TrioRoutinesError(), 1, "error: TrioRoutinesError"),
        (StateFault("a\nb\x1b[31m"), 1, "error: a b\\x1b[31m"),
        (ExceptionGroup("g", [StateFault("first"), CliError("second", code=2)]), 1, "error: first"),
        (
            ExceptionGroup(
                "g", [CliError("outer", code=2), ExceptionGroup("h", [StateFault("x")])]
            ),
            2,
            "error: outer",
        ),
    ],
)
def test_an_expected_failure_is_one_line_on_stderr_and_its_status(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    error: BaseException,
    code: int,
    line: str,
) -> None:
    commanding(monkeypatch, error)
    assert cli.main(["list"]) == code
    captured = capsys.readouterr()
    assert captured.err == line + "\n"
    assert captured.out == ""


@pytest.mark.parametrize(
    "error",
    [
        ValueError("a bug"),
        ExceptionGroup("g", [StateFault("expected"), ValueError("a bug")]),
        ExceptionGroup("g", [ExceptionGroup("h", [ValueError("a bug")])]),
    ],
)
def test_anything_else_is_raised_as_the_bug_it_is(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: BaseException
) -> None:
    commanding(monkeypatch, error)
    with pytest.raises(type(error)) as caught:
        cli.main(["list"])
    assert caught.value is error
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "error",
    [
        KeyboardInterrupt(),
        BaseExceptionGroup("g", [StateFault("x"), KeyboardInterrupt()]),
        BaseExceptionGroup("g", [ValueError("x"), BaseExceptionGroup("h", [KeyboardInterrupt()])]),
    ],
)
def test_an_interrupt_ends_with_130_and_nothing_said(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], error: BaseException
) -> None:
    commanding(monkeypatch, error)
    assert cli.main(["list"]) == 130
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "error",
    [BrokenPipeError(errno.EPIPE, "Broken pipe"), ExceptionGroup("g", [BrokenPipeError()])],
)
def test_a_reader_gone_away_ends_with_1_its_output_sent_nowhere_and_nothing_said(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], error: BaseException
) -> None:
    commanding(monkeypatch, error)
    nowhere = 10_000  # a descriptor number no test opens: stands for /dev/null
    opened: list[tuple[str, int]] = []
    moved: list[tuple[int, int]] = []
    real_open, real_dup2 = os.open, os.dup2

    def spied_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if path == os.devnull:
            opened.append((path, flags))
            return nowhere
        return real_open(path, flags, *args, **kwargs)

    def spied_dup2(fd: int, fd2: int, *args: Any, **kwargs: Any) -> int:
        if fd == nowhere:
            moved.append((fd, fd2))
            return fd2
        return real_dup2(fd, fd2, *args, **kwargs)

    monkeypatch.setattr(os, "open", spied_open)
    monkeypatch.setattr(os, "dup2", spied_dup2)
    assert cli.main(["list"]) == 1
    assert opened == [(os.devnull, os.O_WRONLY)]
    assert moved == [(nowhere, sys.stdout.fileno())]
    assert capfd.readouterr().err == ""


def test_streams_that_cannot_take_a_character_get_it_escaped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    err = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)

    async def command(args: argparse.Namespace) -> int:
        sys.stdout.write("a — b\n")
        raise StateFault("c — d")

    monkeypatch.setattr(cli, "_command", lambda name: command)
    assert cli.main(["list"]) == 1
    for stream, text in ((out, b"a \\u2014 b\n"), (err, b"error: c \\u2014 d\n")):
        stream.flush()
        assert stream.buffer.getvalue() == text  # type: ignore[attr-defined]


def test_a_stream_that_is_not_a_text_wrapper_is_left_as_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    commanding(monkeypatch, None)
    assert cli.main(["list"]) == 7


# -- migrate --------------------------------------------------------------------------------------


def migrate_args(state: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(["migrate", "--state", state])


async def test_migrate_on_a_state_directory_says_it_has_no_schema(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = str(tmp_path / "state")
    assert await cmd_migrate(migrate_args(state)) == 0
    assert capsys.readouterr().out == (
        f"{state_label(state)}: a state directory has no schema to migrate — "
        "its files are read as they are found\n"
    )


@pytest.fixture
def schema_state() -> Iterator[tuple[str, str]]:
    url = require_server()
    with fresh_schema() as name:
        with admin() as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
        yield name, f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{name}"


async def test_migrate_creates_the_tables_then_has_nothing_to_do(
    schema_state: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    _, state = schema_state
    where = state_label(state)
    assert await cmd_migrate(migrate_args(state)) == 0
    assert (
        capsys.readouterr().out == f"{where}: tables created at schema version {SCHEMA_VERSION}\n"
    )
    assert await cmd_migrate(migrate_args(state)) == 0
    assert capsys.readouterr().out == (
        f"{where}: schema version {SCHEMA_VERSION}, nothing to migrate\n"
    )


async def test_migrate_brings_an_older_schema_up_and_says_from_which_version(
    schema_state: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    name, state = schema_state
    build_old(name, 5)
    assert await cmd_migrate(migrate_args(state)) == 0
    assert capsys.readouterr().out == (
        f"{state_label(state)}: migrated from schema version 5 to {SCHEMA_VERSION}\n"
    )


def catalog(name: str) -> list[tuple[str, str]]:
    """Every relation of schema ``name`` and its columns, as (relation, column or kind)."""
    with admin() as conn:
        rows = conn.execute(
            "SELECT c.relname, coalesce(a.attname, c.relkind::text) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 "
            "AND NOT a.attisdropped WHERE n.nspname = %s ORDER BY 1, 2",
            (name,),
        ).fetchall()
    return [(str(relation), str(column)) for relation, column in rows]


async def test_migrate_re_creates_what_a_hand_dropped_from_a_current_schema(
    schema_state: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    name, state = schema_state
    where = state_label(state)
    assert await cmd_migrate(migrate_args(state)) == 0
    capsys.readouterr()
    whole = catalog(name)

    def table(short: str) -> sql.Identifier:
        return sql.Identifier(name, f"trio_routines_{short}")

    with admin() as conn:  # an operator's hand, the version table untouched
        conn.execute(sql.SQL("DROP INDEX {}").format(table("wakeups_due")))
        conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN output").format(table("claims")))
        conn.execute(sql.SQL("DROP TABLE {}").format(table("wake_turns")))  # and its indexes
    assert await cmd_migrate(migrate_args(state)) == 0
    shown = '"trio_routines_'  # the search_path's schema: names as the URL's store uses them
    assert capsys.readouterr().out == (
        f"{where}: re-created what schema version {SCHEMA_VERSION} has and the database "
        f'lacked, empty: column {shown}claims".output, table {shown}wake_turns", '
        f'index {shown}wakeups_due"\n'
    )
    assert catalog(name) == whole
    assert await cmd_migrate(migrate_args(state)) == 0
    assert capsys.readouterr().out == (
        f"{where}: schema version {SCHEMA_VERSION}, nothing to migrate\n"
    )
    # Columns tables were created with (NOT NULL, no default), one taking its index with it:
    # nothing is re-created (the index's step would fail without its column); all is named.
    with admin() as conn:
        conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN fired_at").format(table("claims")))
        conn.execute(sql.SQL("ALTER TABLE {} DROP COLUMN outcome").format(table("claims")))
        conn.execute(sql.SQL("DROP INDEX {}").format(table("wakeups_id")))
    damaged = catalog(name)
    for _ in range(2):  # as often as it is asked
        with pytest.raises(CliError) as raised:
            await cmd_migrate(migrate_args(state))
        assert str(raised.value) == (
            f"{where}: missing from schema version {SCHEMA_VERSION}, and not re-created: column "
            f'{shown}claims".fired_at, column {shown}claims".outcome, index {shown}wakeups_id", '
            f'index {shown}claims_open" — a column a table was created with cannot be; restore '
            "it by hand, then run migrate again"
        )
        assert capsys.readouterr().out == ""
        assert catalog(name) == damaged
    with admin() as conn:  # restored by hand: the rest is migrate's
        conn.execute(
            sql.SQL(
                "ALTER TABLE {} ADD COLUMN fired_at timestamptz NOT NULL, ADD COLUMN outcome text"
            ).format(table("claims"))
        )
    assert await cmd_migrate(migrate_args(state)) == 0
    assert capsys.readouterr().out == (
        f"{where}: re-created what schema version {SCHEMA_VERSION} has and the database "
        f'lacked, empty: index {shown}wakeups_id", index {shown}claims_open"\n'
    )
    assert sorted(catalog(name)) == sorted(whole)


async def test_migrate_leaves_a_newer_schema_it_may_use_as_it_is(
    schema_state: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    name, state = schema_state
    assert await cmd_migrate(migrate_args(state)) == 0
    with admin() as conn:  # newer code's: it dropped an index of ours, and lets us use it
        conn.execute(
            sql.SQL("DROP INDEX {}").format(sql.Identifier(name, "trio_routines_wakeups_due"))
        )
        conn.execute(
            sql.SQL("INSERT INTO {} (version, compatible_from) VALUES (%s, 5)").format(
                sql.Identifier(name, "trio_routines_schema")
            ),
            (SCHEMA_VERSION + 1,),
        )
    capsys.readouterr()
    before = catalog(name)
    assert await cmd_migrate(migrate_args(state)) == 0
    assert capsys.readouterr().out == (
        f"{state_label(state)}: schema version {SCHEMA_VERSION + 1}, nothing to migrate\n"
    )
    assert catalog(name) == before


# --- standard streams closed at the start ----------------------------------------------------


def _in_a_fork(closing: tuple[int, ...], body: Any) -> Any:
    """``body()``'s answer, run in a child of this process started with ``closing`` closed
    (``list >&-``): the descriptors of this test process are left alone."""
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover -- the child's, reported through the pipe
        code = 1
        try:
            os.close(read)
            for fd in closing:
                os.close(fd)
            answer = body()
            os.write(write, repr(answer).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, said
    return ast.literal_eval(said.decode())


def _standard_fds() -> list[tuple[int, int]]:
    """Device and inode of descriptors 0, 1 and 2."""
    return [(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (0, 1, 2)]


@pytest.mark.parametrize("closing", [(0,), (1,), (2,), (0, 2), (1, 2), (0, 1, 2)])
def test_each_closed_standard_descriptor_gets_dev_null_and_a_stream_on_it(
    closing: tuple[int, ...],
) -> None:
    def body() -> Any:
        before = sys.stdout, sys.stderr
        closed = cli._fill_closed()
        null = os.stat(os.devnull)
        on_null = [
            fd
            for fd in (0, 1, 2)
            if (os.fstat(fd).st_dev, os.fstat(fd).st_ino) == (null.st_dev, null.st_ino)
        ]
        spare = os.open(os.devnull, os.O_RDONLY)  # the next descriptor: none of 0-2
        streams = [  # a new stream only on a descriptor filled, and on that one
            (stream is not old, stream.fileno() if stream is not old else None)
            for stream, old in zip((sys.stdout, sys.stderr), before, strict=True)
        ]
        writable = [stream.writable() for stream in (sys.stdout, sys.stderr)]
        os.close(spare)
        modes = [os.O_ACCMODE & fcntl.fcntl(fd, fcntl.F_GETFL) for fd in sorted(closed)]
        return sorted(closed), on_null, spare > 2, streams, writable, modes

    # This process has its three (and mutmut learns here which tests reach the function).
    assert cli._fill_closed() == set()
    closed, on_null, spare_above, streams, writable, modes = _in_a_fork(closing, body)
    assert closed == list(closing)
    assert set(closing) <= set(on_null)
    assert spare_above
    assert streams == [
        (1 in closing, 1 if 1 in closing else None),
        (2 in closing, 2 if 2 in closing else None),
    ]
    assert writable == [True, True]
    assert modes == [os.O_RDWR] * len(closing)  # readable for stdin, writable for the others


def test_a_descriptor_filled_at_a_higher_number_is_moved_to_its_own() -> None:
    # Another thread took the lowest free number first: /dev/null opens above it, and is
    # moved down to the closed descriptor, its higher number let go.
    def body() -> Any:
        real_open = os.open

        def opened_high(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            low = real_open(path, flags, *args, **kwargs)
            high = fcntl.fcntl(low, fcntl.F_DUPFD, 20)
            os.close(low)
            return high

        highs: list[int] = []

        def opened_high_seen(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
            highs.append(opened_high(path, flags, *args, **kwargs))
            return highs[-1]

        os.open = opened_high_seen  # (this child's own module, gone with it)
        closed = cli._fill_closed()
        null = os.stat(os.devnull)
        filled = (os.fstat(1).st_dev, os.fstat(1).st_ino) == (null.st_dev, null.st_ino)
        high_open = True
        try:
            os.fstat(highs[0])  # the number /dev/null was opened at, whichever was free
        except OSError:
            high_open = False
        return closed, filled, high_open, highs[0] >= 20

    assert cli._fill_closed() == set()
    assert _in_a_fork((1,), body) == ({1}, True, False, True)


def test_the_streams_put_on_filled_descriptors_leave_them_open_when_closed() -> None:
    # The process's own streams: closing one (at exit, or by a library) must not free 1 or 2
    # for the next file opened.
    def body() -> Any:
        cli._fill_closed()
        sys.stdout.close()
        sys.stderr.close()
        return [os.fstat(fd).st_ino == os.stat(os.devnull).st_ino for fd in (1, 2)]

    assert cli._fill_closed() == set()
    assert _in_a_fork((1, 2), body) == [True, True]


def test_nothing_closed_is_filled_and_no_stream_replaced() -> None:
    def body() -> Any:
        before = _standard_fds(), sys.stdout, sys.stderr
        closed = cli._fill_closed()
        return closed, before[0] == _standard_fds(), (sys.stdout, sys.stderr) == before[1:]

    assert cli._fill_closed() == set()
    assert _in_a_fork((), body) == (set(), True, True)


def test_a_command_that_only_reads_refuses_a_closed_stdout_and_one_that_acts_runs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    given = commanding(monkeypatch, None)
    for closed, command, status in [({1}, "list", 1), ({2}, "list", 7), ({1}, "pause", 7)]:
        monkeypatch.setattr(cli, "_fill_closed", lambda closed=closed: set(closed))
        argv = [command] if command == "list" else [command, "daily"]
        assert cli.main(argv) == status
        said = capsys.readouterr().err
        if status == 1:
            assert said == "error: stdout is closed: list has nowhere to write\n"
        else:
            assert said == ""
    assert [g for g in given if isinstance(g, str)] == ["list", "pause"]


def test_a_closed_stream_that_cannot_be_filled_is_one_line_and_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    given = commanding(monkeypatch, None)

    def no_null() -> set[int]:
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", os.devnull)

    monkeypatch.setattr(cli, "_fill_closed", no_null)
    assert cli.main(["list"]) == 1
    assert capsys.readouterr().err == (
        "error: a standard stream is closed and cannot be filled: "
        "[Errno 2] No such file or directory: '/dev/null'\n"
    )
    monkeypatch.setattr(sys, "stderr", None)  # the stream closed was stderr: nothing to say
    assert cli.main(["list"]) == 1
    assert given == []
