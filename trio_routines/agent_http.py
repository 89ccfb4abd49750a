"""The HTTP agent: each turn is one ``POST`` to an agent server (``--agent http(s)://…``).

Theory of operation. A turn builds one JSON body -- ``session``, ``prompt`` and why it runs,
from :func:`~trio_routines.context.current_fire` -- and posts it once. Nothing is ever retried:
a fire is at most once, so a connection that fails, before or after the server got the
request, fails the turn and says so. A cron fire carries ``Idempotency-Key:
<routine>/<slot name>``, the claim's own name (the routine's percent-encoded where it is not
visible ASCII: any name fits a header), equal on every replica and after every restart,
so a receiver that remembers keys can refuse a duplicate that reached it by any other path.

The answer is classified in one pure function (:func:`classify`, in :mod:`.agent_wire` with
the rest of the pure core): 409 and 423 mean the receiver's session is busy (the turn never
started: the slot settles ``skipped``); other statuses of 300 and up fail the turn with the
status and the first line of the body; a 2xx ``text/event-stream`` is read as events
(``data`` deltas, ``usage`` events, a final ``failed`` or ``busy``); any other 2xx body is
the reply text, and a JSON one (``application/json``) may carry the turn's usage in a
top-level ``usage`` member (see :mod:`.agent_wire`).
Only a 307/308 to the same origin is followed (it keeps the POST and the body, and the token
never leaves the origin it was meant for).

Bounds, all ours: a connect timeout, a read timeout between two pieces of the answer, at most
:data:`MAX_REPLY` bytes of answer read (a plain body is cut there and the turn completes -- the
status already said so; an event stream not finished by then fails, its outcome unknown), and
the routine's ``timeout`` around the whole turn (the runtime's cancel scope, as is a stop's
grace). The request asks for ``identity`` and the answer is read raw: one in another
``Content-Encoding`` fails the turn unread (inflated, a small gzip bomb would pass the limit).
TLS is verified against the system's roots, or ``TRIO_ROUTINES_AGENT_CA`` when set.
The token from ``TRIO_ROUTINES_AGENT_TOKEN`` goes in one header and nowhere else: not in a
``repr``, a log line or an error, which name the origin (scheme, host, port) and never the
path's query. A server's words that become a reason have the token masked before they are cut
(:func:`reason_of`), so a cut never leaves the token's beginning behind.
"""

from __future__ import annotations

import codecs
import json
import logging
import os
import ssl
from collections.abc import AsyncIterator
from contextlib import aclosing

import httpx

from . import tracing
from .agent import SESSION_BUSY, Completed, Event, Failed
from .agent_wire import BUSY_STATUSES as BUSY_STATUSES
from .agent_wire import REASON_LIMIT as REASON_LIMIT
from .agent_wire import (
    Answer,
    Reader,
    classify,
    coding_of,
    event_outcome,
    first_line,
    is_json,
    reason_of,
    request_body,
)
from .agent_wire import masked as masked
from .checks import checked_count, checked_seconds
from .context import FireContext, current_fire
from .errors import InvalidAgent
from .logs import one_line
from .sse import EventStreamParser

__all__ = ["HttpAgent", "classify", "request_body"]

log = logging.getLogger("trio_routines")

TOKEN_VARIABLE = "TRIO_ROUTINES_AGENT_TOKEN"
CA_VARIABLE = "TRIO_ROUTINES_AGENT_CA"
CONNECT_TIMEOUT = 10.0  # seconds to establish the connection (TLS included)
READ_TIMEOUT = 300.0  # seconds of silence between two pieces of the answer
MAX_REPLY = 1 << 20  # bytes of answer read at most
ERROR_BODY_LIMIT = 4096  # bytes of an error body read to find its first line
MAX_REDIRECTS = 3


# --- the shell ------------------------------------------------------------------------------


