"""Wall-clock schedules: a five-field cron subset, durations and IANA time zones.

Pure and shared: the API validates a schedule with these parsers, and the policy evaluates it
with :func:`latest_start`. The only data read is the time zone database (through ``zoneinfo``,
cached per zone).

A cron expression has five fields separated by spaces, ``minute hour day-of-month month
day-of-week``. Each field is a list of items separated by commas; an item is ``*``, a value, or a
range ``a-b``, each optionally followed by a step ``/n`` (``*/15``, ``8-18/2``). Months and days
of the week may be written as three-letter English names (``JAN``, ``MON-FRI``); day of week 0
and 7 are both Sunday. As in cron, when both day fields are restricted (neither begins with
``*``) a day matches if either does.

Start times are wall-clock times in the schedule's zone. A start time that occurs twice when the
clocks go back opens the window at both instants; one skipped when the clocks go forward opens
it at the moment of the jump. A duration is elapsed time.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError


class CronError(ValueError):
    """A schedule field that cannot be parsed; the message is one line for people."""


_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_WEEKDAYS = ("sun", "mon", "tue", "wed", "thu", "fri", "sat")


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: tuple[str, ...] = ()
    #: The value ``names[0]`` stands for.
    names_base: int = 0


_FIELDS = (
    _Field("minute", 0, 59),
    _Field("hour", 0, 23),
    _Field("day of month", 1, 31),
    _Field("month", 1, 12, _MONTHS, 1),
    _Field("day of week", 0, 7, _WEEKDAYS, 0),
)

#: Longest day of each month (February in a leap year).
_MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

#: The shape the CRD checks at apply; the parser below gives the precise errors.
CRON_PATTERN = r"^[0-9A-Za-z*,/-]+( +[0-9A-Za-z*,/-]+){4}$"
DURATION_PATTERN = r"^([0-9]+h)?([0-9]+m)?$"
ZONE_PATTERN = r"^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$"
#: The longest window: one week.
MAX_DURATION_S = 7 * 24 * 3600


def _value(text: str, spec: _Field) -> int:
    if text.isdigit():
        number = int(text)
    elif text.lower() in spec.names:
        number = spec.names.index(text.lower()) + spec.names_base
    elif spec.names:
        example = spec.names[1].upper()
        raise CronError(f"{spec.name}: {text!r} is neither a number nor a name such as {example}")
    else:
        raise CronError(f"{spec.name}: {text!r} is not a number")
    if not spec.low <= number <= spec.high:
        raise CronError(f"{spec.name}: {number} is outside {spec.low}-{spec.high}")
    return number


def _item(text: str, spec: _Field) -> set[int]:
    base, slash, step_text = text.partition("/")
    step = 1
    if slash:
        if not step_text.isdigit() or int(step_text) < 1:
            raise CronError(f"{spec.name}: the step in {text!r} must be a whole number of at least 1")
        step = int(step_text)
    if base == "*":
        low, high = spec.low, spec.high
    elif "-" in base:
        first, _, last = base.partition("-")
        low, high = _value(first, spec), _value(last, spec)
        if low > high:
            raise CronError(f"{spec.name}: the range {base!r} runs backwards")
    else:
        if slash:
            raise CronError(f"{spec.name}: a step needs * or a range before it, as in */15 or 5-59/15")
        low = high = _value(base, spec)
    return set(range(low, high + 1, step))


def _field(text: str, spec: _Field) -> frozenset[int]:
    values: set[int] = set()
    for item in text.split(","):
        if not item:
            raise CronError(f"{spec.name}: empty item in {text!r}")
        values |= _item(item, spec)
    return frozenset(values)


@dataclass(frozen=True)
class Cron:
    """A parsed five-field expression: the values each field allows."""

    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    #: 0 (Sunday) to 6 (Saturday).
    weekdays: frozenset[int]
    #: Whether the day-of-month / day-of-week field begins with ``*`` (then both must match).
    days_star: bool
    weekdays_star: bool

    def day_matches(self, day: dt.date) -> bool:
        """Whether a start may fall on this date."""
        if day.month not in self.months:
            return False
        in_month = day.day in self.days
        in_week = (day.weekday() + 1) % 7 in self.weekdays
        if self.days_star or self.weekdays_star:
            return in_month and in_week
        return in_month or in_week

    def latest(self, low: dt.datetime, high: dt.datetime) -> dt.datetime | None:
        """The latest matching minute ``m`` with ``low <= m <= high`` (naive wall-clock times)."""
        hours = sorted(self.hours, reverse=True)
        minutes = sorted(self.minutes, reverse=True)
        day = high.date()
        while day >= low.date():
            if self.day_matches(day):
                top = high.hour * 60 + high.minute if day == high.date() else 24 * 60 - 1
                for hour in hours:
                    if hour * 60 > top:
                        continue
                    minute = next((m for m in minutes if hour * 60 + m <= top), None)
                    if minute is not None:
                        found = dt.datetime.combine(day, dt.time(hour, minute))
                        return found if found >= low else None
            day -= dt.timedelta(days=1)
        return None


@lru_cache(maxsize=256)
def parse_cron(text: str) -> Cron:
    """Parse a five-field expression; :class:`CronError` says what is wrong with which field."""
    parts = text.split()
    if len(parts) != 5:
        raise CronError(
            f"expected 5 fields (minute hour day-of-month month day-of-week), got {len(parts)} in {text!r}"
        )
    minutes, hours, days, months, weekdays = (_field(p, s) for p, s in zip(parts, _FIELDS, strict=True))
    cron = Cron(
        minutes=minutes,
        hours=hours,
        days=days,
        months=months,
        weekdays=frozenset(d % 7 for d in weekdays),
        days_star=parts[2].startswith("*"),
        weekdays_star=parts[4].startswith("*"),
    )
    if (cron.weekdays_star or cron.days_star) and min(days) > max(_MONTH_DAYS[m - 1] for m in months):
        raise CronError(f"{text!r} never matches: no chosen month has day {min(days)}")
    return cron


_DURATION = re.compile(DURATION_PATTERN)


def parse_duration(text: str) -> int:
    """Seconds in a duration such as ``2h``, ``30m`` or ``1h30m`` (one minute to one week)."""
    match = _DURATION.fullmatch(text)
    if not text or match is None:
        raise CronError(f"{text!r} is not a duration such as 2h, 30m or 1h30m")
    hours, minutes = (int(g[:-1]) if g else 0 for g in match.groups())
    seconds = hours * 3600 + minutes * 60
    if seconds < 60:
        raise CronError(f"{text!r} is shorter than one minute")
    if seconds > MAX_DURATION_S:
        raise CronError(f"{text!r} is longer than one week (168h)")
    return seconds


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name`` (e.g. ``Europe/Berlin``); :class:`CronError` if there is none."""
    if not re.fullmatch(ZONE_PATTERN, name):
        raise CronError(f"{name!r} is not an IANA time zone name such as Europe/Berlin")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise CronError(f"unknown time zone {name!r} (an IANA name such as Europe/Berlin)") from None


