"""Turn tickets (``trio_routines.tickets``): a turn's word, signed, for an agent in another
process to call the wake-up tools as that turn. Made and read back, damaged, expired, signed
with another key, and shared between real processes."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_routines import tickets
from trio_routines.context import FireContext
from trio_routines.records import Origin, OriginKind
from trio_routines.tickets import TICKET_LIFETIME, BadTicket, make_ticket, read_ticket, share_key

SLOT = datetime(2026, 7, 7, 9, 0, tzinfo=UTC)
T0 = 1_780_000_000.0
TURNS = [
    FireContext("routine", "routine:daily", routine="daily", slot=SLOT),
    FireContext("run", "team", routine="standup"),
    FireContext(
        "wakeup",
        "chat:42",
        wakeup="w-1",
        origin=Origin(kind=OriginKind.WAKEUP, parent="w-0", depth=5),
    ),
    FireContext(
        "wakeup",
        "chat:42",
        wakeup="w-2",
        origin=Origin(kind=OriginKind.ROUTINE, routine="daily", slot=SLOT, depth=1),
    ),
    FireContext("wakeup", "chat:42", wakeup="w-3"),  # an origin unknown
    FireContext("routine", "café ☕ \u2028", routine="naïve/name", slot=SLOT),
]


@pytest.fixture(autouse=True)
def own_key() -> Iterator[None]:
    """Every test starts from a key of its own and leaves the process's key as it was."""
    kept = tickets._key
    share_key(b"a test's own secret")
    yield
    tickets._key = kept


def signed(payload: bytes) -> str:
    """A ticket of ``payload`` signed with this process's key, as only we could make one."""
    signature = hmac.new(tickets._key, payload, hashlib.sha256).digest()
    return f"{tickets._b64(payload)}.{tickets._b64(signature)}"


@pytest.mark.parametrize("turn", TURNS)
def test_a_ticket_reads_back_as_its_turn(turn: FireContext) -> None:
    ticket = make_ticket(attrs.evolve(turn, replica="web-1:42"), now=T0)
    assert ticket.isascii()
    assert read_ticket(ticket, now=T0) == turn  # the replica is not carried: it is not asked


def test_a_tickets_text_is_fixed_so_that_two_releases_given_one_token_agree() -> None:
    # Replicas of two releases behind one address read each other's tickets: the key's
    # derivation, the payload's JSON (compact, UTF-8) and the unpadded encoding are all pinned.
    share_key("one token for every version")
    turn = FireContext(
        "wakeup",
        "café:42",
        wakeup="w-1",
        origin=Origin(kind=OriginKind.ROUTINE, routine="daily", slot=SLOT, depth=1),
    )
    ticket = make_ticket(turn, now=T0)
    assert ticket == (
        "eyJ2IjoxLCJraW5kIjoid2FrZXVwIiwic2Vzc2lvbiI6ImNhZsOpOjQyIiwid2FrZXVwIjoidy0xIiwib3Jp"
        "Z2luIjp7ImtpbmQiOiJyb3V0aW5lIiwiZGVwdGgiOjEsInJvdXRpbmUiOiJkYWlseSIsInNsb3QiOiIyMDI2"
        "LTA3LTA3VDA5OjAwOjAwLjAwMFoifSwiZW5kcyI6IjIwMjYtMDUtMjhUMjE6MjY6NDAuMDAwWiJ9"
        ".BjJW_WdWe6c9RIUKLroLPB3g-4UffhSKMtCixOJRQ44"
    )
    payload = tickets._unb64(ticket.partition(".")[0])
    assert payload.decode() == (
        '{"v":1,"kind":"wakeup","session":"café:42","wakeup":"w-1","origin":{"kind":"routine",'
        '"depth":1,"routine":"daily","slot":"2026-07-07T09:00:00.000Z"},'
        '"ends":"2026-05-28T21:26:40.000Z"}'
    )
    assert "=" not in ticket
    assert read_ticket(ticket, now=T0) == turn


