"""The ASGI application: the gates every request passes, in the package doc's order, then
the route's handler in :mod:`.api`."""

from __future__ import annotations

import hmac
import logging
from contextlib import AbstractContextManager

import trio

from .. import tracing
from ..context import FireContext
from ..scheduler import Scheduler
from ..tickets import DAMAGED, BadTicket, read_ticket
from . import api, page, signin, wakeupapi
from .expected import ExpectedSlots
from .origin import check_origin, check_token
from .paging import page_params
from .wire import (
    ECHO,
    MAX_ID,
    ROUTES,
    ASGIApp,
    Disconnected,
    Message,
    Receive,
    Refusal,
    Response,
    Scope,
    Send,
    Text,
    check_path_text,
    encode,
    headers,
    label,
    local_path,
    mount_point,
    read_json,
    required_session,
    route,
    session_param,
    style_param,
    unavailable,
)

log = logging.getLogger("trio_routines.http")

BODY_TIMEOUT = 10.0  # seconds from a request's headers to the end of its body, every route


class _Body:
    """One request's ``receive``, bounded: its body must have arrived ``timeout`` seconds
    after the request began (408, and the connection closed), and only ``readers.limit``
    requests may be waiting for a body at once (503 for the next, before it is read).

    Every route reads its body through this, so none can be held open by a body that
    trickles in. Once the body is complete, ``receive`` is the server's own again, with no
    deadline and no place held (no handler reads it after its body so far: a request waiting
    for its fire does not listen for the client going away).
    """

    def __init__(self, receive: Receive, timeout: float, readers: _Readers) -> None:
        self._receive = receive
        self._timeout = timeout
        self._deadline = trio.current_time() + timeout
        self._readers = readers
        self._reading = False
        self._done = False

    async def __call__(self) -> Message:
        if self._done:
            return await self._receive()
        if not self._reading:
            self._readers.take()
            self._reading = True
        with trio.move_on_at(self._deadline):
            message = await self._receive()
            kind = message.get("type")
            if kind == "http.disconnect" or not message.get("more_body", False):
                self.close()
            return message
        self.close()
        raise Refusal(
            408,
            f"the body did not arrive within {self._timeout:g}s of the request",
            [("connection", "close")],
        )

    def close(self) -> None:
        self._done = True
        if self._reading:
            self._reading = False
            self._readers.give_back()


