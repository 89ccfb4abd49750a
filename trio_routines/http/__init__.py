"""The HTTP surface: a plain ASGI application over a running :class:`Scheduler`.

Why no framework: the surface is a fixed table of a dozen routes with JSON in and out. A router,
a request object and a JSON codec fit in this small package, while any framework would bring its
own body handling (which we need to control byte by byte for the 64 KiB limit) and, for the
ones that run under Trio at all, an AnyIO layer between hypercorn's Trio worker and our
nursery. A host that already runs a Trio ASGI server mounts :func:`make_app`'s application;
:func:`serve_http` runs it on hypercorn's Trio worker next to the scheduler.

Layout: :mod:`.wire` reads requests into values and writes answers (pure), :mod:`.origin`
checks ``Host`` and ``Origin``, :mod:`.app` holds the gates and the routing, :mod:`.api` one
handler per route (:mod:`.wakeupapi` the wake-up routes'; :mod:`.storecall` bounds a
handler's own call on the store), :mod:`.serving` runs the application on hypercorn. Users
import from ``trio_routines.http`` only.

Theory of operation
-------------------

Every request goes through the same gates, in this order, and each gate may answer and end the
request. Nothing before the last step reads or writes the state store, so a refused request
changes nothing:

1. authorization (``Authorization: Bearer <token>``, constant-time compare) when a token is
   configured, on every path but ``/healthz`` -- before routing, so an anonymous caller
   cannot even learn which paths exist. ``POST /tools/call`` is the one path whose credential
   is another: a turn's ticket, ``Authorization: Ticket <ticket>``
   (:mod:`trio_routines.tickets`; 403 for one that is not valid, and for the operator's call
   without one; anyone else without one hears the 401). ``GET /tools`` takes a valid ticket
   as well as the token. Without a token, :mod:`.origin`
   instead refuses a ``Host`` that is not loopback (421) and, on ``POST``/``DELETE``, an
   ``Origin`` that is not loopback (403): the defence against DNS rebinding and cross-site
   requests;
2. the route (404) and the method (405 with ``Allow``);
3. ``POST /fire`` and ``POST /run`` while the scheduler stops: 503 with ``Retry-After``;
4. the body, for requests that need one: ``Content-Type`` must be JSON (415); a declared
   ``Content-Length`` over 64 KiB is refused unread (413); the body is counted while it
   streams in and refused as soon as it passes 64 KiB (413), so a chunked body that never ends
   costs at most 64 KiB + one chunk; it must have arrived within 10 s of the request (408,
   the connection closed), and a request whose body would make more than half the
   connection cap wait for bodies is refused unread (503); then it must be a UTF-8 JSON
   object (400);
5. the fields: missing or of the wrong type (400); unknown fields of ``POST /fire`` and
   ``POST /run`` are ignored, as the TypeScript agent server's routines scheduler does (the
   routine's own prompt runs, and a newer client can talk to an older server); those of
   ``POST /wakeups`` and ``POST /tools/call`` are a 400 naming them (a misspelt ``until``
   would otherwise be dropped, and what is stored not what was asked);
6. the action. A state fault is 503 with ``Retry-After`` (nothing was claimed or changed,
   unless the store says the change is not confirmed), and so is a store that has not
   answered a handler's call within the scheduler's ``store_timeout`` (a change then is not
   confirmed); anything unexpected is logged and
   answered 500 with a generic message.

Decisions (also in docs/http.md):

* ``POST /fire`` answers 202 once the claim is taken, and the fire goes on in the scheduler's
  nursery; with ``"wait": true`` the request runs the fire and answers 200 once it settled.
* ``GET /healthz`` (liveness) touches nothing; ``GET /readyz`` (readiness) asks the store
  (:meth:`~trio_routines.Store.ready`) within 2 s and answers 503 while stopping. Neither
  needs the token: an orchestrator's probe learns nothing but up or down.
* ``POST /run`` returns the agent's reply text, cut at 64 KiB of UTF-8 with ``truncated``.
* ``POST /run`` waits by default (``"wait"`` defaults to ``true``), as the TypeScript
  scheduler's does: the answer carries the outcome. ``"wait": false`` answers 202 once the
  turn has started in the scheduler's nursery (its session already held, so it cannot turn
  out busy afterwards), or 200 ``ran: false`` when the session is busy right now.
* Prompts never leave: ``GET /routines`` lists names and schedules only, and wake-ups are
  shown without their prompt. The one exception is ``reply`` of ``POST /wakeups``, the
  model-facing text of the ``wake`` tool, which restates the prompt the caller just sent.
* A routine name sent by the caller is echoed back cut to 64 characters.
* ``DELETE /wakeups/{id}`` requires ``?session=``: without it one caller could delete another
  session's wake-up by guessing its id (400). Wake-up ids (128 characters at most) and
  sessions (512) are checked for NUL and length before any store sees them, so every store
  answers the same 400; an id also for control characters (ours are UUIDs), a session not
  (a routine's session holds its name, which may have one).
"""

from __future__ import annotations

from .app import make_app
from .origin import BadToken
from .serving import InsecureBind, NoServer, bind_http, check_bind, serve_http
from .wire import MAX_BODY, ASGIApp

__all__ = [
    "MAX_BODY",
    "ASGIApp",
    "BadToken",
    "InsecureBind",
    "NoServer",
    "bind_http",
    "check_bind",
    "make_app",
    "serve_http",
]