class HttpAgent:
    """Posts each turn to ``url``; the contract is :mod:`trio_routines.agent_http`'s text."""

    def __init__(
        self,
        url: str,
        *,
        connect_timeout: float = CONNECT_TIMEOUT,
        read_timeout: float = READ_TIMEOUT,
        max_reply: int = MAX_REPLY,
        token: str | None = None,
        ca_file: str | None = None,
    ) -> None:
        try:
            parsed = httpx.URL(url)
            valid = not any(c.isspace() or not c.isprintable() for c in url) and (
                parsed.port is None or 0 < parsed.port < 65536
            )
        except (httpx.InvalidURL, TypeError, ValueError):
            valid = False
        if not valid:
            raise InvalidAgent(f"agent URL {_shown(url)} is not a valid URL")
        if parsed.scheme not in ("http", "https") or not parsed.host:
            raise InvalidAgent(f"agent URL {_shown(url)} must be http:// or https:// with a host")
        if parsed.userinfo:
            raise InvalidAgent(
                f"agent URL {parsed.scheme}://…@{parsed.host} carries credentials — "
                f"put a bearer token in {TOKEN_VARIABLE} instead"
            )
        self.url: httpx.URL = parsed
        self.origin = _origin(parsed)
        self.connect_timeout = checked_seconds("connect_timeout", connect_timeout, zero=False)
        self.read_timeout = checked_seconds("read_timeout", read_timeout, zero=False)
        self.max_reply = checked_count("max_reply", max_reply, least=1)
        # Each said by where it came from: the argument, or the variable read in its stead.
        token_from = "token" if token is not None else TOKEN_VARIABLE
        token = token if token is not None else os.environ.get(TOKEN_VARIABLE, "")
        if not isinstance(token, str) or any(not "!" <= c <= "~" for c in token.strip()):
            raise InvalidAgent(  # never echoed: it is a secret, even a malformed one
                f"{token_from} must be printable ASCII without spaces (a bearer token)"
            )
        self._token = token.strip() or None
        ca_from = "ca_file" if ca_file is not None else CA_VARIABLE
        ca_file = ca_file if ca_file is not None else os.environ.get(CA_VARIABLE) or None
        # Built once here, never per turn: httpx would otherwise load a CA bundle from disk on
        # the Trio thread for every client. Plain http gets one that never loads anything.
        self._verify = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if parsed.scheme == "https":
            try:
                self._verify = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as exc:
                raise InvalidAgent(
                    f"{ca_from}={_shown(ca_file or '')} cannot be loaded as a CA file: "
                    f"{exc.strerror or exc}"
                ) from None

    def __repr__(self) -> str:
        return f"HttpAgent({self.origin}{self.url.path})"

    def headers(self, fire: FireContext | None) -> dict[str, str]:
        """The request's headers for a turn started by ``fire`` (its idempotency key, if any)."""
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream, application/json;q=0.9, text/plain;q=0.8, */*;q=0.5",
            "Accept-Encoding": "identity",
            "User-Agent": "trio-routines",
        }
        key = fire.idempotency_key if fire is not None else None
        if key is not None:
            headers["Idempotency-Key"] = key
        if self._token is not None:
            headers["Authorization"] = f"Bearer {self._token}"
        headers.update(tracing.outgoing())  # the turn's trace context, when there is one
        return headers

    async def invoke(self, session: str, text: str) -> AsyncIterator[Event]:
        fire = current_fire()
        content = json.dumps(request_body(session, text, fire), ensure_ascii=False).encode()
        headers = self.headers(fire)
        timeout = httpx.Timeout(
            connect=self.connect_timeout,
            read=self.read_timeout,
            write=self.read_timeout,
            pool=self.connect_timeout,
        )
        async with httpx.AsyncClient(
            timeout=timeout, verify=self._verify, trust_env=False, follow_redirects=False
        ) as client:
            url = self.url
            for _ in range(MAX_REDIRECTS + 1):
                try:
                    async with client.stream("POST", url, content=content, headers=headers) as r:
                        answer = classify(r.status_code, r.headers.get("content-type", ""))
                        if answer.kind == "redirect":
                            target = self._redirect(url, r.headers.get("location", ""))
                            if target is None:
                                yield Failed(
                                    f"the agent answered {r.status_code} to another origin — "
                                    "not followed"
                                )
                                return
                            url = target
                            continue
                        async for event in self._read(r, answer):
                            yield event
                        return
                except httpx.HTTPError as exc:
                    yield Failed(self._describe(exc))
                    return
            yield Failed(f"the agent redirected more than {MAX_REDIRECTS} times — not followed")

    def _redirect(self, url: httpx.URL, location: str) -> httpx.URL | None:
        try:
            target = url.join(location)
        except Exception:
            return None
        return target if location and _origin(target) == self.origin else None

    async def _read(self, response: httpx.Response, answer: Answer) -> AsyncIterator[Event]:
        # Raw bytes only: httpx would inflate any coding, and a small gzip bomb would pass our
        # size limits after inflating. We asked for identity; anything else is not read.
        # Whatever the server says is masked before it is cut (reason_of): the other way
        # round, a token straddling the cut would leave its beginning in the reason.
        codings = response.headers.get_list("content-encoding", split_commas=True)
        coding = coding_of(codings, self._token)
        if answer.kind in ("busy", "failed"):
            if coding:
                line = f"its body in Content-Encoding {coding} was not read"
            else:
                body, cut = await _read_some(response, ERROR_BODY_LIMIT)
                line = first_line(body, secret=self._token, cut=cut)
            reason = answer.reason + (f": {line}" if line else "")
            yield Failed(reason, SESSION_BUSY if answer.kind == "busy" else None)
            return
        if coding:
            yield Failed(
                f"the agent answered in Content-Encoding {coding}, not the identity asked "
                "for — not read"
            )
            return
        charset = "utf-8" if answer.kind == "events" else response.charset_encoding
        decoder = _decoder(charset)
        # A JSON reply is kept whole (within max_reply) to read its usage member at the end.
        keep = answer.kind == "text" and is_json(response.headers.get("content-type", ""))
        reader = Reader(EventStreamParser() if answer.kind == "events" else None, keep=keep)
        kept = 0
        cut = False
        async with aclosing(response.aiter_raw()) as chunks:  # type: ignore[type-var]
            async for chunk in chunks:
                # Cut only once a byte past the limit came: a reply of exactly max_reply
                # bytes that ends there is whole.
                if chunk and len(chunk) > self.max_reply - kept:
                    chunk, cut = chunk[: self.max_reply - kept], True
                kept += len(chunk)
                for delta in reader.feed(decoder.decode(chunk, final=cut)):
                    yield delta
                if cut or reader.overlong:
                    break
        if cut and reader.parser is not None and not reader.overlong:
            yield Failed(
                f"the agent's event stream passed {self.max_reply} bytes without ending — "
                "stopped reading"
            )
            return
        if not reader.overlong:
            for delta in reader.feed(decoder.decode(b"", final=True), final=True):
                yield delta
        usage = None if cut else reader.reply_usage()  # a cut JSON reply is no JSON
        for problem in reader.problems:
            log.warning("the agent at %s sent usage that is left out: %s", self.origin, problem)
        if usage is not None:
            yield usage
        outcome = reader.outcome
        if outcome is not None:  # the server's own words become a stored reason: no token
            outcome = event_outcome(outcome, self._token)
        yield outcome or Completed()

    def _describe(self, exc: httpx.HTTPError) -> str:
        detail = _detail(exc, self._token)  # whatever a library puts in a message
        where = self.origin
        if isinstance(exc, httpx.ConnectTimeout):
            return f"could not connect to {where} within {self.connect_timeout:g}s (not retried)"
        if isinstance(exc, httpx.ConnectError):
            return f"could not connect to {where}: {detail} (not retried)"
        if isinstance(exc, httpx.ReadTimeout):
            return f"{where} sent nothing for {self.read_timeout:g}s — read timeout (not retried)"
        if isinstance(exc, httpx.TimeoutException):
            return f"timed out talking to {where}: {detail} (not retried)"
        if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
            return f"the connection to {where} broke mid-turn: {detail} (not retried)"
        return f"the request to {where} failed: {detail} (not retried)"


async def _read_some(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """At most ``limit`` bytes of the answer, and whether there was more."""
    body = b""
    async with aclosing(response.aiter_raw()) as chunks:  # type: ignore[type-var]
        async for chunk in chunks:
            body += chunk
            if len(body) > limit:
                break
    return body[:limit], len(body) > limit


def _decoder(charset: str | None) -> _Decoder:
    """UTF-8 unless the answer names a text encoding Python knows (never a crash on a bad one)."""
    try:
        if charset and codecs.lookup(charset)._is_text_encoding:
            return _Decoder(codecs.getincrementaldecoder(charset)(errors="replace"))
    except LookupError:
        pass
    return _Decoder(_utf8())


def _utf8() -> codecs.IncrementalDecoder:
    return codecs.getincrementaldecoder("utf-8")(errors="replace")


class _Decoder:
    """The answer's charset's decoder, until it fails: some of Python's text codecs refuse
    ``errors="replace"`` (``idna``), refuse every input (``undefined``) or raise on bytes they
    cannot take all the same (``punycode``, a UTF-16 stream without its mark). From a failure
    on, the rest is read as UTF-8 (what was decoded before stays)."""

    def __init__(self, decoder: codecs.IncrementalDecoder) -> None:
        self._decoder = decoder

    def decode(self, chunk: bytes, final: bool = False) -> str:
        try:
            return self._decoder.decode(chunk, final)
        except (UnicodeError, ValueError, TypeError):
            self._decoder = _utf8()
            return self._decoder.decode(chunk, final)


def _detail(exc: BaseException, secret: str | None) -> str:
    """The first message along the chain of causes (httpx often wraps an empty one)."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            break
        if text := reason_of(str(seen), secret):
            return text
        seen = seen.__cause__ or seen.__context__
    return type(exc).__name__


def _origin(url: httpx.URL) -> str:
    port = f":{url.port}" if url.port is not None else ""
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{url.scheme}://{host}{port}"


def _shown(text: str) -> str:
    text = one_line(text)
    return f'"{text}"' if len(text) <= 60 else f'"{text[:60]}…"'