class _Readers:
    """How many requests are waiting for their body; ``None`` for no limit."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.now = 0

    def take(self) -> None:
        if self.limit is not None and self.now >= self.limit:
            raise Refusal(
                503,
                f"{self.now} requests are sending their body already; try again later",
                [("retry-after", "1"), ("connection", "close")],
            )
        self.now += 1

    def give_back(self) -> None:
        self.now -= 1


class _App:
    def __init__(
        self,
        scheduler: Scheduler,
        token: str | None,
        body_timeout: float = BODY_TIMEOUT,
        body_readers: int | None = None,
    ) -> None:
        check_token(token)
        self.scheduler = scheduler
        self._token = token.encode("ascii") if token else None
        self._body_timeout = body_timeout
        self._readers = _Readers(body_readers)
        self._expected = ExpectedSlots()  # the status page's timelines, between renders

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope.get("type")
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await _lifespan(receive, send)
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1008})  # refused: HTTP 403

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method", "")
        bounded = _Body(receive, self._body_timeout, self._readers)
        try:
            response = await self._dispatch(scope, method, bounded)
        except Refusal as refusal:
            response = refusal.response
        except Disconnected:
            return
        except Exception:
            log.exception("%s %s: unexpected error", method, local_path(scope)[:ECHO])
            response = Response(500, {"error": "internal error (logged by the server)"})
        finally:
            bounded.close()
        start, body = encode(response, method)
        await send(start)
        await send(body)

    async def _dispatch(self, scope: Scope, method: str, receive: Receive) -> Response:
        path = local_path(scope)
        if self._token is None:
            check_origin(scope, method)
        if page.is_page(path):
            authorized = self._token is None or self._cookie(scope, method) or self._bearer(scope)
            return await page.handle(
                self.scheduler,
                self._token,
                authorized,
                scope,
                method,
                path,
                receive,
                self._expected,
            )
        probe = path in ("/healthz", "/readyz")
        turn: FireContext | None = None
        if path == "/tools/call":  # its credential is a turn's ticket, read before the body
            turn = self._turn(scope)
        elif path == "/tools" and self._ticketed(scope):
            self._turn(scope)  # the definitions, for a turn's holder: no token needed
        elif self._token is not None and not probe and not self._cookie(scope, method):
            self._authorize(scope)
        check_path_text(scope)
        key, param = route(path)
        allowed = ROUTES[key]
        if method not in allowed:
            raise Refusal(405, f"use {' or '.join(allowed)} here", [("allow", ", ".join(allowed))])
        scheduler = self.scheduler
        if key == "/healthz":
            return api.healthz(scheduler)
        if key == "/readyz":
            return await api.readyz(scheduler)
        if key == "/metrics":
            return Response(200, Text(scheduler.render_metrics()))
        if key in ("/fire", "/run") and scheduler.stopping:
            raise unavailable("the scheduler is stopping; no new turns are accepted")
        if key == "/fire":
            with _caller(scope):
                return await api.fire(scheduler, await read_json(scope, receive))
        if key == "/run":
            with _caller(scope):
                return await api.run(scheduler, await read_json(scope, receive))
        if key == "/routines":
            return await api.routines(scheduler)
        if key == "/replicas":
            return await api.replicas(scheduler)
        if key == "/tools":
            return api.tools(scheduler, style_param(scope))
        if key == "/tools/call":
            assert turn is not None
            with _caller(scope):
                return await wakeupapi.tool_call(scheduler, turn, await read_json(scope, receive))
        if key == "history":
            assert param is not None
            return await api.history(scheduler, param)
        if key in ("pause", "resume"):
            assert param is not None
            return await api.pause(scheduler, param, paused=key == "pause")
        if key == "wakeup":
            assert param is not None
            wakeup_id = label(param, "id", MAX_ID)
            return await wakeupapi.unwake(scheduler, wakeup_id, required_session(scope))
        if method == "POST":
            with _caller(scope):
                body = await read_json(scope, receive)
                return await wakeupapi.wake(scheduler, body, mount_point(scope))
        return await wakeupapi.wakeups(
            scheduler, session_param(scope), page_params(scope), mount_point(scope)
        )

    def _cookie(self, scope: Scope, method: str) -> bool:
        """A read carrying the status page's cookie needs no bearer header; nothing else."""
        assert self._token is not None
        now = self.scheduler.now().timestamp()
        return method in ("GET", "HEAD") and signin.has_cookie(scope, self._token, now)

    def _bearer(self, scope: Scope) -> bool:
        assert self._token is not None
        given = _authorization(scope)
        if given is None:  # repeated: no single credential to take
            return False
        scheme, credentials = given
        # compare_digest is constant-time in the token; the scheme is not a secret.
        good = hmac.compare_digest(credentials, self._token)
        return good and scheme == b"bearer"

    def _ticketed(self, scope: Scope) -> bool:
        """Whether the request's credential is a ticket (``Authorization: Ticket …``)."""
        given = _authorization(scope)
        return given is not None and given[0] == b"ticket"

    def _turn(self, scope: Scope) -> FireContext:
        """The turn whose ticket ``Authorization: Ticket <ticket>`` carries (a tool call's
        credential); 403 for one that is not a valid ticket of ours. Without a ticket, the
        operator learns that a call needs one, and anyone else, with a token set, the 401
        every other path answers."""
        given = _authorization(scope)
        if given is None:
            self._authorize(scope)  # anyone but the operator hears the 401 of every path
            raise Refusal(400, "the authorization header is repeated")
        scheme, credentials = given
        if scheme != b"ticket":
            self._authorize(scope)
            raise Refusal(
                403,
                "a tool call is made as a turn: send Authorization: Ticket <the ticket the "
                "turn was given>",
            )
        try:
            return read_ticket(credentials.decode("ascii"))
        except UnicodeDecodeError:
            raise Refusal(403, DAMAGED) from None
        except BadTicket as exc:
            raise Refusal(403, str(exc)) from None

    def _authorize(self, scope: Scope) -> None:
        if self._token is None:
            return
        if not self._bearer(scope):
            raise Refusal(
                401,
                "missing or wrong token: send Authorization: Bearer <TRIO_ROUTINES_TOKEN>",
                [("www-authenticate", "Bearer")],
            )


def _authorization(scope: Scope) -> tuple[bytes, bytes] | None:
    """The ``Authorization`` header's scheme (lower case) and credentials, each empty when
    there is none; None when the header is repeated."""
    given = headers(scope, b"authorization")
    if len(given) > 1:
        return None
    scheme, _, credentials = (given[0] if given else b"").partition(b" ")
    return scheme.lower(), credentials.strip()


def _caller(scope: Scope) -> AbstractContextManager[None]:
    """The caller's W3C trace context, current for the handler when valid (tracing.py)."""
    return tracing.caller(headers(scope, b"traceparent"), headers(scope, b"tracestate"))


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message.get("type") == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message.get("type") == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def make_app(
    scheduler: Scheduler,
    *,
    token: str | None = None,
    body_timeout: float = BODY_TIMEOUT,
    body_readers: int | None = None,
) -> ASGIApp:
    """The ASGI application of the HTTP surface over ``scheduler`` (see the package doc).

    ``token`` (e.g. ``$TRIO_ROUTINES_TOKEN``; empty means none) is then required as
    ``Authorization: Bearer <token>`` on every endpoint but the probes ``/healthz`` and
    ``/readyz``; without a token only loopback ``Host`` names are served. Mount it anywhere:
    routes are matched below the ASGI ``root_path``. ``POST /fire`` without ``wait`` needs the
    scheduler running (``await nursery.start(scheduler.run)``); before that, and once it
    stops, fires are answered 503. A request body must arrive within ``body_timeout``
    seconds of the request (408 otherwise), and at most ``body_readers`` requests (no limit
    when ``None``) may be waiting for theirs at once (503 for the next). A token with a space,
    a control character or a character outside ASCII raises :class:`BadToken`.
    """
    return _App(scheduler, token, body_timeout, body_readers)
