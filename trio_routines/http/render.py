"""The status page as text: pure functions from a snapshot of the scheduler to HTML and SVG.

Nothing here reads a clock, a store or a request: :mod:`.page` gathers a
:class:`~.views.PageView` and these functions turn it into markup, so every escaping rule is
testable on plain values.
Everything that came from outside -- routine names, cron text, failure reasons, sessions, the
store's label -- goes through :func:`_esc` (HTML-escaped, control characters shown as
``\\xNN``); there is no other way into the markup.

The page works under a strict Content-Security-Policy: no inline script or style, so colours
are CSS classes (``o-completed``, ...) and every outcome also has its own shape and letter, for
readers who cannot tell the colours apart.

What is shown -- the views, the timeline's marks -- is decided in :mod:`.views`; this module
only writes it: a mark's shape and hover title (which says why a missed slot lies in a
recorded gap), a routine's card, the page's sections, the document around them.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from datetime import datetime

from ..history import GAP_WHY
from ..instants import format_iso
from ..records import Fire
from ..text import visible, visible_lines
from .views import Mark, PageView, RoutineView, axis_end, fire_kind

WIDTH, HEIGHT = 480, 28  # the timeline's viewBox

# Outcome -> (letter, word). "running" is a claim without an outcome; "missed" no claim at all.
KINDS: dict[str, tuple[str, str]] = {
    "completed": ("✓", "completed"),
    "failed": ("✗", "failed"),
    "skipped": ("·", "skipped (session busy, or over budget)"),
    "interrupted": ("⊘", "interrupted"),
    "running": ("▶", "running or unsettled"),
    "missed": ("○", "missed (no claim)"),
}


def _esc(text: object) -> str:
    """HTML-escaped, quotes included, with control characters made visible."""
    return html.escape(visible(str(text)), quote=True)


def _esc_lines(text: str) -> str:
    """As :func:`_esc`, keeping line breaks and tabs (a turn's output, shown in ``<pre>``)."""
    return html.escape(visible_lines(text), quote=True)


# -- text ------------------------------------------------------------------------------------


def _time(at: datetime) -> str:
    iso = format_iso(at)
    shown = iso[:16] if at.second == 0 else iso[:19]
    return f'<time datetime="{iso}">{shown.replace("T", " ")}Z</time>'


def _duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    # Chosen by the value as shown: 119,960 ms is 2.0 min, not 120.0 s.
    return f"{seconds:.1f} s" if round(seconds, 1) < 120 else f"{seconds / 60:.1f} min"


def _left(seconds: float) -> str:
    """``in 4 min``: what the page shows before its script updates it every second."""
    if seconds < 0:
        return "due"
    if seconds < 60:
        return "in <1 min"  # the page's script counts the seconds
    if seconds < 3600:
        return f"in {int(seconds // 60)} min"
    if seconds < 48 * 3600:
        hours, minutes = divmod(int(seconds // 60), 60)
        return f"in {hours} h {minutes:02d} min"
    return f"in {int(seconds // 86400)} d"


def describe(mark: Mark) -> str:
    """The hover title of a mark: slot, fired at, lateness, duration, reason."""
    word = KINDS[mark.kind][1]
    if mark.gap is not None:
        word = f"missed ({mark.gap.reason.value}: {GAP_WHY[mark.gap.reason]})"
    parts = [f"slot {format_iso(mark.slot)}", word]
    fire = mark.fire
    if fire is not None:
        late = (fire.fired_at - fire.slot).total_seconds()
        parts.append(f"fired {format_iso(fire.fired_at)}")
        parts.append(f"late {late:.3f} s")
        parts.append(f"took {_duration(fire.ms)}")
        if fire.replica:
            parts.append(f"by {fire.replica}")
        if fire.error:
            parts.append(f"reason: {fire.error}")
    return " — ".join(parts)


def _shape(kind: str, x: float) -> str:
    """One mark's shape: each outcome has its own, so colour is never the only cue."""
    y = HEIGHT / 2
    if kind == "completed":
        return f'<circle cx="{x:.1f}" cy="{y}" r="5"/>'
    if kind == "failed":
        return (
            f'<path d="M{x - 5:.1f} {y - 5}L{x + 5:.1f} {y + 5}M{x - 5:.1f} {y + 5}'
            f'L{x + 5:.1f} {y - 5}"/>'
        )
    if kind == "skipped":
        return f'<rect x="{x - 2:.1f}" y="{y - 2}" width="4" height="4"/>'
    if kind == "interrupted":
        return f'<path d="M{x:.1f} {y - 6}L{x + 6:.1f} {y}L{x:.1f} {y + 6}L{x - 6:.1f} {y}Z"/>'
    if kind == "running":
        return f'<path d="M{x - 4:.1f} {y - 6}L{x + 6:.1f} {y}L{x - 4:.1f} {y + 6}Z"/>'
    return f'<circle cx="{x:.1f}" cy="{y}" r="4" class="hollow"/>'


def timeline_svg(view: RoutineView, now: datetime) -> str:
    span = max((axis_end(now) - view.since).total_seconds(), 1.0)
    label = f"timeline of {view.name} since {format_iso(view.since)[:16]}Z"
    out = [
        f'<svg class="timeline" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'role="img" aria-label="{_esc(label)}">',
        f'<line class="axis" x1="0" y1="{HEIGHT / 2}" x2="{WIDTH}" y2="{HEIGHT / 2}"/>',
    ]
    pad = 7
    for mark in view.marks:
        offset = (mark.slot - view.since).total_seconds() / span
        x = pad + max(0.0, min(1.0, offset)) * (WIDTH - 2 * pad)
        out.append(
            f'<g class="mark o-{mark.kind}"><title>{_esc(describe(mark))}</title>'
            f"{_shape(mark.kind, x)}</g>"
        )
    out.append("</svg>")
    return "".join(out)


def _strip(fires: Iterable[Fire], unread: bool = False) -> str:
    """The last fires, oldest first; with ``unread`` (the history could not be read), none
    is shown as unknown, never as "never fired"."""
    cells = []
    for fire in fires:
        kind = fire_kind(fire)
        title = describe(Mark(fire.slot, kind, fire))
        cells.append(f'<span class="o-{kind}" title="{_esc(title)}">{KINDS[kind][0]}</span>')
    if cells or not unread:
        return "".join(cells) or '<span class="none">never fired</span>'
    return '<span class="none">unknown</span>'


def _schedule(view: RoutineView) -> str:
    if view.cron is None:
        return '<span class="none">on demand</span>'
    text = f"<code>{_esc(view.cron)}</code>"
    if view.resolved and view.resolved != view.cron:
        text += f" = <code>{_esc(view.resolved)}</code>"
    if view.tz:
        text += f' <span class="tz">{_esc(view.tz)}</span>'
    return text


def _next(view: RoutineView, now: datetime) -> str:
    if view.paused:
        return '<span class="paused">paused</span>'
    if view.cron is None:
        return '<span class="none">-</span>'
    if view.next_due is None:
        return '<span class="none">never fires again</span>'
    at = format_iso(view.next_due)
    left = _left((view.next_due - now).total_seconds())
    by = ' <span class="none">(external clock)</span>' if view.external else ""
    return f'{_time(view.next_due)} <span class="left" data-at="{at}">{left}</span>{by}'


def routine_html(view: RoutineView, now: datetime) -> str:
    problem = ""
    if view.problem:
        problem = f'<p class="problem">history unavailable: {_esc(view.problem)}</p>'
    state = "paused" if view.paused else "active"
    return (
        f'<article class="routine {state}">'
        f'<h3 class="name">{_esc(view.name)}</h3>'
        f'<p class="schedule">{_schedule(view)}</p>'
        f'<p class="next">{_next(view, now)}</p>'
        f'<div class="line">{timeline_svg(view, now)}'
        f'<span class="since">since {_time(view.since.replace(second=0, microsecond=0))}'
        "</span></div>"
        '<p class="strip" aria-label="last fires, oldest first">'
        f"{_strip(view.recent, bool(view.problem))}</p>"
        f"{_spent(view)}{_last_output(view)}{problem}</article>"
    )


def _spent(view: RoutineView) -> str:
    """What the routine's turns spent in the last 24 hours, and its budget's state."""
    parts = []
    if view.spent:
        parts.append(f"spent in the last 24 h: {_esc(view.spent)}")
    if view.over_budget:
        parts.append(f'<span class="over-budget">{_esc(view.budget)}</span>')
    elif view.budget:
        parts.append(f'<span class="budget">budget {_esc(view.budget)}</span>')
    return f'<p class="spent">{" — ".join(parts)}</p>' if parts else ""


def _over_budget(reason: str) -> str:
    return f' · <span class="over-budget">{_esc(reason)}</span>' if reason else ""


def _last_output(view: RoutineView) -> str:
    """The newest kept output, folded away (a click opens it): it may be long, or private."""
    fire = next((f for f in reversed(view.recent) if f.output is not None), None)
    if fire is None or fire.output is None:
        return ""
    slot = format_iso(fire.slot)
    return (
        f'<details class="output" data-key="{_esc(view.name)} {slot}">'
        f"<summary>output of {_time(fire.slot)}</summary>"
        f"<pre>{_esc_lines(fire.output)}</pre></details>"
    )


def _legend() -> str:
    items = "".join(
        f'<li><svg viewBox="0 0 14 {HEIGHT}" class="key" aria-hidden="true">'
        f'<g class="mark o-{kind}">{_shape(kind, 7)}</g></svg>'
        f'<span class="o-{kind}">{letter}</span> {_esc(word)}</li>'
        for kind, (letter, word) in KINDS.items()
    )
    return f'<ul class="legend">{items}</ul>'


def main_html(view: PageView) -> str:
    """Everything inside ``<main>``: what a refresh replaces."""
    now = view.now
    routines = "".join(routine_html(r, now) for r in view.routines)
    if not routines:
        routines = '<p class="none">no routines loaded</p>'
    flights = "".join(
        f"<li><code>{_esc(f.session)}</code> running since {_time(f.started)} "
        f'<span class="elapsed" data-at="{format_iso(f.started)}"></span></li>'
        for f in view.in_flight
    )
    wakes = "".join(
        f"<li><code>{_esc(w.session)}</code>: {w.count} pending, next {_time(w.next_at)}"
        f"{' · asked by ' if w.origins else ''}"
        f"{', '.join(f'{_esc(label)} ×{n}' for label, n in w.origins)}"
        f"{f' · chain depth up to {w.deepest}' if w.deepest else ''}"
        f"{f' · spent in the last 24 h: {_esc(w.spent)}' if w.spent else ''}"
        f"{_over_budget(w.over_budget)}"
        f"{f' · recurring until {_time(w.until)}' if w.until is not None else ''}</li>"
        for w in view.wakeups
    )
    sessions, left = view.wakeups_left_out
    if sessions:
        wakes += (
            f'<li class="more">and {sessions} more session{"s" * (sessions != 1)} '
            f"({left} wake-up{'s' * (left != 1)}), due later: <code>list</code> shows "
            "them all</li>"
        )
    if view.wakeups_problem:
        wakes = f'<li class="problem">unavailable: {_esc(view.wakeups_problem)}</li>'
    members = "".join(
        f"<li><code>{_esc(m.id)}</code> {_esc(m.version)} · up since {_time(m.started)} · "
        f"seen {_time(m.last_seen)} · {m.in_flight} in flight</li>"
        for m in view.replicas
    )
    if view.replicas_problem:
        members = f'<li class="problem">unavailable: {_esc(view.replicas_problem)}</li>'
    status = "stopping" if view.stopping else "running"
    broken = ""
    if view.broken_files:
        names = ", ".join(f"<code>{_esc(name)}</code>" for name in view.broken_files)
        broken = (
            f'<p class="problem">{len(view.broken_files)} routine file(s) the last reload '
            f"could not load: {names} (skipped, or the version loaded before kept; the log "
            "says why, and the next start refuses them)</p>"
        )
    return (
        f'<p class="meta">store <code>{_esc(view.store)}</code> · scheduler {status} · '
        f"clock jumps seen {view.clock_jumps}</p>{broken}"
        f'<section aria-labelledby="h-routines"><h2 id="h-routines">Routines</h2>'
        f"{_legend()}{routines}</section>"
        f'<section aria-labelledby="h-flight"><h2 id="h-flight">In flight</h2>'
        f'<ul class="flights">{flights or "<li class=none>none</li>"}</ul></section>'
        f'<section aria-labelledby="h-wake"><h2 id="h-wake">Pending wake-ups</h2>'
        f'<ul class="wakeups">{wakes or "<li class=none>none</li>"}</ul></section>'
        f'<section aria-labelledby="h-replicas"><h2 id="h-replicas">Replicas</h2>'
        f'<ul class="replicas">{members or "<li class=none>none</li>"}</ul></section>'
    )


def _document(title: str, body: str, *, base: str, now: datetime, poll: float | None = None) -> str:
    """A whole page; ``base`` is the mount point with a final ``/`` (``/`` when unmounted)."""
    data = f' data-base="{_esc(base)}"'
    if poll is not None:
        data += f' data-poll="{poll:g}" data-now="{format_iso(now)}"'
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="color-scheme" content="light dark">'
        f"<title>{_esc(title)}</title>"
        f'<link rel="icon" href="{_esc(base)}ui/icon.svg" type="image/svg+xml">'
        f'<link rel="stylesheet" href="{_esc(base)}ui/page.css">'
        f'<script src="{_esc(base)}ui/page.js" defer></script></head>'
        f"<body{data}><header><h1>trio_routines</h1></header>{body}</body></html>"
    )


def page_html(view: PageView, base: str) -> str:
    return _document(
        "trio_routines status",
        f'<main id="main" aria-live="polite">{main_html(view)}</main>',
        base=base,
        poll=view.poll,
        now=view.now,
    )


def login_html(now: datetime, base: str, *, wrong: bool) -> str:
    note = '<p class="problem" role="alert">wrong token</p>' if wrong else ""
    form = (
        f'<main><form class="login" method="post" action="{_esc(base)}ui/login">'
        '<label for="token">Token (<code>TRIO_ROUTINES_TOKEN</code>)</label>'
        '<input id="token" name="token" type="password" autocomplete="current-password" '
        'required autofocus><button type="submit">Sign in</button>'
        f"{note}</form></main>"
    )
    return _document("trio_routines: sign in", form, base=base, now=now)
