"""Declared schedule windows: the floor they hold, and how ``decide`` applies it."""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import replace
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy.helpers import CONFIG, Run, breached, healthy
from tailguard.policy import (
    Limit,
    Observation,
    PolicyConfig,
    PolicyState,
    Reason,
    ScheduledFloor,
    ScheduleWindow,
    decide,
    scheduled_floor,
)


def at(text: str, tz: str = "UTC", *, fold: int = 0) -> float:
    return dt.datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(tz), fold=fold).timestamp()


PEAK = ScheduleWindow("weekday-peak", "0 8 * * MON-FRI", 10 * 3600, 6, "Europe/Berlin")
NIGHT = ScheduleWindow("night-batch", "0 22 * * *", 4 * 3600, 3)
LAUNCH = ScheduleWindow("launch", "30 9 2 6 *", 3600, 10, "Europe/Berlin")
EARLY = ScheduleWindow("early", "30 2 * * *", 3600, 2, "America/New_York")
WINDOWS = (PEAK, NIGHT, LAUNCH)

# 2025-06-02 is a Monday; Berlin is UTC+2 in June.
FLOORS: list[tuple[str, tuple[ScheduleWindow, ...], float, ScheduledFloor]] = [
    ("no windows", (), at("2025-06-02T10:00"), ScheduledFloor()),
    (
        "opens on the minute",
        WINDOWS,
        at("2025-06-02T08:00", "Europe/Berlin"),
        ScheduledFloor(6, ("weekday-peak",), ("weekday-peak",)),
    ),
    ("not before", WINDOWS, at("2025-06-02T07:59:59", "Europe/Berlin"), ScheduledFloor()),
    ("closes after its duration", WINDOWS, at("2025-06-02T18:00", "Europe/Berlin"), ScheduledFloor()),
    (
        "open until then",
        WINDOWS,
        at("2025-06-02T17:59:59", "Europe/Berlin"),
        ScheduledFloor(6, ("weekday-peak",), ("weekday-peak",)),
    ),
    ("not on saturday", WINDOWS, at("2025-06-07T09:00", "Europe/Berlin"), ScheduledFloor()),
    (
        "across midnight",
        WINDOWS,
        at("2025-06-03T01:30"),
        ScheduledFloor(3, ("night-batch",), ("night-batch",)),
    ),
    ("across midnight, closed", WINDOWS, at("2025-06-03T02:00"), ScheduledFloor()),
    (
        "overlapping: the largest holds",
        WINDOWS,
        at("2025-06-02T10:00", "Europe/Berlin"),
        ScheduledFloor(10, ("weekday-peak", "launch"), ("launch",)),
    ),
    (
        "equal floors: both hold",
        (PEAK, replace(NIGHT, start="0 9 * * *", min_replicas=6, time_zone="Europe/Berlin")),
        at("2025-06-02T10:00", "Europe/Berlin"),
        ScheduledFloor(6, ("weekday-peak", "night-batch"), ("weekday-peak", "night-batch")),
    ),
    (
        "skipped start opens at the jump",
        (EARLY,),
        at("2025-03-09T03:00", "America/New_York"),
        ScheduledFloor(2, ("early",), ("early",)),
    ),
    (
        "…for its full duration",
        (EARLY,),
        at("2025-03-09T03:59:59", "America/New_York"),
        ScheduledFloor(2, ("early",), ("early",)),
    ),
    ("…then closes", (EARLY,), at("2025-03-09T04:00", "America/New_York"), ScheduledFloor()),
]


@pytest.mark.parametrize(("windows", "now", "expected"), [c[1:] for c in FLOORS], ids=[c[0] for c in FLOORS])
def test_scheduled_floor(windows: tuple[ScheduleWindow, ...], now: float, expected: ScheduledFloor) -> None:
    assert scheduled_floor(windows, now) == expected


def test_a_duration_is_elapsed_time_across_a_clock_change() -> None:
    """Clocks go back at 02:00 EDT on 2025-11-02: a 3 h window from 00:00 closes at 02:00 EST."""
    window = ScheduleWindow("w", "0 0 * * *", 3 * 3600, 2, "America/New_York")
    assert scheduled_floor((window,), at("2025-11-02T01:59", "America/New_York", fold=1)).replicas == 2
    assert scheduled_floor((window,), at("2025-11-02T02:00", "America/New_York")).replicas == 0


# -- properties ---------------------------------------------------------------------------------------

windows = st.builds(
    ScheduleWindow,
    name=st.sampled_from(["a", "b", "c"]),
    start=st.sampled_from(["0 8 * * MON-FRI", "*/30 * * * *", "0 22 * * *", "30 2 * * SUN", "0 0 1 * *"]),
    duration_s=st.integers(60, 7 * 24 * 3600).map(float),
    min_replicas=st.integers(1, 20),
    time_zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
)
instants = st.floats(at("2024-01-01T00:00"), at("2027-01-01T00:00"))


@settings(max_examples=150, deadline=None)
@given(st.lists(windows, max_size=4).map(tuple), instants)
def test_the_floor_is_the_largest_open_window_and_deterministic(
    declared: tuple[ScheduleWindow, ...], now: float
) -> None:
    floor = scheduled_floor(declared, now)
    assert floor == scheduled_floor(declared, now)
    assert floor.replicas >= 0
    open_ones = [w for w in declared if w.opened_at(now) is not None]
    assert floor.replicas == max((w.min_replicas for w in open_ones), default=0)
    assert floor.active == tuple(w.name for w in open_ones)
    assert set(floor.holding) <= set(floor.active)


