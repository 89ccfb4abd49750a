"""The HTTP surface: a plain ASGI application over a running :class:`Scheduler`.

Why no framework: the surface is a fixed table of eight routes with JSON in and out. A router,
a request object and a JSON codec fit in this one module, while any framework would bring its
own body handling (which we need to control byte by byte for the 64 KiB limit) and, for the
ones that run under Trio at all, an AnyIO layer between hypercorn's Trio worker and our
nursery. A host that already runs a Trio ASGI server mounts :func:`make_app`'s application;
:func:`serve_http` runs it on hypercorn's Trio worker next to the scheduler.

Theory of operation
-------------------

Every request goes through the same gates, in this order, and each gate may answer and end the
request. Nothing before the last step reads or writes the state store, so a refused request
changes nothing:

1. authorization (``Authorization: Bearer <token>``, constant-time compare) when a token is
   configured, on every path but ``/healthz`` -- before routing, so an anonymous caller
   cannot even learn which paths exist;
2. the route (404) and the method (405 with ``Allow``);
3. ``POST /fire`` and ``POST /run`` while the scheduler stops: 503 with ``Retry-After``;
4. the body, for requests that need one: ``Content-Type`` must be JSON (415); a declared
   ``Content-Length`` over 64 KiB is refused unread (413); the body is counted while it
   streams in and refused as soon as it passes 64 KiB (413), so a chunked body that never ends
   costs at most 64 KiB + one chunk; then it must be a UTF-8 JSON object (400);
5. the fields: missing or of the wrong type (400); unknown fields are ignored, as the original
   scheduler did, so a newer client can talk to an older server;
6. the action. A state fault is 503 with ``Retry-After`` (nothing was claimed or changed);
   anything unexpected is logged and answered 500 with a generic message.

Decisions (also in the README's HTTP section):

* ``POST /fire`` answers 202 once the claim is taken, and the fire goes on in the scheduler's
  nursery; with ``"wait": true`` the request runs the fire and answers 200 once it settled.
* ``POST /run`` waits by default (``"wait"`` defaults to ``true``), as the original's did: the
  answer carries the outcome. ``"wait": false`` answers 202 once the turn has started in the
  scheduler's nursery (its session already held, so it cannot turn out busy afterwards), or
  200 ``ran: false`` when the session is busy right now.
* Prompts never leave: ``GET /routines`` lists names and schedules only, and wake-ups are
  shown without their prompt. The one exception is ``reply`` of ``POST /wakeups``, the
  model-facing text of the ``wake`` tool, which restates the prompt the caller just sent.
* A routine name sent by the caller is echoed back cut to 64 characters.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qsl

import attrs
import trio

from .converter import fire_to_json, wakeup_to_json
from .cron import next_run
from .errors import InvalidWakeup, StateFault, TrioRoutinesError
from .instants import format_iso, parse_iso
from .logs import one_line
from .records import ClaimStatus, Wakeup
from .routines import Routine
from .scheduler import FireResult, NotOnGrid, NotYetDue, Scheduler, Stopping, UnknownRoutine
from .turns import TurnResult
from .wakeups import WakeupRequest, added_reply, bad_delay_reply, parse_delay, removed_reply

if TYPE_CHECKING:
    from hypercorn.typing import ASGIFramework

__all__ = ["MAX_BODY", "ASGIApp", "InsecureBind", "check_bind", "make_app", "serve_http"]

log = logging.getLogger("trio_routines.http")

MAX_BODY = 64 * 1024  # bytes
RETRY_AFTER = "5"  # seconds: what a 503 suggests
ECHO = 64  # characters of a caller's routine name echoed back
NEAR_FUTURE = 300.0  # seconds: a slot this close is "retry later" (503), further is an error

Scope = Mapping[str, Any]
Message = Mapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_GET = ("GET", "HEAD")
_ROUTES: dict[str, tuple[str, ...]] = {
    "/fire": ("POST",),
    "/run": ("POST",),
    "/routines": _GET,
    "history": _GET,
    "/wakeups": (*_GET, "POST"),
    "wakeup": ("DELETE",),
    "/healthz": _GET,
    "/metrics": _GET,
}


class InsecureBind(TrioRoutinesError, ValueError):
    """Raised by :func:`check_bind` (and so :func:`serve_http`) for a non-loopback address
    without a token: the HTTP surface can fire turns with the agent's full authority."""


# -- answers ----------------------------------------------------------------------------------


@attrs.frozen
class _Response:
    status: int
    body: Any
    headers: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class _Text:
    """A plain-text body (``GET /metrics``), where every other answer is JSON."""

    KIND = b"text/plain; version=0.0.4; charset=utf-8"
    text: str


