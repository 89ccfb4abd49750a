"""The status page's markup pinned whole (:mod:`trio_routines.http.render`), and the edges of
a timeline's marks (:mod:`trio_routines.http.views`).

The expected strings are the renderer's output for views that take every branch: each
routine state, every outcome's shape on the timeline and in the legend, marks outside the span,
every part of a pending wake-up's line, the problems in place of a section, the document around
it all and the sign-in form. Outside text in them is hostile enough to show its escaping.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import attrs
import pytest

from trio_routines.http.render import (
    _duration,
    _left,
    _time,
    login_html,
    main_html,
    page_html,
    routine_html,
    timeline_svg,
)
from trio_routines.http.views import (
    SETTLING,
    InFlight,
    Mark,
    PageView,
    RoutineView,
    WakeupGroup,
    axis_end,
    timeline,
)
from trio_routines.records import Fire, Gap, GapReason, Outcome
from trio_routines.replicas import ReplicaInfo

NOW = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)
SINCE = NOW - timedelta(hours=2, seconds=15, microseconds=250_000)  # the caption drops them
SLOT = datetime(2026, 11, 30, 11, 0, tzinfo=UTC)

DONE = Fire(
    slot=SLOT,
    fired_at=SLOT + timedelta(seconds=1, milliseconds=500),
    outcome=Outcome.COMPLETED,
    ms=2500,
    replica="r<1>",
    output="line one\n\tline <two>",
)
FAILED = Fire(
    slot=SLOT + timedelta(minutes=30),
    fired_at=SLOT + timedelta(minutes=30, milliseconds=5),
    outcome=Outcome.FAILED,
    ms=999,
    error="exit status 2 & <more>",
)
UNSETTLED = Fire(slot=SLOT + timedelta(minutes=40), fired_at=SLOT + timedelta(minutes=40))
GAP = Gap(SLOT - timedelta(minutes=30), SLOT - timedelta(minutes=30), 1, GapReason.OVERLAP)


def full_view() -> RoutineView:
    """Every part of a routine's card, and every outcome's shape on its timeline."""
    return RoutineView(
        name="digest<b>",
        cron="H 9 * * *",
        tz="Europe/<Berlin>",
        resolved="17 9 * * *",
        next_due=NOW + timedelta(minutes=4, seconds=10),
        paused=False,
        marks=(
            Mark(SINCE - timedelta(hours=1), "missed"),  # before the span: drawn at its start
            Mark(SLOT - timedelta(minutes=30), "missed", gap=GAP),
            Mark(SLOT, "completed", DONE),
            Mark(SLOT + timedelta(minutes=10), "skipped"),
            Mark(SLOT + timedelta(minutes=20), "interrupted"),
            Mark(SLOT + timedelta(minutes=30), "failed", FAILED),
            Mark(NOW + timedelta(hours=1), "running"),  # after the span: drawn at its end
        ),
        recent=(DONE, FAILED, UNSETTLED),
        since=SINCE,
        problem="store <down>",
        external=True,
        spent="1.5k in & out",
        budget="10k <tokens>",
    )


def bare_view(**changes: object) -> RoutineView:
    base = RoutineView(
        name="on-demand",
        cron=None,
        tz=None,
        resolved=None,
        next_due=None,
        paused=False,
        marks=(),
        recent=(),
        since=NOW - timedelta(hours=24),
    )
    return attrs.evolve(base, **changes)


def replica(name: str, in_flight: int) -> ReplicaInfo:
    return ReplicaInfo(
        id=name,
        version="1.<2>",
        host="h",
        pid=7,
        started=NOW - timedelta(hours=1, seconds=5),
        last_seen=NOW - timedelta(seconds=3),
        in_flight=in_flight,
    )


def full_page() -> PageView:
    return PageView(
        now=NOW,
        routines=(full_view(), bare_view(over_budget=True, budget="over: 11k of 10k <tokens>")),
        in_flight=(
            InFlight("chat<1>", NOW - timedelta(seconds=20)),
            InFlight("other", NOW - timedelta(minutes=3)),
        ),
        wakeups=(
            WakeupGroup(
                "chat<1>",
                3,
                NOW + timedelta(minutes=5),
                origins=(("routine <x>", 2), ("http", 1)),
                deepest=4,
                over_budget="spent <all>",
                until=NOW + timedelta(days=2),
                spent="2k & more",
            ),
            WakeupGroup("quiet", 1, NOW + timedelta(hours=1, seconds=7)),
        ),
        clock_jumps=2,
        store="directory </code>",
        stopping=False,
        poll=5.0,
        replicas=(replica("a<1>", 2), replica("b", 0)),
    )


def empty_page() -> PageView:
    page = attrs.evolve(problem_page(), wakeups=(), replicas=())
    return attrs.evolve(page, wakeups_problem=None, replicas_problem=None)


def problem_page() -> PageView:
    return PageView(
        now=NOW,
        routines=(),
        in_flight=(),
        wakeups=(WakeupGroup("hidden", 1, NOW),),
        clock_jumps=0,
        store="memory",
        stopping=True,
        poll=0.25,
        wakeups_problem="wake-ups <stalled>",
        replicas=(replica("hidden", 0),),
        replicas_problem="replicas & <gone>",
    )


# -- the expected markup, whole ---------------------------------------------------------

FULL_ROUTINE = (
    '<article class="routine active"><h3 class="name">digest&lt;b&gt;</h3><'
    'p class="schedule"><code>H 9 * * *</code> = <code>17 9 * * *</code> <s'
    'pan class="tz">Europe/&lt;Berlin&gt;</span></p><p class="next"><time d'
    'atetime="2026-11-30T12:04:40.000Z">2026-11-30 12:04:40Z</time> <span c'
    'lass="left" data-at="2026-11-30T12:04:40.000Z">in 4 min</span> <span c'
    'lass="none">(external clock)</span></p><div class="line"><svg class="t'
    'imeline" viewBox="0 0 480 28" role="img" aria-label="timeline of diges'
    't&lt;b&gt; since 2026-11-30T10:00Z"><line class="axis" x1="0" y1="14.0'
    '" x2="480" y2="14.0"/><g class="mark o-missed"><title>slot 2026-11-30T'
    '09:00:14.750Z — missed (no claim)</title><circle cx="7.0" cy="14.0" r='
    '"4" class="hollow"/></g><g class="mark o-missed"><title>slot 2026-11-3'
    "0T10:30:00.000Z — missed (overlap: the previous turn was still running"
    ')</title><circle cx="121.8" cy="14.0" r="4" class="hollow"/></g><g cla'
    'ss="mark o-completed"><title>slot 2026-11-30T11:00:00.000Z — completed'
    " — fired 2026-11-30T11:00:01.500Z — late 1.500 s — took 2.5 s — by r&l"
    't;1&gt;</title><circle cx="237.6" cy="14.0" r="5"/></g><g class="mark '
    'o-skipped"><title>slot 2026-11-30T11:10:00.000Z — skipped (session bus'
    'y, or over budget)</title><rect x="274.2" y="12.0" width="4" height="4"/></g><g class='
    '"mark o-interrupted"><title>slot 2026-11-30T11:20:00.000Z — interrupte'
    'd</title><path d="M314.8 8.0L320.8 14.0L314.8 20.0L308.8 14.0Z"/></g><'
    'g class="mark o-failed"><title>slot 2026-11-30T11:30:00.000Z — failed '
    "— fired 2026-11-30T11:30:00.005Z — late 0.005 s — took 999 ms — reason"
    ': exit status 2 &amp; &lt;more&gt;</title><path d="M348.4 9.0L358.4 19'
    '.0M348.4 19.0L358.4 9.0"/></g><g class="mark o-running"><title>slot 20'
    '26-11-30T13:00:30.000Z — running or unsettled</title><path d="M469.0 8'
    '.0L479.0 14.0L469.0 20.0Z"/></g></svg><span class="since">since <time '
    'datetime="2026-11-30T10:00:00.000Z">2026-11-30 10:00Z</time></span></d'
    'iv><p class="strip" aria-label="last fires, oldest first"><span class='
    '"o-completed" title="slot 2026-11-30T11:00:00.000Z — completed — fired'
    ' 2026-11-30T11:00:01.500Z — late 1.500 s — took 2.5 s — by r&lt;1&gt;"'
    '>✓</span><span class="o-failed" title="slot 2026-11-30T11:30:00.000Z —'
    " failed — fired 2026-11-30T11:30:00.005Z — late 0.005 s — took 999 ms "
    '— reason: exit status 2 &amp; &lt;more&gt;">✗</span><span class="o-run'
    'ning" title="slot 2026-11-30T11:40:00.000Z — running or unsettled — fi'
    'red 2026-11-30T11:40:00.000Z — late 0.000 s — took -">▶</span></p><p c'
    'lass="spent">spent in the last 24 h: 1.5k in &amp; out — <span class="'
    'budget">budget 10k &lt;tokens&gt;</span></p><details class="output" da'
    'ta-key="digest&lt;b&gt; 2026-11-30T11:00:00.000Z"><summary>output of <'
    'time datetime="2026-11-30T11:00:00.000Z">2026-11-30 11:00Z</time></sum'
    "mary><pre>line one\n"
    '\tline &lt;two&gt;</pre></details><p class="problem">history unavailabl'
    "e: store &lt;down&gt;</p></article>"
)

PAUSED_ROUTINE = (
    '<article class="routine paused"><h3 class="name">digest&lt;b&gt;</h3><'
    'p class="schedule"><code>H 9 * * *</code></p><p class="next"><span cla'
    'ss="paused">paused</span></p><div class="line"><svg class="timeline" v'
    'iewBox="0 0 480 28" role="img" aria-label="timeline of digest&lt;b&gt;'
    ' since 2026-11-30T10:00Z"><line class="axis" x1="0" y1="14.0" x2="480"'
    ' y2="14.0"/></svg><span class="since">since <time datetime="2026-11-30'
    'T10:00:00.000Z">2026-11-30 10:00Z</time></span></div><p class="strip" '
    'aria-label="last fires, oldest first"><span class="none">never fired</'
    "span></p></article>"
)

ON_DEMAND_OVER_BUDGET = (
    '<article class="routine active"><h3 class="name">on-demand</h3><p clas'
    's="schedule"><span class="none">on demand</span></p><p class="next"><s'
    'pan class="none">-</span></p><div class="line"><svg class="timeline" v'
    'iewBox="0 0 480 28" role="img" aria-label="timeline of on-demand since'
    ' 2026-11-29T12:00Z"><line class="axis" x1="0" y1="14.0" x2="480" y2="1'
    '4.0"/></svg><span class="since">since <time datetime="2026-11-29T12:00'
    ':00.000Z">2026-11-29 12:00Z</time></span></div><p class="strip" aria-l'
    'abel="last fires, oldest first"><span class="none">never fired</span><'
    '/p><p class="spent">spent in the last 24 h: 5 &amp; 6 — <span class="o'
    'ver-budget">over &lt;10k&gt;</span></p></article>'
)

NEVER_AGAIN = (
    '<article class="routine active"><h3 class="name">on-demand</h3><p clas'
    's="schedule"><code>0 0 30 2 *</code></p><p class="next"><span class="n'
    'one">never fires again</span></p><div class="line"><svg class="timelin'
    'e" viewBox="0 0 480 28" role="img" aria-label="timeline of on-demand s'
    'ince 2026-11-29T12:00Z"><line class="axis" x1="0" y1="14.0" x2="480" y'
    '2="14.0"/></svg><span class="since">since <time datetime="2026-11-29T1'
    '2:00:00.000Z">2026-11-29 12:00Z</time></span></div><p class="strip" ar'
    'ia-label="last fires, oldest first"><span class="o-running" title="slo'
    "t 2026-11-30T11:40:00.000Z — running or unsettled — fired 2026-11-30T1"
    '1:40:00.000Z — late 0.000 s — took -">▶</span></p></article>'
)

DUE_ROUTINE = (
    '<article class="routine active"><h3 class="name">on-demand</h3><p clas'
    's="schedule"><code>* * * * *</code></p><p class="next"><time datetime='
    '"2026-11-30T12:01:00.000Z">2026-11-30 12:01Z</time> <span class="left"'
    ' data-at="2026-11-30T12:01:00.000Z">in <1 min</span></p><div class="li'
    'ne"><svg class="timeline" viewBox="0 0 480 28" role="img" aria-label="'
    'timeline of on-demand since 2026-11-29T12:00Z"><line class="axis" x1="'
    '0" y1="14.0" x2="480" y2="14.0"/></svg><span class="since">since <time'
    ' datetime="2026-11-29T12:00:00.000Z">2026-11-29 12:00Z</time></span></'
    'div><p class="strip" aria-label="last fires, oldest first"><span class'
    '="none">never fired</span></p></article>'
)

# What an empty page and a page whose wake-ups are unavailable share: the meta line, the
# legend, no routines, nothing in flight and the wake-ups heading.
_NO_ROUTINES_HEAD = (
    '<p class="meta">store <code>memory</code> · scheduler stopping · clock'
    ' jumps seen 0</p><section aria-labelledby="h-routines"><h2 id="h-routi'
    'nes">Routines</h2><ul class="legend"><li><svg viewBox="0 0 14 28" clas'
    's="key" aria-hidden="true"><g class="mark o-completed"><circle cx="7.0'
    '" cy="14.0" r="5"/></g></svg><span class="o-completed">✓</span> comple'
    'ted</li><li><svg viewBox="0 0 14 28" class="key" aria-hidden="true"><g'
    ' class="mark o-failed"><path d="M2.0 9.0L12.0 19.0M2.0 19.0L12.0 9.0"/'
    '></g></svg><span class="o-failed">✗</span> failed</li><li><svg viewBox'
    '="0 0 14 28" class="key" aria-hidden="true"><g class="mark o-skipped">'
    '<rect x="5.0" y="12.0" width="4" height="4"/></g></svg><span class="o-'
    'skipped">·</span> skipped (session busy, or over budget)</li><li><svg viewBox="0 0 14 '
    '28" class="key" aria-hidden="true"><g class="mark o-interrupted"><path'
    ' d="M7.0 8.0L13.0 14.0L7.0 20.0L1.0 14.0Z"/></g></svg><span class="o-i'
    'nterrupted">⊘</span> interrupted</li><li><svg viewBox="0 0 14 28" clas'
    's="key" aria-hidden="true"><g class="mark o-running"><path d="M3.0 8.0'
    'L13.0 14.0L3.0 20.0Z"/></g></svg><span class="o-running">▶</span> runn'
    'ing or unsettled</li><li><svg viewBox="0 0 14 28" class="key" aria-hid'
    'den="true"><g class="mark o-missed"><circle cx="7.0" cy="14.0" r="4" c'
    'lass="hollow"/></g></svg><span class="o-missed">○</span> missed (no cl'
    'aim)</li></ul><p class="none">no routines loaded</p></section><section'
    ' aria-labelledby="h-flight"><h2 id="h-flight">In flight</h2><ul class='
    '"flights"><li class=none>none</li></ul></section><section aria-labelle'
    'dby="h-wake"><h2 id="h-wake">Pending wake-ups</h2><ul class="wakeups">'
)


EMPTY_MAIN = _NO_ROUTINES_HEAD + (
    '<li class=none>none</li></ul></section><section aria-labelledby="h-rep'
    'licas"><h2 id="h-replicas">Replicas</h2><ul class="replicas"><li class'
    "=none>none</li></ul></section>"
)

FULL_MAIN = (
    '<p class="meta">store <code>directory &lt;/code&gt;</code> · scheduler'
    ' running · clock jumps seen 2</p><section aria-labelledby="h-routines"'
    '><h2 id="h-routines">Routines</h2><ul class="legend"><li><svg viewBox='
    '"0 0 14 28" class="key" aria-hidden="true"><g class="mark o-completed"'
    '><circle cx="7.0" cy="14.0" r="5"/></g></svg><span class="o-completed"'
    '>✓</span> completed</li><li><svg viewBox="0 0 14 28" class="key" aria-'
    'hidden="true"><g class="mark o-failed"><path d="M2.0 9.0L12.0 19.0M2.0'
    ' 19.0L12.0 9.0"/></g></svg><span class="o-failed">✗</span> failed</li>'
    '<li><svg viewBox="0 0 14 28" class="key" aria-hidden="true"><g class="'
    'mark o-skipped"><rect x="5.0" y="12.0" width="4" height="4"/></g></svg'
    '><span class="o-skipped">·</span> skipped (session busy, or over budget)</li><li><svg '
    'viewBox="0 0 14 28" class="key" aria-hidden="true"><g class="mark o-in'
    'terrupted"><path d="M7.0 8.0L13.0 14.0L7.0 20.0L1.0 14.0Z"/></g></svg>'
    '<span class="o-interrupted">⊘</span> interrupted</li><li><svg viewBox='
    '"0 0 14 28" class="key" aria-hidden="true"><g class="mark o-running"><'
    'path d="M3.0 8.0L13.0 14.0L3.0 20.0Z"/></g></svg><span class="o-runnin'
    'g">▶</span> running or unsettled</li><li><svg viewBox="0 0 14 28" clas'
    's="key" aria-hidden="true"><g class="mark o-missed"><circle cx="7.0" c'
    'y="14.0" r="4" class="hollow"/></g></svg><span class="o-missed">○</spa'
    'n> missed (no claim)</li></ul><article class="routine active"><h3 clas'
    's="name">digest&lt;b&gt;</h3><p class="schedule"><code>H 9 * * *</code'
    '> = <code>17 9 * * *</code> <span class="tz">Europe/&lt;Berlin&gt;</sp'
    'an></p><p class="next"><time datetime="2026-11-30T12:04:40.000Z">2026-'
    '11-30 12:04:40Z</time> <span class="left" data-at="2026-11-30T12:04:40'
    '.000Z">in 4 min</span> <span class="none">(external clock)</span></p><'
    'div class="line"><svg class="timeline" viewBox="0 0 480 28" role="img"'
    ' aria-label="timeline of digest&lt;b&gt; since 2026-11-30T10:00Z"><lin'
    'e class="axis" x1="0" y1="14.0" x2="480" y2="14.0"/><g class="mark o-m'
    'issed"><title>slot 2026-11-30T09:00:14.750Z — missed (no claim)</title'
    '><circle cx="7.0" cy="14.0" r="4" class="hollow"/></g><g class="mark o'
    '-missed"><title>slot 2026-11-30T10:30:00.000Z — missed (overlap: the p'
    'revious turn was still running)</title><circle cx="121.8" cy="14.0" r='
    '"4" class="hollow"/></g><g class="mark o-completed"><title>slot 2026-1'
    "1-30T11:00:00.000Z — completed — fired 2026-11-30T11:00:01.500Z — late"
    ' 1.500 s — took 2.5 s — by r&lt;1&gt;</title><circle cx="237.6" cy="14'
    '.0" r="5"/></g><g class="mark o-skipped"><title>slot 2026-11-30T11:10:'
    '00.000Z — skipped (session busy, or over budget)</title><rect x="274.2" y="12.0" width'
    '="4" height="4"/></g><g class="mark o-interrupted"><title>slot 2026-11'
    '-30T11:20:00.000Z — interrupted</title><path d="M314.8 8.0L320.8 14.0L'
    '314.8 20.0L308.8 14.0Z"/></g><g class="mark o-failed"><title>slot 2026'
    "-11-30T11:30:00.000Z — failed — fired 2026-11-30T11:30:00.005Z — late "
    "0.005 s — took 999 ms — reason: exit status 2 &amp; &lt;more&gt;</titl"
    'e><path d="M348.4 9.0L358.4 19.0M348.4 19.0L358.4 9.0"/></g><g class="'
    'mark o-running"><title>slot 2026-11-30T13:00:30.000Z — running or unse'
    'ttled</title><path d="M469.0 8.0L479.0 14.0L469.0 20.0Z"/></g></svg><s'
    'pan class="since">since <time datetime="2026-11-30T10:00:00.000Z">2026'
    '-11-30 10:00Z</time></span></div><p class="strip" aria-label="last fir'
    'es, oldest first"><span class="o-completed" title="slot 2026-11-30T11:'
    "00:00.000Z — completed — fired 2026-11-30T11:00:01.500Z — late 1.500 s"
    ' — took 2.5 s — by r&lt;1&gt;">✓</span><span class="o-failed" title="s'
    "lot 2026-11-30T11:30:00.000Z — failed — fired 2026-11-30T11:30:00.005Z"
    " — late 0.005 s — took 999 ms — reason: exit status 2 &amp; &lt;more&g"
    't;">✗</span><span class="o-running" title="slot 2026-11-30T11:40:00.00'
    "0Z — running or unsettled — fired 2026-11-30T11:40:00.000Z — late 0.00"
    '0 s — took -">▶</span></p><p class="spent">spent in the last 24 h: 1.5'
    'k in &amp; out — <span class="budget">budget 10k &lt;tokens&gt;</span>'
    '</p><details class="output" data-key="digest&lt;b&gt; 2026-11-30T11:00'
    ':00.000Z"><summary>output of <time datetime="2026-11-30T11:00:00.000Z"'
    ">2026-11-30 11:00Z</time></summary><pre>line one\n"
    '\tline &lt;two&gt;</pre></details><p class="problem">history unavailabl'
    'e: store &lt;down&gt;</p></article><article class="routine active"><h3'
    ' class="name">on-demand</h3><p class="schedule"><span class="none">on '
    'demand</span></p><p class="next"><span class="none">-</span></p><div c'
    'lass="line"><svg class="timeline" viewBox="0 0 480 28" role="img" aria'
    '-label="timeline of on-demand since 2026-11-29T12:00Z"><line class="ax'
    'is" x1="0" y1="14.0" x2="480" y2="14.0"/></svg><span class="since">sin'
    'ce <time datetime="2026-11-29T12:00:00.000Z">2026-11-29 12:00Z</time><'
    '/span></div><p class="strip" aria-label="last fires, oldest first"><sp'
    'an class="none">never fired</span></p><p class="spent"><span class="ov'
    'er-budget">over: 11k of 10k &lt;tokens&gt;</span></p></article></secti'
    'on><section aria-labelledby="h-flight"><h2 id="h-flight">In flight</h2'
    '><ul class="flights"><li><code>chat&lt;1&gt;</code> running since <tim'
    'e datetime="2026-11-30T12:00:10.000Z">2026-11-30 12:00:10Z</time> <spa'
    'n class="elapsed" data-at="2026-11-30T12:00:10.000Z"></span></li><li><'
    'code>other</code> running since <time datetime="2026-11-30T11:57:30.00'
    '0Z">2026-11-30 11:57:30Z</time> <span class="elapsed" data-at="2026-11'
    '-30T11:57:30.000Z"></span></li></ul></section><section aria-labelledby'
    '="h-wake"><h2 id="h-wake">Pending wake-ups</h2><ul class="wakeups"><li'
    '><code>chat&lt;1&gt;</code>: 3 pending, next <time datetime="2026-11-3'
    '0T12:05:30.000Z">2026-11-30 12:05:30Z</time> · asked by routine &lt;x&'
    "gt; ×2, http ×1 · chain depth up to 4 · spent in the last 24 h: 2k &am"
    'p; more · <span class="over-budget">spent &lt;all&gt;</span> · recurri'
    'ng until <time datetime="2026-12-02T12:00:30.000Z">2026-12-02 12:00:30'
    'Z</time></li><li><code>quiet</code>: 1 pending, next <time datetime="2'
    '026-11-30T13:00:37.000Z">2026-11-30 13:00:37Z</time></li></ul></sectio'
    'n><section aria-labelledby="h-replicas"><h2 id="h-replicas">Replicas</'
    'h2><ul class="replicas"><li><code>a&lt;1&gt;</code> 1.&lt;2&gt; · up s'
    'ince <time datetime="2026-11-30T11:00:25.000Z">2026-11-30 11:00:25Z</t'
    'ime> · seen <time datetime="2026-11-30T12:00:27.000Z">2026-11-30 12:00'
    ":27Z</time> · 2 in flight</li><li><code>b</code> 1.&lt;2&gt; · up sinc"
    'e <time datetime="2026-11-30T11:00:25.000Z">2026-11-30 11:00:25Z</time'
    '> · seen <time datetime="2026-11-30T12:00:27.000Z">2026-11-30 12:00:27'
    "Z</time> · 0 in flight</li></ul></section>"
)

PROBLEM_MAIN = _NO_ROUTINES_HEAD + (
    '<li class="problem">unavailable: wake-ups &lt;stalled&gt;</li></ul></s'
    'ection><section aria-labelledby="h-replicas"><h2 id="h-replicas">Repli'
    'cas</h2><ul class="replicas"><li class="problem">unavailable: replicas'
    " &amp; &lt;gone&gt;</li></ul></section>"
)

PAGE = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name='
    '"viewport" content="width=device-width, initial-scale=1"><meta name="c'
    'olor-scheme" content="light dark"><title>trio_routines status</title><'
    'link rel="icon" href="/m&lt;x&gt;/ui/icon.svg" type="image/svg+xml"><l'
    'ink rel="stylesheet" href="/m&lt;x&gt;/ui/page.css"><script src="/m&lt'
    ';x&gt;/ui/page.js" defer></script></head><body data-base="/m&lt;x&gt;/'
    '" data-poll="0.25" data-now="2026-11-30T12:00:30.000Z"><header><h1>tri'
    'o_routines</h1></header><main id="main" aria-live="polite"><p class="m'
    'eta">store <code>memory</code> · scheduler stopping · clock jumps seen'
    ' 0</p><section aria-labelledby="h-routines"><h2 id="h-routines">Routin'
    'es</h2><ul class="legend"><li><svg viewBox="0 0 14 28" class="key" ari'
    'a-hidden="true"><g class="mark o-completed"><circle cx="7.0" cy="14.0"'
    ' r="5"/></g></svg><span class="o-completed">✓</span> completed</li><li'
    '><svg viewBox="0 0 14 28" class="key" aria-hidden="true"><g class="mar'
    'k o-failed"><path d="M2.0 9.0L12.0 19.0M2.0 19.0L12.0 9.0"/></g></svg>'
    '<span class="o-failed">✗</span> failed</li><li><svg viewBox="0 0 14 28'
    '" class="key" aria-hidden="true"><g class="mark o-skipped"><rect x="5.'
    '0" y="12.0" width="4" height="4"/></g></svg><span class="o-skipped">·<'
    '/span> skipped (session busy, or over budget)</li><li><svg viewBox="0 0 14 28" class="'
    'key" aria-hidden="true"><g class="mark o-interrupted"><path d="M7.0 8.'
    '0L13.0 14.0L7.0 20.0L1.0 14.0Z"/></g></svg><span class="o-interrupted"'
    '>⊘</span> interrupted</li><li><svg viewBox="0 0 14 28" class="key" ari'
    'a-hidden="true"><g class="mark o-running"><path d="M3.0 8.0L13.0 14.0L'
    '3.0 20.0Z"/></g></svg><span class="o-running">▶</span> running or unse'
    'ttled</li><li><svg viewBox="0 0 14 28" class="key" aria-hidden="true">'
    '<g class="mark o-missed"><circle cx="7.0" cy="14.0" r="4" class="hollo'
    'w"/></g></svg><span class="o-missed">○</span> missed (no claim)</li></'
    'ul><p class="none">no routines loaded</p></section><section aria-label'
    'ledby="h-flight"><h2 id="h-flight">In flight</h2><ul class="flights"><'
    'li class=none>none</li></ul></section><section aria-labelledby="h-wake'
    '"><h2 id="h-wake">Pending wake-ups</h2><ul class="wakeups"><li class="'
    'problem">unavailable: wake-ups &lt;stalled&gt;</li></ul></section><sec'
    'tion aria-labelledby="h-replicas"><h2 id="h-replicas">Replicas</h2><ul'
    ' class="replicas"><li class="problem">unavailable: replicas &amp; &lt;'
    "gone&gt;</li></ul></section></main></body></html>"
)

LOGIN_WRONG = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name='
    '"viewport" content="width=device-width, initial-scale=1"><meta name="c'
    'olor-scheme" content="light dark"><title>trio_routines: sign in</title'
    '><link rel="icon" href="/m/ui/icon.svg" type="image/svg+xml"><link rel'
    '="stylesheet" href="/m/ui/page.css"><script src="/m/ui/page.js" defer>'
    '</script></head><body data-base="/m/"><header><h1>trio_routines</h1></'
    'header><main><form class="login" method="post" action="/m/ui/login"><l'
    'abel for="token">Token (<code>TRIO_ROUTINES_TOKEN</code>)</label><inpu'
    't id="token" name="token" type="password" autocomplete="current-passwo'
    'rd" required autofocus><button type="submit">Sign in</button><p class='
    '"problem" role="alert">wrong token</p></form></main></body></html>'
)

LOGIN = (
    '<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name='
    '"viewport" content="width=device-width, initial-scale=1"><meta name="c'
    'olor-scheme" content="light dark"><title>trio_routines: sign in</title'
    '><link rel="icon" href="/ui/icon.svg" type="image/svg+xml"><link rel="'
    'stylesheet" href="/ui/page.css"><script src="/ui/page.js" defer></scri'
    'pt></head><body data-base="/"><header><h1>trio_routines</h1></header><'
    'main><form class="login" method="post" action="/ui/login"><label for="'
    'token">Token (<code>TRIO_ROUTINES_TOKEN</code>)</label><input id="toke'
    'n" name="token" type="password" autocomplete="current-password" requir'
    'ed autofocus><button type="submit">Sign in</button></form></main></bod'
    "y></html>"
)

# -- the markup ----------------------------------------------------------------------------


def test_a_routine_s_card_with_every_part() -> None:
    assert routine_html(full_view(), NOW) == FULL_ROUTINE


def test_a_paused_routine_s_card_without_history() -> None:
    changes = {"problem": None, "spent": "", "budget": "", "recent": (), "marks": ()}
    view = attrs.evolve(full_view(), paused=True, resolved="H 9 * * *", tz=None, **changes)
    assert routine_html(view, NOW) == PAUSED_ROUTINE


def test_an_on_demand_routine_over_its_budget() -> None:
    view = bare_view(over_budget=True, budget="over <10k>", spent="5 & 6")
    assert routine_html(view, NOW) == ON_DEMAND_OVER_BUDGET


def test_a_cron_that_never_fires_again_and_an_unsettled_fire() -> None:
    view = bare_view(cron="0 0 30 2 *", resolved="0 0 30 2 *", recent=(UNSETTLED,))
    assert routine_html(view, NOW) == NEVER_AGAIN


def test_a_routine_due_by_its_own_loop() -> None:
    view = bare_view(cron="* * * * *", next_due=NOW + timedelta(seconds=30))
    assert routine_html(view, NOW) == DUE_ROUTINE


def test_a_timeline_shorter_than_a_second_is_drawn_over_one_second() -> None:
    since = axis_end(NOW) - timedelta(seconds=0.5)
    view = bare_view(since=since, marks=(Mark(since + timedelta(seconds=0.5), "completed"),))
    assert '<circle cx="240.0" cy="14.0" r="5"/>' in timeline_svg(view, NOW)


def test_the_main_part_with_every_section_filled() -> None:
    assert main_html(full_page()) == FULL_MAIN


def test_empty_sections_say_none() -> None:
    assert main_html(empty_page()) == EMPTY_MAIN


def test_problems_replace_the_wakeups_and_replicas_and_no_routine_is_said() -> None:
    assert main_html(problem_page()) == PROBLEM_MAIN


def test_the_whole_page_below_a_mount_point() -> None:
    assert page_html(problem_page(), "/m<x>/") == PAGE


def test_the_sign_in_form_with_and_without_its_note() -> None:
    assert login_html(NOW, "/m/", wrong=True) == LOGIN_WRONG
    assert login_html(NOW, "/", wrong=False) == LOGIN


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-0.001, "due"),
        (0, "in <1 min"),
        (59.9, "in <1 min"),
        (60, "in 1 min"),
        (3599, "in 59 min"),
        (3600, "in 1 h 00 min"),
        (3600 + 9 * 60 + 59, "in 1 h 09 min"),
        (48 * 3600 - 1, "in 47 h 59 min"),
        (48 * 3600, "in 2 d"),
        (3 * 86400 - 1, "in 2 d"),
    ],
)
def test_the_time_left_before_the_script_counts_it(seconds: float, shown: str) -> None:
    assert _left(seconds) == shown


@pytest.mark.parametrize(
    ("ms", "shown"),
    [
        (None, "-"),
        (0, "0 ms"),
        (999, "999 ms"),
        (1000, "1.0 s"),
        (119_949, "119.9 s"),
        (119_950, "2.0 min"),  # the unit is chosen by what is shown, not 120.0 s
        (120_000, "2.0 min"),
        (90 * 60_000, "90.0 min"),
    ],
)
def test_a_turn_s_duration(ms: int | None, shown: str) -> None:
    assert _duration(ms) == shown


def test_an_instant_shows_its_seconds_only_when_it_has_some() -> None:
    whole = datetime(2026, 11, 30, 12, 0, 0, 500_000, tzinfo=UTC)
    assert _time(whole) == '<time datetime="2026-11-30T12:00:00.500Z">2026-11-30 12:00Z</time>'
    late = datetime(2026, 11, 30, 12, 0, 5, tzinfo=UTC)
    assert _time(late) == '<time datetime="2026-11-30T12:00:05.000Z">2026-11-30 12:00:05Z</time>'


# -- the marks -----------------------------------------------------------------------------


def _fire(slot: datetime) -> Fire:
    return Fire(slot=slot, fired_at=slot, outcome=Outcome.COMPLETED, ms=1)


def test_timelines_end_at_the_end_of_the_current_minute() -> None:
    now = datetime(2026, 11, 30, 12, 0, 30, 123_456, tzinfo=UTC)
    assert axis_end(now) == datetime(2026, 11, 30, 12, 1, tzinfo=UTC)


def test_a_mark_carries_its_claim_on_the_grid_and_off_it() -> None:
    on, off = SLOT, SLOT + timedelta(seconds=7)
    marks, _ = timeline([on], [_fire(on), _fire(off)], NOW)
    assert [(m.slot, m.fire) for m in marks] == [(on, _fire(on)), (off, _fire(off))]


def test_a_slot_exactly_settling_old_is_missed_and_a_claim_at_the_span_s_start_is_drawn() -> None:
    now = datetime(2026, 11, 30, 12, 0, 30, tzinfo=UTC)
    start = axis_end(now) - timedelta(hours=24)
    settled = now - SETTLING
    marks, since = timeline([start, settled], [_fire(start)], now)
    assert [(m.slot, m.kind) for m in marks] == [(start, "completed"), (settled, "missed")]
    assert since == start
    # A slot without a claim at the span's very start, after an older claim: missed.
    marks, _ = timeline([start], [_fire(start - timedelta(hours=1))], now)
    assert [(m.slot, m.kind) for m in marks] == [(start, "missed")]


def test_a_slot_before_the_span_is_not_called_missed_when_it_was_claimed() -> None:
    # Rendered on a whole minute, the span starts a minute after "24 hours ago", and the slot
    # at "24 hours ago" is among the cron's: its claim is out of the span, and so is the slot.
    now = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    day_ago, unclaimed, later = (now - timedelta(hours=h) for h in (24, 2, 1))
    marks, _ = timeline([day_ago, unclaimed, later], [_fire(day_ago), _fire(later)], now)
    assert [(m.slot, m.kind) for m in marks] == [(unclaimed, "missed"), (later, "completed")]
