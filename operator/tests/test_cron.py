"""The cron subset, durations and zones behind declared schedules, checked against a brute force."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailguard.cron import CronError, latest_start, parse_cron, parse_duration, zone

UTC = dt.UTC


def at(text: str, tz: str = "UTC", *, fold: int = 0) -> float:
    """UNIX seconds of a wall-clock time in ``tz``."""
    return dt.datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz), fold=fold).timestamp()


PARSED: list[tuple[str, str, list[int]]] = [
    # (expression, field, values)
    ("*/15 * * * *", "minutes", [0, 15, 30, 45]),
    ("0 8-18/2 * * *", "hours", [8, 10, 12, 14, 16, 18]),
    ("0 0 1,15,28-31 * *", "days", [1, 15, 28, 29, 30, 31]),
    ("0 0 * JAN,jul-Sep *", "months", [1, 7, 8, 9]),
    ("0 0 * * MON-FRI", "weekdays", [1, 2, 3, 4, 5]),
    ("0 0 * * 0,7", "weekdays", [0]),
    ("0 0 * * 5-7", "weekdays", [0, 5, 6]),
    ("  5   4 * * *  ", "minutes", [5]),
]


@pytest.mark.parametrize(("text", "field", "values"), PARSED)
def test_fields_parse_to_their_values(text: str, field: str, values: list[int]) -> None:
    assert sorted(getattr(parse_cron(text), field)) == values


BAD_CRON: list[tuple[str, str]] = [
    ("0 8 * *", "expected 5 fields (minute hour day-of-month month day-of-week), got 4 in '0 8 * *'"),
    ("60 8 * * *", "minute: 60 is outside 0-59"),
    ("0 24 * * *", "hour: 24 is outside 0-23"),
    ("0 8 0 * *", "day of month: 0 is outside 1-31"),
    ("0 8 * 13 *", "month: 13 is outside 1-12"),
    ("0 8 * * 8", "day of week: 8 is outside 0-7"),
    ("0 8 * * MOM", "day of week: 'MOM' is neither a number nor a name such as MON"),
    ("0 8 * JANUARY *", "month: 'JANUARY' is neither a number nor a name such as FEB"),
    ("x 8 * * *", "minute: 'x' is not a number"),
    ("0 18-8 * * *", "hour: the range '18-8' runs backwards"),
    ("*/0 8 * * *", "minute: the step in '*/0' must be a whole number of at least 1"),
    ("5/15 8 * * *", "minute: a step needs * or a range before it, as in */15 or 5-59/15"),
    ("0 8 1,,2 * *", "day of month: empty item in '1,,2'"),
    ("0 8 31 4,6 *", "'0 8 31 4,6 *' never matches: no chosen month has day 31"),
    ("0 8 30 2 *", "'0 8 30 2 *' never matches: no chosen month has day 30"),
]


@pytest.mark.parametrize(("text", "message"), BAD_CRON)
def test_bad_expressions_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(CronError) as raised:
        parse_cron(text)
    assert str(raised.value) == message


def test_february_29_and_a_weekday_choice_are_possible() -> None:
    parse_cron("0 0 29 2 *")
    # With both day fields restricted either may match, so day 31 in April is no error.
    parse_cron("0 8 31 4 MON")


DAYS: list[tuple[str, str, bool]] = [
    # (expression, date, starts that day): 2025-06-02 is a Monday
    ("0 8 * * MON-FRI", "2025-06-02", True),
    ("0 8 * * MON-FRI", "2025-06-07", False),
    ("0 8 13 * FRI", "2025-06-13", True),  # both restricted: either matches
    ("0 8 13 * FRI", "2025-06-06", True),
    ("0 8 13 * FRI", "2025-06-12", False),
    ("0 8 */2 * FRI", "2025-06-06", False),  # day field begins with *: both must match
    ("0 8 */2 * FRI", "2025-06-13", True),
    ("0 8 * 7 *", "2025-06-02", False),
]


@pytest.mark.parametrize(("text", "date", "matches"), DAYS)
def test_day_matching_follows_cron(text: str, date: str, matches: bool) -> None:
    assert parse_cron(text).day_matches(dt.date.fromisoformat(date)) is matches


DURATIONS: list[tuple[str, int]] = [
    ("2h", 7200),
    ("30m", 1800),
    ("1h30m", 5400),
    ("90m", 5400),
    ("168h", 604800),
]


@pytest.mark.parametrize(("text", "seconds"), DURATIONS)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


BAD_DURATIONS: list[tuple[str, str]] = [
    ("", "'' is not a duration such as 2h, 30m or 1h30m"),
    ("2 h", "'2 h' is not a duration such as 2h, 30m or 1h30m"),
    ("1d", "'1d' is not a duration such as 2h, 30m or 1h30m"),
    ("30m1h", "'30m1h' is not a duration such as 2h, 30m or 1h30m"),
    ("0m", "'0m' is shorter than one minute"),
    ("169h", "'169h' is longer than one week (168h)"),
]


@pytest.mark.parametrize(("text", "message"), BAD_DURATIONS)
def test_bad_durations(text: str, message: str) -> None:
    with pytest.raises(CronError) as raised:
        parse_duration(text)
    assert str(raised.value) == message


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("Mars/Olympus", "unknown time zone 'Mars/Olympus' (an IANA name such as Europe/Berlin)"),
        ("europe/berlin", "unknown time zone 'europe/berlin' (an IANA name such as Europe/Berlin)"),
        ("../etc/passwd", "'../etc/passwd' is not an IANA time zone name such as Europe/Berlin"),
        ("", "'' is not an IANA time zone name such as Europe/Berlin"),
    ],
)
def test_bad_zones(name: str, message: str) -> None:
    with pytest.raises(CronError) as raised:
        zone(name)
    assert str(raised.value) == message


NY, BERLIN = "America/New_York", "Europe/Berlin"
STARTS: list[tuple[str, str, str, float, float, float | None]] = [
    # (case, expression, zone, after, upto, latest start)
    (
        "weekday morning",
        "0 8 * * MON-FRI",
        BERLIN,
        at("2025-06-02T00:00", BERLIN),
        at("2025-06-02T09:00", BERLIN),
        at("2025-06-02T08:00", BERLIN),
    ),
    (
        "the upper bound is included",
        "0 8 * * *",
        "UTC",
        at("2025-06-02T07:00"),
        at("2025-06-02T08:00"),
        at("2025-06-02T08:00"),
    ),
    ("the lower bound is excluded", "0 8 * * *", "UTC", at("2025-06-02T08:00"), at("2025-06-02T09:00"), None),
    (
        "saturday finds friday",
        "0 8 * * MON-FRI",
        BERLIN,
        at("2025-06-05T12:00", BERLIN),
        at("2025-06-07T12:00", BERLIN),
        at("2025-06-06T08:00", BERLIN),
    ),
    ("before the first start", "0 22 * * *", "UTC", at("2025-06-02T00:00"), at("2025-06-02T21:59"), None),
    (
        "skipped hour opens at the jump",
        "30 2 * * *",
        NY,
        at("2025-03-08T12:00", NY),
        at("2025-03-09T05:00", NY),
        at("2025-03-09T03:00", NY),
    ),
    (
        "repeated hour: first",
        "30 1 * * *",
        NY,
        at("2025-11-01T12:00", NY),
        at("2025-11-02T01:45", NY),
        at("2025-11-02T01:30", NY),
    ),
    (
        "repeated hour: second",
        "30 1 * * *",
        NY,
        at("2025-11-01T12:00", NY),
        at("2025-11-02T01:45", NY, fold=1),
        at("2025-11-02T01:30", NY, fold=1),
    ),
    (
        "half-hour zone",
        "0 9 * * *",
        "Asia/Kolkata",
        at("2025-06-02T00:00"),
        at("2025-06-02T12:00"),
        at("2025-06-02T03:30"),
    ),
    (
        "a jump right after the lower bound",
        "30 2 * * *",
        NY,
        at("2025-03-09T06:59:59"),
        at("2025-03-09T07:00"),
        at("2025-03-09T07:00"),
    ),
]


@pytest.mark.parametrize(
    ("text", "tz", "after", "upto", "expected"), [c[1:] for c in STARTS], ids=[c[0] for c in STARTS]
)
def test_latest_start(text: str, tz: str, after: float, upto: float, expected: float | None) -> None:
    assert latest_start(parse_cron(text), zone(tz), after, upto) == expected


# -- against a brute force --------------------------------------------------------------------------

ZONES = ["UTC", NY, BERLIN, "Australia/Lord_Howe", "Asia/Kolkata", "America/Santiago", "Pacific/Chatham"]


def brute_latest_start(text: str, tz: str, after: float, upto: float) -> float | None:
    """Every UTC minute in range: it opens when its wall-clock time matches, or when the clocks
    jumped forward onto it over a matching wall-clock time."""
    cron = parse_cron(text)
    info = ZoneInfo(tz)

    def matches(local: dt.datetime) -> bool:
        return cron.day_matches(local.date()) and local.hour in cron.hours and local.minute in cron.minutes

    minute = (int(upto) // 60) * 60
    while minute > after:
        local = dt.datetime.fromtimestamp(minute, info)
        offset, before = local.utcoffset(), dt.datetime.fromtimestamp(minute - 60, info).utcoffset()
        assert offset is not None
        assert before is not None
        naive = local.replace(tzinfo=None)
        if matches(naive):
            return float(minute)
        if offset > before:
            skipped = naive - (offset - before)
            while skipped < naive:
                if matches(skipped):
                    return float(minute)
                skipped += dt.timedelta(minutes=1)
        minute -= 60
    return None


EXPRESSIONS = st.builds(
    lambda m, h, d, w: f"{m} {h} {d} * {w}",
    st.sampled_from(["0", "30", "*/20", "15,45", "*"]),
    st.sampled_from(["*", "1", "2", "2-3", "*/5", "0", "23"]),
    st.sampled_from(["*", "1", "*/2", "15-20"]),
    st.sampled_from(["*", "0", "MON-FRI", "6"]),
)
#: Around the 2025 transitions of the zones above, and some ordinary days.
INSTANTS = st.sampled_from(
    [
        at("2025-03-09T06:00"),
        at("2025-03-30T00:00"),
        at("2025-04-05T14:00"),
        at("2025-04-06T02:00"),
        at("2025-09-06T12:00"),
        at("2025-09-27T13:00"),
        at("2025-10-05T15:00"),
        at("2025-10-26T00:00"),
        at("2025-11-02T05:00"),
        at("2025-06-02T00:00"),
    ]
).flatmap(lambda t: st.floats(t - 6 * 3600, t + 30 * 3600))


@settings(max_examples=200, deadline=None)
@given(EXPRESSIONS, st.sampled_from(ZONES), INSTANTS, st.integers(1, 36 * 60))
def test_latest_start_agrees_with_a_brute_force(text: str, tz: str, upto: float, minutes: int) -> None:
    after = upto - minutes * 60
    assert latest_start(parse_cron(text), zone(tz), after, upto) == brute_latest_start(text, tz, after, upto)