class _Refusal(Exception):
    """An error answer, raised from anywhere inside a request's handling."""

    def __init__(self, status: int, message: str, headers: Iterable[tuple[str, str]] = ()):
        super().__init__(message)
        self.response = _Response(status, {"error": one_line(message)}, tuple(headers))


class _Disconnected(Exception):
    """The client went away before its body arrived: nobody is left to answer."""


def _unavailable(message: str) -> _Refusal:
    return _Refusal(503, message, [("retry-after", RETRY_AFTER)])


def _quoted(name: str) -> str:
    """A caller's routine name for a message: cut to 64 characters, JSON-quoted."""
    return json.dumps(name[:ECHO], ensure_ascii=False)


# -- request parsing (pure) ---------------------------------------------------------------------


def _route(path: str) -> tuple[str, str | None]:
    """The route key for ``path`` and its one parameter; a 404 for anything else."""
    if path in _ROUTES:
        return path, None
    prefix, suffix = "/routines/", "/history"
    if path.startswith(prefix) and path.endswith(suffix):
        name = path[len(prefix) : -len(suffix)]
        if name and "/" not in name:
            return "history", name
    if path.startswith("/wakeups/"):
        wakeup_id = path[len("/wakeups/") :]
        if wakeup_id and "/" not in wakeup_id:
            return "wakeup", wakeup_id
    raise _Refusal(404, "no such endpoint (see SPEC §9: /fire, /run, /routines, /wakeups, ...)")


def _headers(scope: Scope, name: bytes) -> list[bytes]:
    return [value for key, value in scope.get("headers", ()) if key.lower() == name]


def _one_header(scope: Scope, name: bytes) -> str | None:
    values = _headers(scope, name)
    if len(values) > 1:
        raise _Refusal(400, f"the {name.decode()} header is repeated")
    return values[0].decode("latin-1") if values else None


def _is_json(content_type: str | None) -> bool:
    if content_type is None:
        return False
    media, *params = content_type.split(";")
    if media.strip().lower() != "application/json":
        return False
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset" and value.strip().strip('"').lower() != "utf-8":
            return False
    return True


def _query(scope: Scope) -> dict[str, str]:
    raw = scope.get("query_string", b"")
    try:
        pairs = parse_qsl(raw.decode("latin-1"), keep_blank_values=True, errors="strict")
    except ValueError:
        raise _Refusal(400, "the query string is not valid UTF-8") from None
    query: dict[str, str] = {}
    for key, value in pairs:
        if key in query:
            raise _Refusal(400, f"the query parameter {key[:ECHO]!r} is repeated")
        query[key] = value
    return query


