"""A small agent server on a loopback port, scripted per test, for the HTTP agent's tests.

It speaks just enough HTTP/1.1 by hand to misbehave on purpose: answer with a body, stream
server-sent events in chunks, never answer, or close in the middle of a chunked stream. Every
request it reads is kept (method, path, headers, body) for the test to inspect.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import attrs
import trio


@attrs.frozen
class Request:
    method: str
    path: str
    headers: dict[str, str]  # names lowercased
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


Respond = Callable[[Request, trio.abc.Stream], Awaitable[None]]


async def _read_request(stream: trio.abc.Stream) -> Request | None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    request_line, *header_lines = head.decode("latin-1").split("\r\n")
    method, path, _version = request_line.split(" ", 2)
    headers = {}
    for line in header_lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = await stream.receive_some(65536)
        if not chunk:
            return None
        rest += chunk
    return Request(method, path, headers, rest[:length])


def head(status: int, content_type: str, extra: str = "", length: int | None = None) -> bytes:
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    text = (
        f"HTTP/1.1 {status} Scripted\r\nContent-Type: {content_type}\r\n{framing}\r\n"
        f"Connection: close\r\n{extra}\r\n"
    )
    return text.encode("latin-1")


def chunk(data: str | bytes) -> bytes:
    raw = data.encode() if isinstance(data, str) else data
    return f"{len(raw):x}\r\n".encode() + raw + b"\r\n"


END = b"0\r\n\r\n"


def reply(status: int, body: str | bytes, content_type: str = "application/json") -> Respond:
    """A whole answer with a Content-Length."""
    raw = body.encode() if isinstance(body, str) else body

    async def respond(request: Request, stream: trio.abc.Stream) -> None:
        await stream.send_all(head(status, content_type, length=len(raw)) + raw)

    return respond


def events(*pieces: str, pause: float = 0.05, end: bool = True) -> Respond:
    """``text/event-stream`` sent as one chunk per piece, a pause apart; ``end=False`` closes
    the connection without the final chunk (a server dying mid-stream)."""

    async def respond(request: Request, stream: trio.abc.Stream) -> None:
        await stream.send_all(head(200, "text/event-stream"))
        for piece in pieces:
            await stream.send_all(chunk(piece))
            await trio.sleep(pause)
        if end:
            await stream.send_all(END)

    return respond


async def never_answer(request: Request, stream: trio.abc.Stream) -> None:
    await trio.sleep_forever()


class AgentServer:
    """Serves ``respond`` (changeable between turns) on 127.0.0.1; start with ``nursery.start``."""

    def __init__(self, respond: Respond, ssl_context: ssl.SSLContext | None = None) -> None:
        self.respond = respond
        self.ssl_context = ssl_context
        self.requests: list[Request] = []
        self.port = 0

    def url(self, path: str = "/turn") -> str:
        scheme = "https" if self.ssl_context is not None else "http"
        return f"{scheme}://127.0.0.1:{self.port}{path}"

    async def run(
        self, *, task_status: trio.TaskStatus[AgentServer] = trio.TASK_STATUS_IGNORED
    ) -> None:
        if self.ssl_context is not None:
            serve = partial(trio.serve_ssl_over_tcp, self._handle, 0, self.ssl_context)
        else:
            serve = partial(trio.serve_tcp, self._handle, 0)
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(partial(serve, host="127.0.0.1"))
            self.port = (
                listeners[0].transport_listener.socket.getsockname()[1]
                if self.ssl_context
                else listeners[0].socket.getsockname()[1]
            )
            task_status.started(self)

    async def _handle(self, stream: trio.abc.Stream) -> None:
        try:
            request = await _read_request(stream)
            if request is None:
                return
            self.requests.append(request)
            await self.respond(request, stream)
        except (trio.BrokenResourceError, trio.ClosedResourceError, ssl.SSLError):
            pass  # the client went away: that is its business
        finally:
            with trio.move_on_after(1) as cleanup:
                cleanup.shield = True
                await stream.aclose()
