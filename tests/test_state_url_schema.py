"""A PostgreSQL state URL may choose its schema, ``?schema=NAME``: libpq knows no such
parameter and refused the URL (``invalid URI query parameter``), so the command line and a
service's environment, which give a store by its URL alone, could choose one only through
``options=-csearch_path%3D…``, in a schema made by hand."""

from __future__ import annotations

import psycopg
import pytest
from pg import admin, fresh_schema, require_server
from procs import Env, in_process, one_line

from trio_routines import open_store
from trio_routines.stores import state_problem
from trio_routines.stores.stateurl import split_schema


def test_the_schema_is_taken_out_and_every_other_parameter_passed_on_as_written() -> None:
    assert split_schema("postgresql://h/db") == ("postgresql://h/db", None)
    assert split_schema("postgresql://h/db?sslmode=off") == ("postgresql://h/db?sslmode=off", None)
    assert split_schema("postgresql://h/db?schema=mine") == ("postgresql://h/db", "mine")
    assert split_schema("postgresql://h/db?a=1+2&schema=m%C3%AFne&options=-c%20x%3Dy&b") == (
        "postgresql://h/db?a=1+2&options=-c%20x%3Dy&b",  # as written: "+" is no space to libpq
        "m\u00efne",
    )
    assert split_schema("postgresql://h/db?sch%65ma=a+b") == ("postgresql://h/db", "a+b")
    assert split_schema("postgresql://h/db?schemas=x") == ("postgresql://h/db?schemas=x", None)
    assert split_schema("postgresql://h/db?schema=%20a%7E")[1] == " a~"  # printable: a name
    # The query begins at the first "?": one after it is a value's.
    assert split_schema("postgresql://h/db?schema=x&application_name=a?b") == (
        "postgresql://h/db?application_name=a?b",
        "x",
    )
    assert split_schema("postgresql://h/db?" + "x=1&schema=" + "s" * 63)[1] == "s" * 63


CONTROL = "the state URL's schema= holds a control character (%00, say)"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("?schema=", "the state URL's schema= names no schema: name one, or leave it out"),
        ("?schema=%20", "the state URL's schema= names no schema: name one, or leave it out"),
        ("?schema", "the state URL's schema= names no schema: name one, or leave it out"),
        ("?schema=a&schema=b", "the state URL gives schema= more than once: give it once"),
        (
            "?schema=%ff",
            "the state URL's schema= is not UTF-8 once its percent-escapes are decoded",
        ),
        ("?schema=prod%00a", CONTROL),
        ("?schema=a%0Ab", CONTROL),
        ("?schema=a%7F", CONTROL),
        (
            "?schema=" + "s" * 64,
            "the state URL's schema= is longer than PostgreSQL's 63 bytes a name",
        ),
        (
            "?schema=" + "\u00e9" * 32,
            "the state URL's schema= is longer than PostgreSQL's 63 bytes a name",
        ),
    ],
    ids=["empty", "blank", "bare", "twice", "not-utf8", "nul", "lf", "del", "long", "utf8-long"],
)
def test_a_schema_parameter_that_names_no_schema_is_a_problem(url: str, problem: str) -> None:
    with pytest.raises(ValueError, match=r"^the state URL") as raised:
        split_schema("postgresql://h/db" + url)
    assert str(raised.value) == problem
    assert state_problem("postgres://h/db" + url) == problem
    with pytest.raises(ValueError, match=r"^the state URL") as raised:
        open_store("postgresql://h/db" + url)
    assert str(raised.value) == problem


def test_the_store_opened_keeps_its_tables_in_the_schema_named() -> None:
    from trio_routines.stores.postgres import PostgresStore

    store = open_store("postgresql://h/db?application_name=x&schema=mine", migrate="never")
    assert isinstance(store, PostgresStore)
    assert (store.url, store.schema) == ("postgresql://h/db?application_name=x", "mine")


def test_the_command_line_makes_and_uses_the_schema_its_url_names(env: Env) -> None:
    url = require_server()
    env.routine("daily", cron="0 9 * * *")
    with fresh_schema() as schema:
        env.state = f"{url}?schema={schema}"  # type: ignore[assignment]
        paused = in_process(env.argv("pause", "daily")[3:], cwd=env.root, environ=env.environ())
        assert paused.returncode == 0, paused.stderr
        with admin() as conn:
            rows = conn.execute(
                psycopg.sql.SQL("SELECT routine FROM {}.trio_routines_paused").format(
                    psycopg.sql.Identifier(schema)
                )
            ).fetchall()
        assert rows == [("daily",)]
        listed = in_process(env.argv("list")[3:], cwd=env.root, environ=env.environ())
        assert listed.returncode == 0, listed.stderr
        assert "paused" in listed.stdout


def test_the_command_line_refuses_a_schema_parameter_naming_none_as_usage(env: Env) -> None:
    env.state = "postgresql://admin:hunter22@db.example/prod?schema="  # type: ignore[assignment]
    result = in_process(env.argv("list")[3:], cwd=env.root, environ=env.environ())
    assert (result.returncode, result.stdout) == (2, "")
    assert one_line(result.stderr) == (
        "error: --state: the state URL's schema= names no schema: name one, or leave it out\n"
    )
