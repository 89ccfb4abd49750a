"""A command sent to a running ``serve`` over its HTTP surface (``--url``), not to the state.

Why: a service's state directory belongs to the service's user (with systemd's
``DynamicUser=yes``, a user that exists only while the service runs). An operator who ran
``pause`` as root against it would create files the service can no longer change; over HTTP the
service makes the change itself, as its own user, through the same gates as any client
(``$TRIO_ROUTINES_TOKEN`` as the bearer token). Nothing here reads or writes the state.

The server's answers are untrusted like any input: read up to :data:`MAX_ANSWER` bytes, parsed
with the state's bounded JSON reader, shown through the printing helpers (control characters
escaped), and an answer of the wrong shape is one line, never a traceback.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import urllib.error
import urllib.request
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, urlencode

import attrs
import trio

from ..converter import loads
from ..text import cut, one_line, visible
from .output import CliError
from .values import server_url

URL_ENV = "TRIO_ROUTINES_URL"
#: Seconds ``run --url`` and ``fire --url`` wait for the server's answer, which comes when the
#: turn ends: longer than any sensible turn, and still a bound of ours.
TURN_WAIT = 3600.0
ASK_TIMEOUT = 10.0  # seconds a question (not a turn) to the server may take
MAX_ANSWER = 16 << 20  # bytes of an answer read at most (a history of 512 claims and gaps)


def url_arg(args: argparse.Namespace) -> str | None:
    """``--url``, else ``$TRIO_ROUTINES_URL`` (checked as ``--url`` is), else None."""
    given: str | None = getattr(args, "url", None)
    if given:
        return given
    from_env = os.environ.get(URL_ENV) or None
    if from_env is not None:
        try:
            server_url(from_env)
        except argparse.ArgumentTypeError as exc:
            raise CliError(f"{URL_ENV}: {exc}", code=2) from None
    return from_env


def path_part(text: str) -> str:
    """A name in a URL path: every character but letters and digits percent-encoded."""
    return quote(text, safe="")


def query(**params: str) -> str:
    return "?" + urlencode(params)


@attrs.frozen
class Answer:
    status: int
    body: Any  # the parsed JSON, or None

    def error(self) -> str:
        """The server's one-line reason (its ``error`` field), else the status's phrase."""
        if isinstance(self.body, dict) and isinstance(self.body.get("error"), str):
            return str(self.body["error"])
        try:
            return HTTPStatus(self.status).phrase
        except ValueError:
            return "an unknown status"


def _unconfirmed(method: str) -> str:
    """What an unanswered change may still do: a server that was slow (stopped, swapping)
    may carry it out once it runs again, so look before asking again (a second add would be
    a second wake-up)."""
    if method == "GET":  # (the others it sends, POST and DELETE, change something)
        return ""
    return "; the change is not confirmed: it may still be made there — look before asking again"


class Server:
    """One running ``serve``: its base URL and the token to send."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.token = token if token is not None else (os.environ.get("TRIO_ROUTINES_TOKEN") or None)
        if self.token:
            from ..http.origin import token_problem  # the server's own rule

            problem = token_problem(self.token, "TRIO_ROUTINES_TOKEN")
            if problem is not None:
                raise CliError(problem, code=2)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Server | None:
        """The server of ``--url``/``$TRIO_ROUTINES_URL``; None to work on the state itself.

        ``--state``, ``--agent`` and ``--routines`` mean nothing to a command the server
        carries out (its own are used), so giving them with a URL is a usage error, not
        ignored."""
        url = url_arg(args)
        if url is None:
            return None
        given = {
            "state": bool(getattr(args, "state", None)),
            "agent": bool(getattr(args, "agent", None)),
            "routines": getattr(args, "routines_given", False),  # it has a default
        }
        for option, was_given in given.items():
            if was_given:
                raise CliError(
                    f"--{option} is for working on the state itself; with --url (or "
                    f"{URL_ENV}) the server uses its own {option} — drop one of them",
                    code=2,
                )
        return cls(url)

    async def call(
        self, method: str, path: str, body: Any = None, *, waits: bool = False
    ) -> Answer:
        """Send one request; ``waits``: it runs a turn, so the bound is :data:`TURN_WAIT`
        (and the user's Ctrl-C) instead of :data:`ASK_TIMEOUT`.

        A server that cannot be reached, or that answers something not JSON, is a CliError."""
        bound = TURN_WAIT if waits else ASK_TIMEOUT
        try:
            with trio.fail_after(bound):
                return await trio.to_thread.run_sync(
                    self._send, method, path, body, bound, abandon_on_cancel=True
                )
        except trio.TooSlowError:
            after = " (a turn may still be running there: see its history)" if waits else ""
            raise CliError(
                f"{self.url}: no answer within {bound:g}s{after}{_unconfirmed(method)}"
            ) from None
        except urllib.error.URLError as exc:
            raise CliError(f"{self.url}: no answer: {exc.reason}") from None
        except OSError as exc:  # refused, reset, timed out
            why = exc.strerror or exc
            raise CliError(f"{self.url}: no answer: {why}{_unconfirmed(method)}") from None
        except http.client.HTTPException as exc:  # not HTTP (a hang-up is an OSError)
            if isinstance(exc, http.client.IncompleteRead):
                problem = "its body ended before the length it gave"
            else:  # the line it could not read, as it came (cut: it is a stranger's)
                problem = cut(visible(one_line(str(exc)))) or type(exc).__name__
            raise CliError(
                f"{self.url}: the answer is not a trio_routines server's (not HTTP: "
                f"{problem}){_unconfirmed(method)}"
            ) from None
        except ValueError as exc:
            raise CliError(
                f"{self.url}: the answer is not a trio_routines server's ({exc})"
            ) from None

    async def get(self, path: str) -> Any:
        """GET ``path``'s JSON, which must come with 200 (else the server's reason)."""
        return self.ok(await self.call("GET", path), 200)

    def ok(self, answer: Answer, *statuses: int) -> Any:
        """The body of an answer of one of ``statuses``; a refusal's words otherwise, and for
        another success (a 200 where an addition answers 201), not ours: no server of ours
        says that, so what answered is another server."""
        if answer.status in statuses:
            return answer.body
        if 200 <= answer.status < 300:
            wanted = " or ".join(map(str, statuses))
            raise self.not_ours(f"it said {answer.status} where this request is answered {wanted}")
        raise self.refused(answer)

    def not_ours(self, problem: object = None) -> CliError:
        """An answer of the wrong shape: not what a trio_routines server says."""
        why = f" ({problem})" if problem is not None else ""
        return CliError(f"{self.url}: the answer is not a trio_routines server's{why}")

    def refused(self, answer: Answer) -> CliError:
        hint = ""
        if answer.status == 401:
            hint = " — set TRIO_ROUTINES_TOKEN to the server's token"
        elif 300 <= answer.status < 400:
            hint = " — a redirect, not followed: give --url the server's own address"
        return CliError(f"{self.url} answered {answer.status}: {answer.error()}{hint}")

    def _send(self, method: str, path: str, body: Any, timeout: float | None) -> Answer:
        data = None if body is None else json.dumps(body).encode("utf-8")
        request = urllib.request.Request(self.url + path, data=data, method=method)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        # No proxies from the environment and no redirects: the request, and its token, go to
        # the URL given and nowhere else (a redirect comes back as the answer, a refusal).
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirects())
        try:
            with opener.open(request, timeout=timeout) as answer:
                raw = answer.read(MAX_ANSWER + 1)
                if len(raw) <= MAX_ANSWER and answer.length:  # its length said more would come
                    raise http.client.IncompleteRead(raw, answer.length)
                return Answer(answer.status, _parse(raw))
        except urllib.error.HTTPError as refusal:
            with refusal:
                try:
                    parsed = _parse(refusal.read(MAX_ANSWER + 1))
                except ValueError:
                    parsed = None  # a proxy's or a gateway's page: the status says enough
            return Answer(refusal.code, parsed)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Follows no redirect: a 3xx is raised as an HTTPError, as any refusal is."""

    def redirect_request(self, *_: object) -> None:
        return None


def _parse(raw: bytes) -> Any:
    if len(raw) > MAX_ANSWER:
        raise ValueError(f"an answer over {MAX_ANSWER >> 20} MiB")
    if not raw:
        return None
    try:
        return loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not UTF-8") from None