def test_a_ticket_of_the_longest_names_fits_a_header_and_reads_back() -> None:
    # Names of astral characters: UTF-8 in the ticket, not twelve bytes of escapes each.
    name = "\U0001f600" * 512
    turn = FireContext("routine", f"routine:{name}", routine=name, slot=SLOT)
    ticket = make_ticket(turn, now=T0)
    assert len(ticket) < tickets.MAX_TICKET
    assert read_ticket(ticket, now=T0) == turn


@pytest.mark.parametrize("field", ["session", "routine", "wakeup"])
def test_a_signed_ticket_naming_text_no_store_can_hold_is_damaged(field: str) -> None:
    # No turn of ours has such a name (a routine's is refused, a session's cannot be stored):
    # read as a turn, its wake-up's origin failed to be made, and the tool call answered 500.
    fields = {"v": 1, "kind": "routine", "session": "routine:daily", "routine": "daily"}
    fields |= {"slot": "2026-07-07T09:00:00.000Z", "ends": "2026-05-28T21:26:40.000Z"}
    fields[field] = "a\udcffb"
    payload = json.dumps(fields, ensure_ascii=False).encode("utf-8", "surrogatepass")
    with pytest.raises(BadTicket) as caught:
        read_ticket(signed(payload), now=T0)
    assert str(caught.value) == tickets.DAMAGED


def test_a_ticket_holds_for_its_lifetime_and_not_a_moment_more() -> None:
    ticket = make_ticket(TURNS[0], now=T0)
    end = T0 + TICKET_LIFETIME.total_seconds()
    assert read_ticket(ticket, now=end - 0.001) == TURNS[0]
    with pytest.raises(BadTicket) as caught:
        read_ticket(ticket, now=end)
    assert str(caught.value) == (
        "the turn ticket ended at 2026-05-28T21:26:40.000Z (a ticket holds for 60 minutes "
        "after its turn began)"
    )


def test_a_ticket_signed_with_another_key_is_refused_and_says_how_to_share_one() -> None:
    ticket = make_ticket(TURNS[0], now=T0)
    share_key("another replica's token")
    with pytest.raises(BadTicket) as caught:
        read_ticket(ticket, now=T0)
    assert str(caught.value) == (
        "the turn ticket is damaged or not one of this scheduler's: its signature is not this "
        "process's (it was changed, or made by a process given another TRIO_ROUTINES_TOKEN, "
        "or none: replicas share one)"
    )
    share_key(b"a test's own secret")  # the same secret makes the same key again
    assert read_ticket(ticket, now=T0) == TURNS[0]


def test_replicas_given_one_secret_honour_each_others_tickets() -> None:
    # Another interpreter, its own random key replaced by the shared one.
    made = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from datetime import UTC, datetime; "
            "from trio_routines.context import FireContext; "
            "from trio_routines.tickets import make_ticket, share_key; "
            "share_key(sys.argv[1]); "
            "print(make_ticket(FireContext('run', 'team', routine='standup')))",
            "one token for all replicas",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    ticket = made.stdout.strip()
    with pytest.raises(BadTicket):
        read_ticket(ticket)
    share_key("one token for all replicas")
    assert read_ticket(ticket) == TURNS[1]


def test_every_change_to_a_ticket_is_refused() -> None:
    ticket = make_ticket(TURNS[2], now=T0)
    payload, _, signature = ticket.partition(".")
    decoded = json.loads(tickets._unb64(payload))
    decoded["origin"]["depth"] = 0  # a shallower chain, unsigned
    forged = tickets._b64(json.dumps(decoded).encode()) + "." + signature
    padded = f"{payload}{'=' * (-len(payload) % 4) or '===='}.{signature}"
    for changed in (forged, ticket[:-2], ticket + "A", f"{payload}.", f".{signature}", padded):
        with pytest.raises(BadTicket) as caught:
            read_ticket(changed, now=T0)
        assert str(caught.value).startswith("the turn ticket is damaged or not one of")


