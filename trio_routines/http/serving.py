"""Serving the application on hypercorn's Trio worker, next to the scheduler."""

from __future__ import annotations

import importlib.util
import logging
import socket
from functools import partial
from typing import TYPE_CHECKING, cast

import trio

from ..errors import TrioRoutinesError
from ..scheduler import Scheduler
from .app import BODY_TIMEOUT, make_app
from .connections import (
    Gate,
    connection_cap,
    descriptor_limit,
    open_descriptors,
    serve_connections,
)
from .origin import check_token, is_loopback

if TYPE_CHECKING:
    from hypercorn.typing import ASGIFramework

log = logging.getLogger("trio_routines.http")
BACKLOG = 100  # connections the kernel queues before we accept them


class InsecureBind(TrioRoutinesError, ValueError):
    """Raised by :func:`check_bind` (and so :func:`serve_http`) for a non-loopback address
    without a token: the HTTP surface can fire turns with the agent's full authority."""


class NoServer(TrioRoutinesError, ImportError):
    """Raised by :func:`check_bind` (and so :func:`serve_http`) when hypercorn, the server
    of the ``http`` extra, is not installed: said before anything is bound or started."""


def check_bind(host: str, token: str | None, name: str = "the token") -> None:
    """Refuse to serve without the ``http`` extra's server (:class:`NoServer`), with a token
    no client can send (:class:`BadToken`), or on a non-loopback ``host`` without a token
    (:class:`InsecureBind`). ``name``: where the token comes from, as the refusals say it
    (``TRIO_ROUTINES_TOKEN`` for the command line)."""
    if importlib.util.find_spec("hypercorn") is None:
        raise NoServer('the HTTP surface needs hypercorn: pip install "trio-routines[http]"')
    check_token(token, name)
    if not token and not is_loopback(host):
        how = "give a token" if name == "the token" else f"set {name}"
        raise InsecureBind(
            f"refusing to serve HTTP on {host or '(all interfaces)'} without a token — "
            f"{how}, or bind 127.0.0.1"
        )


def bind_http(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``, bound now: ``serve`` binds before it touches the
    store, so a taken address fails at once and changes nothing. Raises OSError."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except BaseException:
        sock.close()
        raise
    return sock


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
    sock: socket.socket | None = None,
    max_connections: int | None = None,
    body_timeout: float = BODY_TIMEOUT,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve :func:`make_app` with hypercorn's Trio worker until the scheduler has stopped.

    ``nursery.start(serve_http, scheduler, host, 0)`` returns the port actually bound.
    Raises :class:`InsecureBind` before binding anything when ``host`` is not loopback and
    there is no token. ``sock``: a socket :func:`bind_http` bound already (taken over). At
    most ``max_connections`` connections are open at once (default: half of the descriptors
    ``RLIMIT_NOFILE`` leaves free when it starts, the rest kept for the store and the
    agent); the next one gets a 503
    and is closed. At most half of them may be sending a request body, which must arrive
    within ``body_timeout`` seconds.
    """
    from hypercorn.config import Config

    check_bind(host, token)
    if max_connections is None:
        # What RLIMIT_NOFILE leaves free now: the store (its holds' files) has joined.
        descriptors: int | None = max(0, descriptor_limit() - open_descriptors())
        cap = connection_cap(descriptors or 0)
    else:
        descriptors, cap = None, max(1, max_connections)
    config = Config()
    if sock is not None:
        config.bind = [f"fd://{sock.detach()}"]
    else:
        config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.backlog = BACKLOG
    config.accesslog = None
    config.errorlog = log
    config.include_server_header = False
    # Requests waiting for a fire get the stop's grace to hear how it ended.
    config.graceful_timeout = scheduler.default_grace + 2.0
    app = cast(
        "ASGIFramework",
        make_app(scheduler, token=token, body_timeout=body_timeout, body_readers=max(1, cap // 2)),
    )
    gate = Gate(cap, descriptors)
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(
            serve_connections, app, config, gate, partial(_drained, scheduler)
        )
        bound = int(binds[0].rsplit(":", 1)[1])
        log.info("HTTP surface on %s (at most %d connections open)", binds[0], cap)
        task_status.started(bound)
