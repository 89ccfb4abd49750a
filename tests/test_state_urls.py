"""A ``--state`` that is a URL of no store is refused, never read as a directory path.

Read as a path, ``postgresq://db.example/prod`` is the directory ``postgresq:/db.example/prod``
under the working directory: replicas meant to share a database would each keep a state of
their own, and every one would fire every slot. Only ``postgresql://`` and ``postgres://``
(libpq's two prefixes, in its case) name a database; any other ``scheme://`` is an error, with
its credentials masked; a directory whose name starts so is given as ``./name``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from procs import Env, in_process, one_line

from trio_routines import open_store
from trio_routines.stores import DirectoryStore, state_problem

REFUSED = [
    "postgresq://db.example/prod",
    "postgresl://db.example/prod",
    "PostgreSQL://db.example/prod",  # libpq reads its prefixes in lower case only
    "POSTGRES://db.example/prod",
    "mysql://db.example/prod",
    "file:///var/lib/trio-routines",
    "sqlite:///state.db",
    "redis://localhost:6379/0",
    "x://",
    "a+b.c-d://host",
    " postgresql://db.example/prod",  # a blank before it: not libpq's prefix
    "\tpostgres://db.example/prod",
    "postgresql:/db.example/prod",  # a slash short
    "Postgres:db",
]

TAKEN_AS_PATHS = [
    "state",
    "./state",
    "/var/lib/trio-routines",
    "./postgresq://db.example/prod",  # a directory whose name looks like a URL, as asked
    "dir:name",
    "C:/state",  # a drive letter has no "//"
    "1http://x",  # a scheme starts with a letter
    "my state://x",  # nor holds a blank
]


@pytest.mark.parametrize("state", REFUSED)
def test_a_url_of_another_scheme_is_a_problem(state: str) -> None:
    problem = state_problem(state)
    assert problem == (
        f"{state} is a URL of no store (a PostgreSQL URL starts with postgresql:// or "
        "postgres://); for a directory of that name, write ./ before it"
    )


DATABASES = ["postgresql://db/x", "postgres://u@db:5433/x?sslmode=off"]


@pytest.mark.parametrize("state", DATABASES, ids=["long-prefix", "short-prefix"])
def test_a_database_url_is_no_problem_and_opens_the_database_store(state: str) -> None:
    from trio_routines.stores.postgres import PostgresStore

    assert state_problem(state) is None
    store = open_store(state, migrate="never")  # nothing is connected before it is used
    assert isinstance(store, PostgresStore)
    assert (store.url, store._tables.migrates) == (state, "never")


@pytest.mark.parametrize("state", TAKEN_AS_PATHS)
def test_a_path_is_no_problem(state: str) -> None:
    assert state_problem(state) is None


@pytest.mark.parametrize("state", ["", " ", "\t"])
def test_an_empty_state_names_nothing_not_the_working_directory(
    state: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    empty = "the state is empty: name a directory (. for this one) or a postgresql:// URL"
    assert state_problem(state) == empty
    with pytest.raises(ValueError, match=r"^the state is empty") as refused:
        open_store(state)
    assert str(refused.value) == empty
    with pytest.raises(ValueError, match=r"^the state directory is empty") as refused:
        DirectoryStore(state)
    assert str(refused.value) == "the state directory is empty: name one (. for this directory)"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("state", ["a\x00b", "\x00", "postgresql://h/db\x00"])
def test_a_state_with_a_nul_is_refused_where_it_is_opened(
    state: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Else accepted, and each call of the store failed on it with a bare ValueError.
    monkeypatch.chdir(tmp_path)
    said = "the state holds a NUL character: no directory or URL can"
    assert state_problem(state) == said
    with pytest.raises(ValueError, match="NUL") as refused:
        open_store(state)
    assert str(refused.value) == said
    assert list(tmp_path.iterdir()) == []


def test_a_state_given_as_bytes_is_a_type_error_saying_so() -> None:
    with pytest.raises(TypeError) as refused:
        open_store(b"state")  # type: ignore[arg-type]
    assert str(refused.value) == (
        "the state must be text, a path or a postgresql:// URL, not b'state'"
    )


def test_a_scheme_needs_its_two_slashes() -> None:
    # "state://" starts with a scheme and "//": refused like any URL (./state:// is the path).
    assert state_problem("state://") is not None
    assert state_problem("state:/x") is None
    assert state_problem("./state://") is None


def test_a_user_without_a_password_is_shown_as_given() -> None:
    problem = state_problem("mysql://admin@db/prod")
    assert problem is not None
    assert problem.startswith("mysql://admin@db/prod is a URL")


def test_a_password_with_a_slash_or_an_at_sign_is_masked_whole() -> None:
    problem = state_problem("mysql://admin:hun/t@r@db/prod")
    assert problem is not None
    assert problem.startswith("mysql://admin:***@db/prod is a URL")
    assert "hun" not in problem


def test_the_credentials_of_a_refused_url_are_masked() -> None:
    problem = state_problem("mysql://admin:hunter22@db/prod?password=s3cret&sslmode=off")
    assert problem is not None
    assert problem.startswith("mysql://admin:***@db/prod?password=***&sslmode=off is a URL")
    assert "hunter22" not in problem
    assert "s3cret" not in problem


def test_open_store_refuses_it_and_creates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"^postgresq://db/prod is a URL of no store \("):
        open_store("postgresq://db/prod")
    assert list(tmp_path.iterdir()) == []
    # A path of that look, asked for as one, is a state directory.
    store = open_store("./postgresq://db/prod")
    assert isinstance(store, DirectoryStore)


COMMANDS = [
    ["list"],
    ["history", "daily"],
    ["pause", "daily"],
    ["resume", "daily"],
    ["fire", "daily", "--slot", "2026-07-07T09:00Z", "--agent", "echo"],
    ["run", "daily", "--agent", "echo"],
    ["wake", "--session", "s", "--in", "5m", "--prompt", "p"],
    ["serve", "--agent", "echo"],
    ["migrate"],
    ["status"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda args: args[0])
def test_every_command_refuses_it_in_one_line_and_writes_nothing(env: Env, args: list[str]) -> None:
    env.routine("daily", cron="0 9 * * *")
    before = sorted(env.root.rglob("*"))
    argv = env.argv(*args)[3:]
    argv[argv.index("--state") + 1] = "postgresq://admin:hunter22@db.example/prod"
    result = in_process(argv, cwd=env.root, environ=env.environ())
    assert (result.returncode, result.stdout) == (2, ""), result.stderr
    assert one_line(result.stderr) == (
        "error: --state: postgresq://admin:***@db.example/prod is a URL of no store "
        "(a PostgreSQL URL starts with postgresql:// or postgres://); for a directory of "
        "that name, write ./ before it\n"
    )
    assert sorted(env.root.rglob("*")) == before


def test_the_environment_variable_is_named_when_it_gave_the_url(env: Env) -> None:
    env.routine("daily", cron="0 9 * * *")
    argv = env.argv("list")[3:]
    index = argv.index("--state")
    del argv[index : index + 2]
    result = in_process(
        argv, cwd=env.root, environ={**env.environ(), "TRIO_ROUTINES_STATE": "redis://r/0"}
    )
    assert result.returncode == 2
    assert one_line(result.stderr).startswith("error: $TRIO_ROUTINES_STATE: redis://r/0 is a URL")
    assert not (env.root / "redis:").exists()
