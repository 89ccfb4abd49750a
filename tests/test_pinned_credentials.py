"""A state as messages and logs show it (stores/credentials.py), pinned: URLs shown whole, each
part of the user-info and the query masked or kept, and messages with every form of a secret
masked, longest first, and every quoted piece the shown state does not show.

The cases carry ids of their own: a URL's scheme in a test's id would leave it out of the
fast selection, which deselects the database's tests by name.
"""

from __future__ import annotations

import pytest

from trio_routines.stores.credentials import shown_message, shown_state

URLS = {
    "user-info": ("postgresql://u:Zq@h/db", "postgresql://u:***@h/db"),
    "no user-info": ("postgresql://u@h/db", "postgresql://u@h/db"),
    "scheme in capitals": ("POSTGRES://u:Zq@h/db", "POSTGRES://u:***@h/db"),
    "an @ in the password": ("postgresql://u:Zq@ss@h/db", "postgresql://u:***@h/db"),
    "a colon in the password": ("postgresql://u:Zq:x@h/db", "postgresql://u:***@h/db"),
    "an @ in the query": (
        "postgresql://u:Zq@h/db?application_name=a@b/c",
        "postgresql://u:***@h/db?application_name=a@b/c",
    ),
    "an empty query": ("postgresql://u:Zq@h/db?", "postgresql://u:***@h/db?"),
    "empty query pieces": (
        "postgresql://h/db?application_name=x&&sslmode=disable",
        "postgresql://h/db?application_name=x&&sslmode=disable",
    ),
    "query password": (
        "postgresql://h/db?sslmode=disable&password=Zq",
        "postgresql://h/db?sslmode=disable&password=***",
    ),
    "an = in the query password": (
        "postgresql://h/db?password=Zq=x&sslmode=disable",
        "postgresql://h/db?password=***&sslmode=disable",
    ),
    "a ? in the query": (
        "postgresql://h/db?application_name=a?b&password=Zq",
        "postgresql://h/db?application_name=a?b&password=***",
    ),
    "an & in the query password": (
        "postgresql://h/db?password=Zq&ss",
        "postgresql://h/db?password=***&***",
    ),
    "a query read as a user name": (
        "postgresql://h?password=Zq@b",
        "postgresql://h?password=***@b",
    ),
    "a query without credentials": (
        "postgresql://h:5432/db?application_name=x&sslmode=disable",
        "postgresql://h:5432/db?application_name=x&sslmode=disable",
    ),
}


@pytest.mark.parametrize(("state", "shown"), list(URLS.values()), ids=list(URLS))
def test_a_url_is_shown_whole_with_its_credentials_masked(state: str, shown: str) -> None:
    assert shown_state(state) == shown


def test_a_value_followed_by_more_pairs_is_masked_alone() -> None:
    assert shown_state("host=h password=Zq dbname=db") == "host=h password=*** dbname=db"


MESSAGES = {
    # libpq's parse error quotes part of a password: a quoted piece the state does not show.
    "a quoted piece of a password": (
        "host=h password=Zqab",
        'syntax error near "Zqa"',
        'syntax error near "***"',
    ),
    "a quoted piece the shown state shows": (
        "postgresql://h/db?bogus=1",
        'invalid URI query parameter: "bogus"',
        'invalid URI query parameter: "bogus"',
    ),
    # The shortest secret replaced wherever it is: four characters.
    "a secret of four characters": (
        "postgresql://u:XXXX@h/db",
        "could not connect as u with XXXX",
        "could not connect as u with ***",
    ),
    "each part of a password an & split": (
        "postgresql://h/db?password=Zqab&cdef",
        "bad password Zqab&cdef",
        "bad password ***&***",
    ),
    "a password as libpq reads it, its escape undone": (
        "host=h password=ab\\cdef",
        "bad password abcdef",
        "bad password ***",
    ),
    # The quoted form holds the bare one: the longer is replaced first, quotes and all.
    "the longest form first": (
        "host=h password='abcdefgh'",
        "bad password 'abcdefgh' given",
        "bad password *** given",
    ),
}


@pytest.mark.parametrize(("state", "message", "shown"), list(MESSAGES.values()), ids=list(MESSAGES))
def test_a_message_shows_nothing_of_a_credential(state: str, message: str, shown: str) -> None:
    assert shown_message(message, state) == shown
