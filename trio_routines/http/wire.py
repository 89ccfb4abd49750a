"""Requests in, answers out: the pure parsing half of the HTTP surface.

Everything a request carries -- path, headers, query, body -- is untrusted and is read here,
and only here, into plain values or a :class:`Refusal` (an error answer). Nothing in this
module touches the scheduler or the state store.
"""

from __future__ import annotations

import json
import unicodedata
from collections.abc import Awaitable, Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Literal
from urllib.parse import parse_qsl, unquote_to_bytes

import attrs

from ..converter import DuplicateKey, loads_request
from ..instants import parse_instant
from ..logs import one_line
from ..wakeups import MAX_SESSION as WAKEUP_SESSION

MAX_BODY = 64 * 1024  # bytes
RETRY_AFTER = "5"  # seconds: what a 503 suggests
ECHO = 64  # characters of a caller's routine name echoed back
MAX_ID = 128  # characters of a wake-up id (ours are 36)
MAX_SESSION = WAKEUP_SESSION  # characters of a session name (wakeups.py: one bound)

Scope = Mapping[str, Any]
Message = Mapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

GET = ("GET", "HEAD")
ROUTES: dict[str, tuple[str, ...]] = {
    "/fire": ("POST",),
    "/run": ("POST",),
    "/routines": GET,
    "/replicas": GET,
    "history": GET,
    "pause": ("POST",),
    "resume": ("POST",),
    "/wakeups": (*GET, "POST"),
    "wakeup": ("DELETE",),
    "/tools": GET,
    "/tools/call": ("POST",),
    "/healthz": GET,
    "/readyz": GET,
    "/metrics": GET,
}


# -- answers ----------------------------------------------------------------------------------


@attrs.frozen
class Response:
    status: int
    body: Any
    headers: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class Text:
    """A plain-text body (``GET /metrics``), where every other answer is JSON."""

    KIND = b"text/plain; version=0.0.4; charset=utf-8"
    text: str


@attrs.frozen
class Raw:
    """Bytes of a given content type (the status page, its assets)."""

    kind: bytes
    data: bytes


class Refusal(Exception):
    """An error answer, raised from anywhere inside a request's handling."""

    def __init__(self, status: int, message: str, headers: Iterable[tuple[str, str]] = ()):
        super().__init__(message)
        self.response = Response(status, {"error": one_line(message)}, tuple(headers))


class Disconnected(Exception):
    """The client went away before its body arrived: nobody is left to answer."""


def unavailable(message: str) -> Refusal:
    return Refusal(503, message, [("retry-after", RETRY_AFTER)])


def quoted(name: str) -> str:
    """A caller's routine name for a message: cut to 64 characters, JSON-quoted."""
    return json.dumps(name[:ECHO], ensure_ascii=False)