_EPOCH = dt.datetime(1970, 1, 1)
#: Offsets are sampled this far apart; two changes of a zone's offset are never closer.
_SAMPLE_S = 3 * 3600


def _offset(tz: ZoneInfo, instant: int) -> int:
    offset = dt.datetime.fromtimestamp(instant, tz).utcoffset()
    return int(offset.total_seconds()) if offset is not None else 0


def _segments(tz: ZoneInfo, first: int, last: int) -> list[tuple[int, int, int, int]]:
    """``(from, to, offset, offset before from)`` for spans of whole seconds covering
    ``first..last``, latest first, each with one UTC offset; a span that begins at one of the
    zone's transitions (found by bisection) has a different offset before it."""
    spans: list[tuple[int, int, int, int]] = []
    end, offset = last, _offset(tz, last)
    known = probe = last
    while probe > first - 1:
        probe = max(first - 1, probe - _SAMPLE_S)
        earlier = _offset(tz, probe)
        if earlier != offset:
            # The change lies in (probe, known]: find its first second.
            low, high = probe, known
            while high - low > 1:
                mid = (low + high) // 2
                if _offset(tz, mid) == offset:
                    high = mid
                else:
                    low = mid
            spans.append((high, end, offset, earlier))
            end, offset = high - 1, earlier
        known = probe
    if end >= first:
        spans.append((first, end, offset, offset))
    return spans


def _naive(seconds: int) -> dt.datetime:
    return _EPOCH + dt.timedelta(seconds=seconds)


def latest_start(cron: Cron, tz: ZoneInfo, after: float, upto: float) -> float | None:
    """The latest instant ``s`` with ``after < s <= upto`` (UNIX seconds) at which a window with
    this start opens in zone ``tz``, or ``None``."""
    if not (math.isfinite(after) and math.isfinite(upto)):
        return None
    first, last = math.floor(after) + 1, math.floor(upto)
    if first > last:
        return None
    for start, end, offset, before in _segments(tz, first, last):
        found = cron.latest(_naive(start + offset), _naive(end + offset))
        if found is not None:
            return float(round((found - _EPOCH).total_seconds()) - offset)
        if offset > before:
            # Clocks went forward at ``start``: the wall-clock times it skipped open there.
            skipped = cron.latest(_naive(start + before), _naive(start + offset - 1))
            if skipped is not None:
                return float(start)
    return None