def _text(value: str, field: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise _Refusal(400, f'"{field}" is not valid Unicode text') from None
    if "\x00" in value:  # no store needs it, and PostgreSQL text cannot hold it
        raise _Refusal(400, f'"{field}" must not contain NUL characters')
    return value


def _required_text(body: Mapping[str, Any], field: str, example: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value:
        raise _Refusal(400, f'"{field}" must be a non-empty string, e.g. {example}')
    return _text(value, field)


def _optional_text(body: Mapping[str, Any], field: str) -> str | None:
    value = body.get(field)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise _Refusal(400, f'"{field}" must be a non-empty string when given')
    return _text(value, field)


def _flag(body: Mapping[str, Any], field: str, default: bool) -> bool:
    value = body.get(field, default)
    if not isinstance(value, bool):
        raise _Refusal(400, f'"{field}" must be true or false')
    return value


def _slot(body: Mapping[str, Any]) -> datetime:
    example = '"2026-07-07T10:00:00.000Z"'
    text = _required_text(body, "slot", example)
    try:
        slot = parse_iso(text)
    except (ValueError, OverflowError):
        slot = None
    if slot is None:
        raise _Refusal(400, f'"slot" must be an ISO instant with a zone, e.g. {example}')
    return slot


def _hidden(wakeup: Wakeup) -> dict[str, Any]:
    """A wake-up as the HTTP surface shows it: everything but the prompt."""
    shown = wakeup_to_json(wakeup)
    shown.pop("prompt", None)
    return shown


def _fire_body(name: str, slot: datetime, result: FireResult) -> dict[str, Any]:
    body: dict[str, Any] = {
        "claimed": result.claimed,
        "name": name[:ECHO],
        "slot": format_iso(slot),
    }
    if not result.claimed:
        body["reason"] = result.reason
        return body
    body["outcome"] = result.outcome.value if result.outcome is not None else None
    body["ms"] = result.ms
    if result.failed is not None:
        body["failed"] = result.failed
    return body


def _run_body(routine: Routine, name: str, turn: TurnResult) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name[:ECHO], "session": routine.session}
    if turn.busy:
        body.update(ran=False, reason=_busy_reason(name), ms=turn.ms)
        return body
    body.update(ran=True, outcome=turn.outcome.value, ms=turn.ms)
    if turn.failed is not None:
        body["failed"] = turn.failed
    return body


def _busy_reason(name: str) -> str:
    return f"the previous turn of {_quoted(name)} is still running"


# -- the application ----------------------------------------------------------------------------


class _App:
    def __init__(self, scheduler: Scheduler, token: str | None) -> None:
        self.scheduler = scheduler
        self._token = token.encode("utf-8") if token else None

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
        try:
            response = await self._dispatch(scope, method, receive)
        except _Refusal as refusal:
            response = refusal.response
        except _Disconnected:
            return
        except Exception:
            log.exception("%s %s: unexpected error", method, scope.get("path", "")[:ECHO])
            response = _Response(500, {"error": "internal error (logged by the server)"})
        if isinstance(response.body, _Text):
            payload, kind = response.body.text.encode("utf-8"), _Text.KIND
        else:
            payload = json.dumps(response.body, separators=(",", ":")).encode("ascii")
            kind = b"application/json"
        headers = [
            (b"content-type", kind),
            (b"content-length", str(len(payload)).encode("ascii")),
            (b"cache-control", b"no-store"),
            *((k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers),
        ]
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if method == "HEAD" else payload})

    async def _dispatch(self, scope: Scope, method: str, receive: Receive) -> _Response:
        path = scope.get("path", "")
        if path != "/healthz":
            self._authorize(scope)
        route, param = _route(path)
        allowed = _ROUTES[route]
        if method not in allowed:
            raise _Refusal(405, f"use {' or '.join(allowed)} here", [("allow", ", ".join(allowed))])
        if route == "/healthz":
            in_flight = self.scheduler.statistics().in_flight
            return _Response(200, {"status": "busy" if in_flight else "ok", "inFlight": in_flight})
        if route == "/metrics":
            return _Response(200, _Text(self.scheduler.render_metrics()))
        if route in ("/fire", "/run") and self.scheduler.stopping:
            raise _unavailable("the scheduler is stopping; no new turns are accepted")
        if route == "/fire":
            return await self._fire(await _read_json(scope, receive))
        if route == "/run":
            return await self._run(await _read_json(scope, receive))
        if route == "/routines":
            return self._routines()
        if route == "history":
            assert param is not None
            return await self._history(param)
        if route == "wakeup":
            assert param is not None
            return await self._unwake(param, _query(scope).get("session") or None)
        if method == "POST":
            return await self._wake(await _read_json(scope, receive))
        return await self._wakeups(_query(scope).get("session") or None)

    def _authorize(self, scope: Scope) -> None:
        if self._token is None:
            return
        given = _headers(scope, b"authorization")
        scheme, _, credentials = (given[0] if len(given) == 1 else b"").partition(b" ")
        # compare_digest is constant-time in the token; the scheme is not a secret.
        good = hmac.compare_digest(credentials.strip(), self._token)
        if not (good and scheme.lower() == b"bearer"):
            raise _Refusal(
                401,
                "missing or wrong token: send Authorization: Bearer <TRIO_ROUTINES_TOKEN>",
                [("www-authenticate", "Bearer")],
            )

    def _routine(self, name: str) -> Routine:
        try:
            return self.scheduler.routine(name)
        except UnknownRoutine:
            raise _Refusal(
                404, f"no routine named {_quoted(name)} (GET /routines lists them)"
            ) from None

    # -- routes -------------------------------------------------------------------------------

    async def _fire(self, body: Mapping[str, Any]) -> _Response:
        name = _required_text(body, "name", '"daily"')
        wait = _flag(body, "wait", False)
        routine = self._routine(name)
        slot = _slot(body)
        try:
            if wait:
                result = await self.scheduler.fire(name, slot)
            else:
                claim = await self.scheduler.start_fire(name, slot)
                if claim.status is ClaimStatus.TAKEN:
                    return _Response(
                        202, {"claimed": True, "name": name[:ECHO], "slot": format_iso(slot)}
                    )
                result = FireResult(name, slot, claimed=False, reason=claim.status.value)
        except NotOnGrid:
            zone = f" {routine.tz}" if routine.tz else ""
            raise _Refusal(
                400,
                f"slot {format_iso(slot)} is not on the cron grid of {_quoted(name)} "
                f'("{routine.cron}"{zone})',
            ) from None
        except NotYetDue as exc:
            if exc.wait <= NEAR_FUTURE:  # a delivering clock a little ahead of ours: retry
                retry = str(max(1, math.ceil(exc.wait)))
                raise _Refusal(503, str(exc), [("retry-after", retry)]) from None
            raise _Refusal(400, str(exc)) from None
        except OverflowError:
            raise _Refusal(400, f"slot {format_iso(slot)} is out of range") from None
        except Stopping:
            raise _unavailable("the scheduler is stopping; no new fires are accepted") from None
        except StateFault as exc:
            log.error("POST /fire %s at %s: %s", name[:ECHO], format_iso(slot), exc)
            raise _unavailable(
                f"the claim state of {_quoted(name)} is unavailable; nothing was claimed — retry"
            ) from None
        return _Response(200, _fire_body(name, slot, result))

    async def _run(self, body: Mapping[str, Any]) -> _Response:
        name = _required_text(body, "name", '"daily"')
        wait = _flag(body, "wait", True)
        routine = self._routine(name)
        if not wait:
            try:
                started = await self.scheduler.start_run(name)
            except Stopping:
                raise _unavailable("the scheduler is stopping; no new turns are accepted") from None
            if not started:
                return _Response(
                    200,
                    {
                        "name": name[:ECHO],
                        "session": routine.session,
                        "ran": False,
                        "reason": _busy_reason(name),
                    },
                )
            return _Response(
                202, {"name": name[:ECHO], "session": routine.session, "started": True}
            )
        try:
            turn = await self.scheduler.run_now(name)
        except Stopping:
            raise _unavailable("the scheduler is stopping; no new turns are accepted") from None
        return _Response(200, _run_body(routine, name, turn))

    def _routines(self) -> _Response:
        now = self.scheduler.now()
        listing = []
        for name in sorted(self.scheduler.routines):
            routine = self.scheduler.routines[name]
            upcoming = next_run(routine.cron, routine.tz, now) if routine.cron else None
            listing.append(
                {
                    "name": name,
                    "cron": routine.cron,
                    "tz": routine.tz,
                    "next": format_iso(upcoming) if upcoming is not None else None,
                }
            )
        return _Response(200, listing)

    async def _history(self, name: str) -> _Response:
        self._routine(name)
        try:
            fires = await self.scheduler.store.history(name)
        except StateFault as exc:
            log.error("GET /routines/%s/history: %s", name[:ECHO], exc)
            raise _unavailable(f"the history of {_quoted(name)} is unreadable right now") from None
        return _Response(200, [fire_to_json(fire) for fire in fires])

    async def _wake(self, body: Mapping[str, Any]) -> _Response:
        session = _required_text(body, "session", '"chat:42"')
        prompt = _required_text(body, "prompt", '"check the build"')
        if ("in" in body) == ("cron" in body):
            raise _Refusal(400, 'give exactly one of "in" (a delay such as "30m") or "cron"')
        tz = _optional_text(body, "tz")
        now = self.scheduler.now()
        if "in" in body:
            if tz is not None:
                raise _Refusal(400, '"tz" goes with "cron" only')
            try:
                seconds = parse_delay(body["in"])
                fire_at = None if seconds is None else now + timedelta(seconds=seconds)
            except OverflowError:
                raise _Refusal(400, '"in" is too far in the future') from None
            if fire_at is None:
                raise _Refusal(400, bad_delay_reply(body["in"]))
            request = WakeupRequest(session=session, prompt=prompt, fire_at=fire_at)
        else:
            cron = _required_text(body, "cron", '"0 9 * * 1-5"')
            request = WakeupRequest(session=session, prompt=prompt, cron=cron, tz=tz)
        try:
            wakeup = await self.scheduler.store.add_wakeup(request, now)
        except InvalidWakeup as exc:
            raise _Refusal(400, str(exc)) from None
        except StateFault as exc:
            log.error("POST /wakeups: %s", exc)
            raise _unavailable("the wake-up state is unavailable; nothing was added") from None
        return _Response(201, {"wakeup": _hidden(wakeup), "reply": added_reply(wakeup)})

    async def _wakeups(self, session: str | None) -> _Response:
        try:
            pending = await self.scheduler.store.list_wakeups()
        except StateFault as exc:
            log.error("GET /wakeups: %s", exc)
            raise _unavailable("the wake-up state is unreadable right now") from None
        return _Response(
            200, [_hidden(w) for w in pending if session is None or w.session == session]
        )

    async def _unwake(self, wakeup_id: str, session: str | None) -> _Response:
        try:
            removed = await self.scheduler.store.remove_wakeup(wakeup_id, session)
        except StateFault as exc:
            log.error("DELETE /wakeups/%s: %s", wakeup_id[:ECHO], exc)
            raise _unavailable("the wake-up state is unavailable; nothing was removed") from None
        if not removed:
            raise _Refusal(404, removed_reply(wakeup_id[:ECHO], False))
        return _Response(200, {"removed": True, "reply": removed_reply(wakeup_id[:ECHO], True)})


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message.get("type") == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message.get("type") == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _read_json(scope: Scope, receive: Receive) -> Mapping[str, Any]:
    """The request's JSON object, read under the 64 KiB limit (see the module doc)."""
    if not _is_json(_one_header(scope, b"content-type")):
        raise _Refusal(415, "send a JSON body with Content-Type: application/json")
    declared = _one_header(scope, b"content-length")
    if declared is not None:
        declared = declared.strip()
        if not declared.isascii() or not declared.isdigit():
            raise _Refusal(400, "Content-Length is not a number")
        if len(declared) > 12 or int(declared) > MAX_BODY:
            raise _Refusal(413, f"the body is over {MAX_BODY // 1024} KiB")
    body = bytearray()
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            raise _Disconnected
        if message.get("type") != "http.request":
            continue
        body += message.get("body", b"")
        if len(body) > MAX_BODY:
            # The rest is still coming: ask the server to drop the connection, not drain it.
            raise _Refusal(
                413, f"the body is over {MAX_BODY // 1024} KiB", [("connection", "close")]
            )
        if not message.get("more_body", False):
            break
    try:
        parsed = json.loads(body.decode("utf-8"))
    except (ValueError, RecursionError):  # RecursionError: 64 KiB of "[" nests too deep
        raise _Refusal(400, "the body is not valid JSON (UTF-8)") from None
    if not isinstance(parsed, dict):
        raise _Refusal(400, "the body must be a JSON object")
    return parsed