def encode(response: Response, method: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two ASGI messages (start, body) that send ``response``."""
    if isinstance(response.body, Text):
        payload, kind = response.body.text.encode("utf-8"), Text.KIND
    elif isinstance(response.body, Raw):
        payload, kind = response.body.data, response.body.kind
    else:
        payload = json.dumps(response.body, separators=(",", ":")).encode("ascii")
        kind = b"application/json"
    headers = [
        (b"content-type", kind),
        (b"content-length", str(len(payload)).encode("ascii")),
        (b"cache-control", b"no-store"),
        (b"x-content-type-options", b"nosniff"),
        *((k.encode("latin-1"), v.encode("latin-1")) for k, v in response.headers),
    ]
    return (
        {"type": "http.response.start", "status": response.status, "headers": headers},
        {"type": "http.response.body", "body": b"" if method == "HEAD" else payload},
    )


# -- request parsing ----------------------------------------------------------------------------


def local_path(scope: Scope) -> str:
    """The request's path below the mount point.

    The ASGI spec passes the full path in ``path`` and the mount point in ``root_path`` (as
    Starlette's ``Mount`` and hypercorn's ``root_path`` do); some dispatchers strip the prefix
    from ``path`` instead. Either way the routes see ``/fire``, ``/routines``, ...
    """
    path: str = scope.get("path", "")
    root = mount_point(scope)
    if root and (path == root or path.startswith(root + "/")):
        return path[len(root) :] or "/"
    return path


def check_path_text(scope: Scope) -> None:
    """A 400 for a path whose percent-escapes are no UTF-8 (``/routines/%ff/pause``): the
    server decodes them leniently, into U+FFFD, which would name another routine."""
    raw = scope.get("raw_path")
    if not isinstance(raw, bytes):
        return  # a server that gives only the decoded path: as it decoded it
    try:
        unquote_to_bytes(raw.partition(b"?")[0]).decode("utf-8")
    except UnicodeDecodeError:
        raise Refusal(400, "the path is not valid UTF-8") from None


def mount_point(scope: Scope) -> str:
    """Where the surface is mounted (the ASGI ``root_path``, without its trailing ``/``):
    ``""`` at the root. A path the surface names to its caller starts with it."""
    root = scope.get("root_path", "")
    return root.rstrip("/") if isinstance(root, str) else ""


def route(path: str) -> tuple[str, str | None]:
    """The route key for ``path`` and its one parameter; a 404 for anything else."""
    if path in ROUTES:
        return path, None
    prefix = "/routines/"
    for key in ("history", "pause", "resume"):
        suffix = f"/{key}"
        if path.startswith(prefix) and path.endswith(suffix):
            name = path[len(prefix) : -len(suffix)]
            if name and "/" not in name:
                return key, name
    if path.startswith("/wakeups/"):
        wakeup_id = path[len("/wakeups/") :]
        if wakeup_id and "/" not in wakeup_id:
            return "wakeup", wakeup_id
    raise Refusal(
        404,
        "no such endpoint — the routes are POST /fire, POST /run, GET /routines, "
        "GET /routines/{name}/history, POST /routines/{name}/pause|resume, /wakeups, "
        "GET /replicas, GET /tools, POST /tools/call, GET /healthz, GET /readyz, GET /metrics, "
        "the page at GET / (its data: GET /ui/state)",
    )


def headers(scope: Scope, name: bytes) -> list[bytes]:
    return [value for key, value in scope.get("headers", ()) if key.lower() == name]


def one_header(scope: Scope, name: bytes) -> str | None:
    values = headers(scope, name)
    if len(values) > 1:
        raise Refusal(400, f"the {name.decode()} header is repeated")
    return values[0].decode("latin-1") if values else None


def is_json(content_type: str | None) -> bool:
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


def query(scope: Scope) -> dict[str, str]:
    raw = scope.get("query_string", b"")
    try:
        pairs = parse_qsl(raw.decode("latin-1"), keep_blank_values=True, errors="strict")
    except ValueError:
        raise Refusal(400, "the query string is not valid UTF-8") from None
    found: dict[str, str] = {}
    for key, value in pairs:
        if key in found:
            raise Refusal(400, f"the query parameter {key[:ECHO]!r} is repeated")
        found[key] = value
    return found


def text(value: str, field: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise Refusal(400, f'"{field}" is not valid Unicode text') from None
    if "\x00" in value:  # no store needs it, and PostgreSQL text cannot hold it
        raise Refusal(400, f'"{field}" must not contain NUL characters')
    return value


def only_keys(
    body: Mapping[str, Any],
    route: str,
    takes: tuple[str, ...],
    ignored: frozenset[str] = frozenset(),
) -> None:
    """Refuse a body naming a key ``route`` neither takes nor ``ignored`` (documented as
    such): a misspelt ``until`` would be dropped and its default taken, a newer client's
    option silently not honoured."""
    unknown = sorted(key for key in body if key not in takes and key not in ignored)
    if unknown:
        named = ", ".join(json.dumps(key[:ECHO]) for key in unknown[:3])  # ASCII: any key
        more = ", …" if len(unknown) > 3 else ""
        plural = "s" if len(unknown) > 1 else ""
        accepted = ", ".join(f'"{key}"' for key in takes)
        raise Refusal(400, f"unknown key{plural} {named}{more}: {route} takes {accepted}")


def required_text(body: Mapping[str, Any], field: str, example: str) -> str:
    value = body.get(field)
    if not isinstance(value, str) or not value:
        raise Refusal(400, f'"{field}" must be a non-empty string, e.g. {example}')
    return text(value, field)


def optional_text(body: Mapping[str, Any], field: str) -> str | None:
    value = body.get(field)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise Refusal(400, f'"{field}" must be a non-empty string when given')
    return text(value, field)


def label(value: str, field: str, limit: int) -> str:
    """A wake-up id, checked before any store sees it: every store then gives the same answer
    (400), whatever it could or could not hold. Ours are UUIDs: one with a control character
    was made by hand, and is removed on the state itself."""
    checked_session(value, field, limit)
    if any(unicodedata.category(ch) == "Cc" for ch in value):
        raise Refusal(400, f'"{field}" must not contain control characters')
    return value


def checked_session(value: str, field: str = "session", limit: int = MAX_SESSION) -> str:
    """A session, checked before any store sees it (a NUL, or over ``limit`` characters: 400
    on every store). Any other character is taken, as the tool, the API and the command line
    take it: a routine's session is ``routine:`` and its name, which may hold a control
    character, and its turns' wake-ups must be listed and cancelled here too. Every answer
    shows it escaped (the JSON is ASCII)."""
    text(value, field)
    if len(value) > limit:
        raise Refusal(400, f'"{field}" is longer than {limit} characters')
    return value


def session_param(scope: Scope) -> str | None:
    """``?session=`` of ``GET /wakeups``, checked; ``None`` when absent or empty."""
    given = query(scope).get("session") or None
    return None if given is None else checked_session(given)


ToolStyle = Literal["plain", "openai", "anthropic"]
TOOL_STYLES: dict[str, ToolStyle] = {"plain": "plain", "openai": "openai", "anthropic": "anthropic"}


def style_param(scope: Scope) -> ToolStyle:
    """``?style=`` of ``GET /tools``: the shape of the definitions, ``plain`` when absent."""
    style = query(scope).get("style") or "plain"
    if style not in TOOL_STYLES:
        raise Refusal(400, f"style must be one of {', '.join(TOOL_STYLES)}, not {style[:ECHO]!r}")
    return TOOL_STYLES[style]


def required_session(scope: Scope) -> str:
    """``?session=`` of ``DELETE /wakeups/{id}``: without it, a 400."""
    session = session_param(scope)
    if session is None:
        raise Refusal(400, "give ?session=<the session the wake-up belongs to>")
    return session


def flag(body: Mapping[str, Any], field: str, default: bool) -> bool:
    value = body.get(field, default)
    if not isinstance(value, bool):
        raise Refusal(400, f'"{field}" must be true or false')
    return value


def slot(body: Mapping[str, Any]) -> datetime:
    example = '"2026-07-07T10:00:00.000Z"'
    given = required_text(body, "slot", example)
    try:
        parsed = parse_instant(given)
    except (ValueError, OverflowError):
        parsed = None
    if parsed is None:
        raise Refusal(400, f'"slot" must be an ISO instant with a zone, e.g. {example}')
    return parsed


async def read_body(scope: Scope, receive: Receive, limit: int = MAX_BODY) -> bytes:
    """The request's body, refused (413) as soon as it passes ``limit`` bytes: a declared
    ``Content-Length`` over it unread, a streamed body at the first chunk past it."""
    too_large = (
        f"the body is over {limit // 1024} KiB" if limit >= 1024 else "the body is too large"
    )
    declared = one_header(scope, b"content-length")
    if declared is not None:
        declared = declared.strip()
        if not declared.isascii() or not declared.isdigit():
            raise Refusal(400, "Content-Length is not a number")
        digits = declared.lstrip("0")  # zeros in front are no size (and no reason to refuse)
        if len(digits) > 12 or int(digits or "0") > limit:  # int() of 12 digits at most
            raise Refusal(413, too_large)
    body = bytearray()
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            raise Disconnected
        if message.get("type") != "http.request":
            continue
        body += message.get("body", b"")
        if len(body) > limit:
            # The rest is still coming: ask the server to drop the connection, not drain it.
            raise Refusal(413, too_large, [("connection", "close")])
        if not message.get("more_body", False):
            return bytes(body)


async def read_json(scope: Scope, receive: Receive) -> Mapping[str, Any]:
    """The request's JSON object, read under the 64 KiB limit (see the package doc)."""
    if not is_json(one_header(scope, b"content-type")):
        raise Refusal(415, "send a JSON body with Content-Type: application/json")
    body = await read_body(scope, receive)
    try:
        parsed = loads_request(body.decode("utf-8"))
    except DuplicateKey as twice:  # the last would win here, the first elsewhere
        raise Refusal(400, f"the body names the key {quoted(twice.key)} twice") from None
    except ValueError:  # not JSON, not UTF-8, or nested too deep
        raise Refusal(400, "the body is not valid JSON (UTF-8)") from None
    if not isinstance(parsed, dict):
        raise Refusal(400, "the body must be a JSON object")
    return parsed
