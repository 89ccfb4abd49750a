"""Credentials in a state, masked wherever the state is shown (trio_routines.stores.credentials).

libpq (through psycopg's parser) is the judge of what a credential is: every generated form is
first checked to give libpq exactly the secret, then checked to show nothing of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pg import schema_url
from procs import Env, stop
from psycopg.conninfo import conninfo_to_dict

from trio_routines.errors import StateFault
from trio_routines.stores.credentials import shown_message, shown_state
from trio_routines.stores.postgres import PostgresStore


def libpq_quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


FORMS: dict[str, tuple[str, Callable[[str], str]]] = {
    "user-info": ("password", lambda s: f"postgresql://u:{quote(s, safe='')}@h:5432/db"),
    "query": ("password", lambda s: f"postgresql://h/db?sslmode=disable&password={quote(s)}"),
    "query, key encoded": (
        "password",
        lambda s: f"postgres://h/db?pass%77ord={quote(s)}&application_name=b",
    ),
    "query, sslpassword": ("sslpassword", lambda s: f"postgresql:///db?sslpassword={quote(s)}"),
    "key=value": ("password", lambda s: f"host=h password={libpq_quoted(s)} dbname=db"),
    "key = value": ("password", lambda s: f"host=h  password = {libpq_quoted(s)}"),
    "key=value, sslpassword": ("sslpassword", lambda s: f"sslpassword={libpq_quoted(s)}"),
}

# "Zq" marks the secret: nothing else in the forms holds it, so any piece of it shown is found.
secrets = st.text(st.characters(blacklist_characters="\x00", codec="utf-8"), min_size=2).map(
    lambda s: "Zq" + s
)


@pytest.mark.parametrize("form", FORMS, ids=list(FORMS))
@given(secret=secrets)
def test_every_form_libpq_reads_a_credential_from_is_masked(form: str, secret: str) -> None:
    key, make = FORMS[form]
    state = make(secret)
    assert conninfo_to_dict(state)[key] == secret  # libpq reads exactly this secret
    shown = shown_state(state)
    assert "***" in shown
    assert "Zq" not in shown
    assert "Zq" not in shown_message(f"connecting to {state} failed: {secret}", state)


@pytest.mark.parametrize(
    ("state", "shown"),
    [
        (".state", ".state"),
        ("/srv/state dir", "/srv/state dir"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
        ("postgresql://h:5432/db?application_name=x", "postgresql://h:5432/db?application_name=x"),
        ("postgresql://u:Zq@h/db?", "postgresql://u:***@h/db?"),
        ("POSTGRES://u:Zq@h/db", "POSTGRES://u:***@h/db"),
        # libpq ends the user-info at the first "@"; we mask up to the last.
        ("postgresql://u:Zq@ss@h/db", "postgresql://u:***@h/db"),
        # An unencoded "&" in a password: the rest, no parameter, is masked too.
        ("postgresql://h/db?password=Zq&ss", "postgresql://h/db?password=***&***"),
        # libpq reads the user-info up to an "@" past a "?": a user name, still masked.
        ("postgresql://h?password=Zq@b", "postgresql://h?password=***@b"),
        # A raw "/" in a password: the user-info runs to the last "@" before the query.
        ("postgresql://me:Zq/rs@h/db", "postgresql://me:***@h/db"),
        ("postgresql://me:Zq/r@s@h/db?sslmode=off", "postgresql://me:***@h/db?sslmode=off"),
        # An "@" in the path, no user-info: shown as it is.
        ("postgresql://h/db@x", "postgresql://h/db@x"),
        ("host=h PASSWORD=Zq", "host=h PASSWORD=***"),
        ("host=h password='Zq unterminated", "host=h password=***"),
        ("user=me passwords=x", "user=me passwords=x"),
    ],
)
def test_the_shown_state(state: str, shown: str) -> None:
    assert shown_state(state) == shown


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://u:Zq%zz@h/db",  # a bad percent-encoding in the password
        "postgresql://h/db?password=Zq%zz",
        "postgresql://h/db?password=a&Zqzz",  # an unencoded "&": libpq quotes the rest
    ],
)
def test_a_url_libpq_cannot_parse_is_refused_without_its_password(url: str) -> None:
    with pytest.raises(StateFault, match="invalid PostgreSQL state URL") as info:
        PostgresStore(url)
    assert "Zq" not in str(info.value)


def test_a_password_with_a_raw_at_sign_is_refused_before_libpq_shows_its_end() -> None:
    # libpq would read the password "p" and the host "Zq@h", and show that host in every error.
    with pytest.raises(StateFault, match=r"percent-encode an '@' .* as %40") as info:
        PostgresStore("postgresql://u:p@Zq@127.0.0.1/test")
    assert "Zq" not in str(info.value)


def test_an_unknown_parameter_is_still_named() -> None:
    with pytest.raises(StateFault, match='invalid URI query parameter: "bogus"'):
        PostgresStore("postgresql://h/db?bogus=1")


# -- where a state is shown: serve's log and the commands' messages ------------------------


@pytest.fixture
def pg_state() -> Iterator[str]:
    with schema_url() as url:
        # Trust authentication: the password is sent and ignored; the commands work.
        yield f"{url}&password=Zq-secret&sslpassword=Zq-passphrase"


@pytest.mark.slow
def test_serve_and_the_commands_never_show_a_password_given_as_a_parameter(
    tmp_path: Path, pg_state: str
) -> None:
    env = Env(tmp_path)
    env.state = pg_state  # type: ignore[assignment]
    env.routine("daily", cron="0 9 * * *")
    migrated = env.cli("migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert "password=***" in migrated.stdout
    assert "Zq" not in migrated.stdout + migrated.stderr
    history = env.cli("history", "daily")
    assert history.returncode == 0, history.stderr
    assert "(state: postgresql://" in history.stderr
    assert "password=***" in history.stderr
    assert "Zq" not in history.stdout + history.stderr
    proc = env.serve("echo")
    try:
        log = env.log()
        assert "state postgresql://" in log
        assert "sslpassword=***" in log
        assert "Zq" not in log
    finally:
        assert stop(proc) == 0
    assert "Zq" not in env.log()


def test_a_conninfo_string_given_as_a_state_is_shown_masked(tmp_path: Path) -> None:
    env = Env(tmp_path)
    # Not a URL: a directory path to us; shown masked all the same.
    env.state = str(tmp_path / "host=h password=Zq-secret")  # type: ignore[assignment]
    env.routine("daily", cron="0 9 * * *")
    history = env.run_cli("history", "daily")
    assert history.returncode == 0, history.stderr
    assert "password=***" in history.stderr
    assert "Zq" not in history.stdout + history.stderr
