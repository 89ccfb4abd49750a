"""Cron expressions: validation and the next instant they fire (SPEC §3, *Time*).

Pure code: no Trio, no clock reads, no host zone. Everything here works on aware datetimes and
returns aware UTC datetimes. :mod:`.fields` parses the text, :mod:`.schedule` finds instants,
:mod:`.hashed` resolves ``H`` fields from a seed, :mod:`.gaps` finds how close together a
schedule can fire (the recurring wake-up guardrail).

Syntax
------
Exactly five whitespace-separated fields ``minute hour day-of-month month day-of-week``:

* ``*``, ``a``, ``a-b``, ``*/n``, ``a-b/n``, ``a/n`` (= ``a-max/n``) and comma lists of those.
* Month names ``JAN``..``DEC`` and weekday names ``SUN``..``SAT``, case-insensitive, also in
  ranges (``MON-FRI``, ``JAN-MAR``). Day-of-week takes 0-7, 0 and 7 both Sunday; a range may end
  on Sunday as ``7`` or ``SUN`` (``FRI-SUN`` = Friday, Saturday, Sunday). ``SUN`` ending a range
  reads 7 only after a start later in the week: ``SUN-SUN`` and ``0-SUN`` mean ``0-0`` (Sunday)
  and ``SUN-SUN/2`` means ``0-0/2`` (Sunday too). ``*`` and ``a/n`` in day-of-week run over 0-6,
  so ``1/2`` is Monday, Wednesday, Friday.
* Day-of-month ``L`` (last day of the month) and ``L-n`` (n days before the last, n in 0-30;
  a month too short for it is skipped). ``W`` forms are refused.
* Day-of-week ``nL`` (last weekday n of the month, ``5L`` or ``FRIL``) and ``n#k`` (k-th weekday
  n of the month, k in 1-5, ``1#2`` or ``MON#2``; a month without a fifth one is skipped).
* ``?`` is accepted as a whole day-of-month or day-of-week field and is an alias of ``*``: it
  also counts as "starts with ``*``" for the day rule below, so ``0 9 ? * MON`` fires on Mondays
  only (Quartz's meaning). Note that croner, which the original scheduler used, treats ``?``
  differently (it fires daily there); we pin the Quartz reading.
* ``H`` (hashed) forms ``H``, ``H(a-b)``, ``H/n``, ``H(a-b)/n`` in any field, resolved from a
  seed (a routine's name) by :func:`~trio_routines.cron.hashed.resolve_hashed` before parsing;
  without a seed they are refused.
* Macros ``@yearly @annually @monthly @weekly @daily @midnight @hourly``, case-insensitive.
* Six- and seven-field forms (seconds, year) are refused, and so are backwards ranges (``5-3``)
  and step 0. A step larger than the field (``*/90``) is allowed: it matches the start only.
* Every number has at most 4 significant digits (leading zeros are allowed): a longer value is
  out of range and a longer step is refused, without the text ever reaching ``int()``.

Day rule (Vixie/Debian): when the day-of-month or the day-of-week field starts with ``*`` (or is
``?``), a day must match both fields; otherwise it matches when either does. Days are local
calendar days of the expression's zone.

Daylight saving (Debian cron's policy)
--------------------------------------
A *specific-time* expression (neither the minute nor the hour field starts with ``*``) is read on
wall-clock time: a wall time that occurs twice fires once, at its first occurrence; a wall time
skipped by a gap fires once, at the instant the gap ends (several skipped wall times of one gap
collapse into that single instant). Every other expression fires at each real instant whose
local wall time matches: twice through a fold, never for the missing times of a gap.

Search bound
------------
Which days match depends only on the Gregorian calendar, which repeats every 400 years, so the
search looks at most 401 years of candidate months past ``after`` (and never past year 9999);
when no day in that window matches at all, the expression can never fire and the schedule
remembers it, so later calls answer ``None`` at once. Common expressions are answered from the
start day (or the next matching day) with a few bisections, without walking minutes.

Known approximation: a day is examined wall-minute by wall-minute only when its start and end
disagree on the UTC offset (or sit in a gap or fold); two transitions that cancel out inside one
local day (no real zone has them in its modern rules) would go unnoticed. Zone offsets with
seconds (local mean time, in some zones into the 1970s) give instants with seconds.
"""

from trio_routines.cron.fields import FIELD_NAMES as FIELD_NAMES
from trio_routines.cron.fields import MACROS as MACROS
from trio_routines.cron.hashed import resolve_hashed as resolve_hashed
from trio_routines.cron.hashed import wakeup_seed as wakeup_seed
from trio_routines.cron.schedule import CronSchedule as CronSchedule
from trio_routines.cron.schedule import cron_error as cron_error
from trio_routines.cron.schedule import next_run as next_run
from trio_routines.cron.schedule import parse_cron as parse_cron

__all__ = ["CronSchedule", "cron_error", "next_run", "parse_cron", "resolve_hashed", "wakeup_seed"]
