"""An agent server that trio_routines' HTTP agent can fire into: the standard library only.

    python examples/agent_server.py --port 8765 --db turns.sqlite --scheduler http://127.0.0.1:8080
    python -m trio_routines serve --agent http://127.0.0.1:8765/turn --http 127.0.0.1:8080

Each turn is one ``POST`` with a JSON body (``session``, ``prompt``, and ``routine``+``slot``,
``wakeup`` or ``run``). This server streams a made-up reply as server-sent events. It shows the
three things a receiver is responsible for:

* **Exactly once.** A cron fire carries ``Idempotency-Key: <routine>/<slot>``, the same from
  every replica and after every restart. The key is recorded in the same transaction as the
  turn's work and result, so a second request with that key -- from a restored state
  directory, a second deployment, a hand-run ``fire`` -- finds it and is answered 409, which
  the scheduler records as ``skipped``: at most once on the sender's side becomes exactly once
  on ours.
* **One turn per session.** A session already in a turn answers 409 too (busy).
* **The token.** With ``AGENT_TOKEN`` set, a request without ``Authorization: Bearer <it>`` is
  answered 401 (set the same value as ``TRIO_ROUTINES_AGENT_TOKEN`` for the scheduler).

And, with ``--scheduler URL`` (the scheduler's HTTP surface), what a model's tool call does:
the stand-in asks for a follow-up an hour after each turn that is not itself a wake-up's,
with ``POST /tools/call`` and the turn's ticket (the body's ``turn``) as its only credential.
The scheduler records the turn as the follow-up's origin and applies its limits to it.
"""

from __future__ import annotations

import argparse
import hmac
import json
import os
import sqlite3
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY = 1 << 20


class Turns:
    """The durable side: which idempotency keys are done (SQLite, one transaction per turn)."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute("CREATE TABLE IF NOT EXISTS done (key TEXT PRIMARY KEY, reply TEXT)")
        self.lock = threading.Lock()  # one writer at a time; SQLite would serialize anyway
        self.busy: set[str] = set()

    def begin(self, session: str) -> bool:
        with self.lock:
            if session in self.busy:
                return False
            self.busy.add(session)
            return True

    def end(self, session: str) -> None:
        with self.lock:
            self.busy.discard(session)

    def do_once(self, key: str, work: Callable[[], list[str]]) -> list[str] | None:
        """Run ``work`` and record ``key`` with its result in one transaction; ``None``, running
        nothing, when ``key`` is already recorded. A crash mid-way commits neither."""
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                done = self.db.execute("SELECT 1 FROM done WHERE key = ?", (key,)).fetchone()
                if done is not None:
                    self.db.execute("ROLLBACK")
                    return None
                pieces = work()  # a real agent writes its effects in this same transaction
                self.db.execute("INSERT INTO done VALUES (?, ?)", (key, "".join(pieces)))
                self.db.execute("COMMIT")
                return pieces
            except BaseException:
                self.db.execute("ROLLBACK")
                raise


def call_tool(scheduler: str, ticket: str, name: str, arguments: dict[str, Any]) -> str:
    """One wake-up tool call made as the turn whose ticket this is: the text for the model."""
    request = urllib.request.Request(
        f"{scheduler.rstrip('/')}/tools/call",
        data=json.dumps({"name": name, "arguments": arguments}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Ticket {ticket}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return str(json.load(answer)["text"])
    except urllib.error.HTTPError as error:  # a ticket refused: 403 and why
        return f"the scheduler answered {error.code}: {error.read(300).decode(errors='replace')}"
    except (OSError, ValueError, KeyError) as error:
        return f"the scheduler could not be asked: {error}"


def think(body: dict[str, Any], scheduler: str | None = None) -> list[str]:
    """A stand-in for the real agent: the reply, in pieces."""
    if "slot" in body:
        why = f"routine {body.get('routine')} for {body['slot']}"
    elif "wakeup" in body:
        why = f"wake-up {body['wakeup']}"
    else:
        why = "an on-demand run"
    prompt = str(body.get("prompt", ""))[:200]
    pieces = [f"Working on {why}: ", prompt, " — done."]
    if scheduler and isinstance(body.get("turn"), str) and "wakeup" not in body:
        # What a model's call of the tool does: a follow-up of this very session, as this turn.
        asked = {"prompt": f"Follow up on: {prompt}", "in": "1h"}
        pieces.append(" " + call_tool(scheduler, body["turn"], "schedule_wakeup", asked))
    return pieces


class Handler(BaseHTTPRequestHandler):
    server: Server

    def do_POST(self) -> None:
        token = os.environ.get("AGENT_TOKEN")
        given = self.headers.get("Authorization", "")
        if token and not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            return self.answer(401, "missing or wrong bearer token")
        try:
            length = int(self.headers.get("Content-Length", "0"))
            if not 0 < length <= MAX_BODY:
                raise ValueError(f"a body of {length} bytes")
            body = json.loads(self.rfile.read(length))
            session = body["session"]
            if not isinstance(session, str):
                raise ValueError("session is not a string")
        except (ValueError, KeyError, TypeError) as exc:
            return self.answer(400, f"bad request: {exc}")
        if not self.server.turns.begin(session):
            return self.answer(409, f"session {session} already has a turn in flight")
        try:
            key = self.headers.get("Idempotency-Key")
            scheduler = self.server.scheduler
            if key is None:  # a wake-up or an on-demand run: nothing to deduplicate
                pieces: list[str] | None = think(body, scheduler)
            else:
                pieces = self.server.turns.do_once(key, lambda: think(body, scheduler))
            if pieces is None:
                return self.answer(409, f"{key} was already done")
            self.stream(pieces)
        finally:
            self.server.turns.end(session)

    def stream(self, pieces: list[str]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")  # the end of the body is the end of the stream
        self.end_headers()
        for piece in pieces:
            self.wfile.write(f"data: {piece}\n\n".encode())
            self.wfile.flush()
            time.sleep(self.server.pause)
        # A failure would end with: event: failed / data: <reason>, then a blank line.

    def answer(self, status: int, text: str) -> None:
        data = (text + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        sys.stderr.write(f"{self.address_string()} {format % args}\n")  # never the headers


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self, address: tuple[str, int], turns: Turns, pause: float, scheduler: str | None = None
    ) -> None:
        super().__init__(address, Handler)
        self.turns = turns
        self.pause = pause
        self.scheduler = scheduler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument("--db", default=":memory:", help="where done keys are kept")
    parser.add_argument("--pause", type=float, default=0.2, help="seconds between pieces")
    parser.add_argument("--scheduler", help="the scheduler's HTTP surface, for the tool calls")
    args = parser.parse_args()
    server = Server((args.host, args.port), Turns(args.db), args.pause, args.scheduler)
    port = server.server_address[1]
    print(f"listening on http://{args.host}:{port}/turn", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