@settings(max_examples=150, deadline=None)
@given(windows, instants, st.floats(0.0, 1.0, exclude_max=True))
def test_a_window_is_open_exactly_from_a_start_for_its_duration(
    window: ScheduleWindow, now: float, fraction: float
) -> None:
    opened = window.opened_at(now)
    if opened is None:
        return  # closed: no start within one duration (test_cron checks starts against a brute force)
    end = opened + window.duration_s
    assert opened <= now < end
    assert window.opened_at(opened) == opened
    # Whole seconds: at epoch scale opened + 0.99999…·duration rounds to the end itself.
    moment = opened + math.floor(fraction * window.duration_s)
    later = window.opened_at(moment)
    assert later is not None
    assert opened <= later <= moment
    # At its end it is open only if it opened again meanwhile.
    again = window.opened_at(end)
    assert again is None or opened < again <= end


# -- decide -----------------------------------------------------------------------------------------

MONDAY_0750 = at("2025-06-02T07:50", "Europe/Berlin")


def with_schedules(*declared: ScheduleWindow, max_replicas: int = CONFIG.max_replicas) -> PolicyConfig:
    return replace(CONFIG, schedules=declared, max_replicas=max_replicas)


def test_an_open_window_holds_its_floor_and_says_so() -> None:
    run = Run(config=with_schedules(PEAK), now=MONDAY_0750, replicas=1)
    before = run.hold(lambda n: healthy(2.0, n), 10 * 60)  # until 07:59:45
    assert before.replicas == 1
    assert Limit.SCHEDULE.value not in before.limits
    assert run.now == at("2025-06-02T08:00", "Europe/Berlin")
    opened = run.step(healthy(2.0, run.replicas))
    assert opened.replicas == 6
    assert opened.recommended == 1, "the load's own recommendation is kept"
    assert opened.reason_code is Reason.SCHEDULED
    assert opened.limits == (Limit.SCHEDULE.value,), "the floor supersedes minReplicas"
    assert "schedule 'weekday-peak' holds ≥ 6" in opened.reason
    assert opened.reason.endswith("→ 6 replicas; limited by schedule")


def test_a_floor_above_max_replicas_holds_max_replicas() -> None:
    config = with_schedules(replace(PEAK, min_replicas=40), max_replicas=8)
    decision, _ = decide(config, PolicyState(), healthy(2.0, 1, now=MONDAY_0750 + 3600), MONDAY_0750 + 3600)
    assert decision.replicas == 8
    assert "schedule 'weekday-peak' holds ≥ 8" in decision.reason
    assert Limit.SCHEDULE.value in decision.limits


def test_a_larger_need_than_the_floor_is_no_schedule_limit() -> None:
    run = Run(config=with_schedules(replace(PEAK, min_replicas=2)), now=MONDAY_0750 + 3600, replicas=2)
    decision = run.hold(lambda n: healthy(400.0, n), 5 * 60)
    assert decision.replicas > 2
    assert Limit.SCHEDULE.value not in decision.limits
    assert "schedule" not in decision.reason


def test_a_breach_keeps_its_reason_under_a_floor() -> None:
    now = MONDAY_0750 + 3600
    decision, _ = decide(with_schedules(PEAK), PolicyState(), breached(3.0, 1, now=now), now)
    assert decision.replicas >= 6
    assert decision.reason_code is Reason.SLO_BREACH


def test_after_the_window_closes_the_load_decides_at_once() -> None:
    """The floor is not recorded as a recommendation: the scale-down window holds no more than
    the load asked for, so the fleet comes down when the window closes."""
    short = ScheduleWindow("short", "0 8 * * *", 30 * 60, 6, "Europe/Berlin")
    run = Run(config=with_schedules(short), now=MONDAY_0750, replicas=1)
    run.hold(lambda n: healthy(2.0, n), 10 * 60)  # open from 08:00
    held = run.hold(lambda n: healthy(2.0, n), 30 * 60)  # the last step at 08:29:45
    assert held.replicas == 6
    assert run.now == at("2025-06-02T08:30", "Europe/Berlin")
    after = run.step(healthy(2.0, run.replicas))
    assert after.replicas < 6
    assert Limit.SCHEDULE.value not in after.limits


def test_invalid_data_holds_without_a_schedule() -> None:
    """Without fresh data nothing is decided (the operator acts only on valid decisions)."""
    now = MONDAY_0750 + 3600
    decision, _ = decide(with_schedules(PEAK), PolicyState(), Observation(desired_replicas=2), now)
    assert not decision.valid
    assert decision.replicas == 2


@settings(max_examples=100, deadline=None)
@given(st.lists(windows, max_size=3).map(tuple), instants, st.floats(0.0, 500.0), st.integers(1, 30))
def test_decide_never_goes_below_the_open_floor_nor_above_max(
    declared: tuple[ScheduleWindow, ...], now: float, rate: float, replicas: int
) -> None:
    config = with_schedules(*declared, max_replicas=12)
    decision, _ = decide(config, PolicyState(), healthy(rate, replicas, now=now), now)
    floor = scheduled_floor(declared, now).replicas
    assert decision.valid
    assert min(floor, config.max_replicas) <= decision.replicas <= config.max_replicas
    assert (Limit.SCHEDULE.value in decision.limits) == (
        decision.replicas == min(floor, config.max_replicas) and "schedule" in decision.reason
    )