def make_app(scheduler: Scheduler, *, token: str | None = None) -> ASGIApp:
    """The ASGI application of SPEC §9 over ``scheduler``.

    ``token`` (e.g. ``$TRIO_ROUTINES_TOKEN``; empty means none) is then required as
    ``Authorization: Bearer <token>`` on every endpoint but ``/healthz``. ``POST /fire`` without
    ``wait`` needs the scheduler running (``await nursery.start(scheduler.run)``); before that,
    and once it stops, fires are answered 503.
    """
    return _App(scheduler, token)


# -- serving ------------------------------------------------------------------------------------


def _is_loopback(host: str) -> bool:
    bare = host.strip().strip("[]")
    if bare.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def check_bind(host: str, token: str | None) -> None:
    """Refuse (:class:`InsecureBind`) to serve on a non-loopback ``host`` without a token."""
    if not token and not _is_loopback(host):
        raise InsecureBind(
            f"refusing to serve HTTP on {host or '(all interfaces)'} without a token — "
            "set TRIO_ROUTINES_TOKEN, or bind 127.0.0.1"
        )


async def _drained(scheduler: Scheduler) -> None:
    """Return once the scheduler stops and its last turn has ended.

    Until then the server stays up, answering 503 to new fires and ``busy`` to health checks,
    and delivering the answers of ``"wait": true`` requests as their fires settle.
    """
    await scheduler.wait_drained()


async def serve_http(
    scheduler: Scheduler,
    host: str = "127.0.0.1",
    port: int = 8080,
    *,
    token: str | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve :func:`make_app` with hypercorn's Trio worker until the scheduler has stopped.

    ``nursery.start(serve_http, scheduler, host, 0)`` returns the port actually bound.
    Raises :class:`InsecureBind` before binding anything when ``host`` is not loopback and
    there is no token.
    """
    from hypercorn.config import Config
    from hypercorn.trio import serve

    check_bind(host, token)
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = log
    config.include_server_header = False
    # Requests waiting for a fire get the stop's grace to hear how it ended.
    config.graceful_timeout = scheduler.default_grace + 2.0
    app = cast("ASGIFramework", make_app(scheduler, token=token))
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(
            partial(serve, app, config, shutdown_trigger=partial(_drained, scheduler))
        )
        bound = int(binds[0].rsplit(":", 1)[1])
        log.info("HTTP surface on %s", binds[0])
        task_status.started(bound)