@pytest.mark.parametrize(
    ("ticket", "said"),
    [
        (None, "the turn ticket must be the text the turn was given"),
        (42, "the turn ticket must be the text the turn was given"),
        (b"abc.def", "the turn ticket must be the text the turn was given"),
        ("", "the turn ticket must be the text the turn was given"),
        (
            "x" * 12_289,
            "the turn ticket is longer than 12288 characters, more than a header carries (a turn "
            "whose session and routine names take more than a few KiB has no ticket that can be "
            "sent back)",
        ),
        ("x" * 12_287 + ".", "the turn ticket is damaged or not one of this scheduler's"),
        ("no-dot-at-all", "the turn ticket is damaged or not one of this scheduler's"),
        ("é.é", "the turn ticket is damaged or not one of this scheduler's"),
        ("a!b.c", "the turn ticket is damaged or not one of this scheduler's"),
        ("abcde.abc", "the turn ticket is damaged or not one of this scheduler's"),
    ],
)
def test_what_is_no_ticket_is_refused_in_one_line(ticket: object, said: str) -> None:
    with pytest.raises(BadTicket) as caught:
        read_ticket(ticket, now=T0)
    assert str(caught.value) == said


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[1, 2]",
        b'{"v": 2, "kind": "run", "session": "s", "routine": "r", "ends": "2099-01-01T00:00:00Z"}',
        b'{"v": 1, "kind": "run", "session": "s", "routine": "r"}',
        b'{"v": 1, "kind": "run", "session": "s", "routine": "r", "ends": "tomorrow"}',
        b'{"v": 1, "kind": "nap", "session": "s", "ends": "2099-01-01T00:00:00Z"}',
        b'{"v": 1, "kind": "routine", "session": "s", "routine": "r",'
        b' "ends": "2099-01-01T00:00:00Z"}',
        b'{"v": 1, "kind": "run", "session": 7, "routine": "r", "ends": "2099-01-01T00:00:00Z"}',
        b'{"v": 1, "kind": "run", "session": "", "routine": "r", "ends": "2099-01-01T00:00:00Z"}',
        b'{"v": 1, "kind": "routine", "session": "s", "routine": "r", "slot": 5,'
        b' "ends": "2099-01-01T00:00:00Z"}',
        b'{"v": 1, "kind": "wakeup", "session": "s", "wakeup": "w", "origin": {"kind": "bot"},'
        b' "ends": "2099-01-01T00:00:00Z"}',
    ],
)
def test_a_signed_payload_that_is_no_turn_is_refused(payload: bytes) -> None:
    # Only a process holding the key could sign these (another version, say): still refused.
    with pytest.raises(BadTicket) as caught:
        read_ticket(signed(payload), now=T0)
    assert str(caught.value) == "the turn ticket is damaged or not one of this scheduler's"


@given(st.text(max_size=300) | st.binary(max_size=300).map(lambda b: b.decode("latin-1")))
def test_any_text_is_a_ticket_or_a_bad_ticket_and_nothing_else(text: str) -> None:
    with pytest.raises(BadTicket):
        read_ticket(text)


@pytest.mark.parametrize("secret", ["", b"", None, 5])
def test_a_secret_must_be_text_or_bytes_not_empty(secret: object) -> None:
    with pytest.raises(ValueError, match=r"^a ticket secret must be non-empty text or bytes$"):
        share_key(secret)  # type: ignore[arg-type]


def test_any_text_is_a_secret_even_one_read_from_undecodable_bytes() -> None:
    share_key("token \udcff")  # a lone surrogate: an environment of undecodable bytes
    ticket = make_ticket(TURNS[1], now=T0)
    share_key(b"token \xff")  # the same bytes, given as bytes
    assert read_ticket(ticket, now=T0) == TURNS[1]
    share_key("token \ud800")  # no byte of any environment: taken as it is
    ticket = make_ticket(TURNS[1], now=T0)
    share_key(b"token \xed\xa0\x80")
    assert read_ticket(ticket, now=T0) == TURNS[1]
