"""Arrivals from requests in flight, surges and jumps, user headroom and the name of the limit
that holds a scale-down: table-driven, each case a short scenario on a fake clock."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest

from policy.helpers import CONFIG, Run, breached, healthy
from tailguard.policy import Decision, Limit, Observation, PolicyConfig, PolicyState, decide


def settled(config: PolicyConfig, rate: float, replicas: int, minutes: float = 12) -> Run:
    """A run that has served ``rate`` on ``replicas`` long enough to have learned its curve."""
    run = Run(config=config, replicas=replicas)
    for r in (0.5, 0.75, 1.0, 1.25, 1.0) * 6:
        run.step(healthy(rate * r, run.replicas))
    run.hold(lambda n: healthy(rate, n), minutes * 60)
    return run


@pytest.mark.parametrize(
    ("headroom", "more"),
    [(0.0, False), (0.5, True)],
    ids=["no headroom", "half again as much"],
)
def test_headroom_sizes_for_more_than_the_load(headroom: float, more: bool) -> None:
    plain = settled(CONFIG, 100, 3).history[-1].replicas
    padded = settled(replace(CONFIG, headroom=headroom), 100, 3).history[-1].replicas
    assert (padded > plain) is more, (plain, padded)


@dataclass(frozen=True)
class Flow:
    id: str
    # running per replica a minute ago and now, at the same finished rate
    before: float
    after: float
    expect: Callable[[float, float], bool]


FLOW_CASES = [
    Flow("engines filling up: arrivals above the finished rate", 60.0, 140.0, lambda load, rate: load > rate),
    Flow("engines emptying: arrivals below the finished rate", 140.0, 60.0, lambda load, rate: load < rate),
    Flow(
        "steady in flight: arrivals are the finished rate",
        100.0,
        100.0,
        lambda load, rate: abs(load - rate) < 1,
    ),
]


@pytest.mark.parametrize("case", FLOW_CASES, ids=[c.id for c in FLOW_CASES])
def test_arrivals_follow_requests_in_flight(case: Flow) -> None:
    rate, replicas = 60.0, 3
    run = settled(CONFIG, rate, replicas)
    run.hold(lambda n: healthy(rate, n, running=case.before * n), 120)
    level_before = run.state.rate_level
    run.hold(lambda n: healthy(rate, n, running=case.after * n), 60)
    assert level_before is not None
    assert run.state.rate_level is not None
    assert case.expect(run.state.rate_level, rate), (level_before, run.state.rate_level)


def test_a_queue_draining_in_a_breach_is_no_load() -> None:
    # A queue of 3,600 held for two minutes (90 req/s arrive and finish), then help: 60 req/s
    # arrive, the replicas still finish 90, and the queue falls by 30 a second. The level, which
    # the error budget's history records, follows the arrivals down: read at the finished rate,
    # the drain would enter the history as a peak that never came.
    run = settled(CONFIG, 60.0, 3)
    run.hold(lambda n: breached(90.0, 3, waiting=3600.0), 150)
    queue = [3600.0]

    def draining(n: int) -> Observation:
        queue[0] = max(0.0, queue[0] - 30.0 * CONFIG.interval_s)
        return breached(90.0, 3, waiting=queue[0])

    run.hold(draining, 105)
    assert queue[0] > 0, "the queue still drains"
    assert run.state.rate_level is not None
    assert run.state.rate_level < 80.0, run.state.rate_level


def test_fewer_serving_replicas_is_no_fall_of_arrivals() -> None:
    # A removed pod's requests leave the sum without finishing: the rate is kept as it is.
    run = settled(CONFIG, 60.0, 4)
    run.hold(lambda n: healthy(60.0, 4), 120)
    run.hold(lambda n: healthy(60.0, 3, running=healthy(60.0, 3).running * 0.5), 30)
    assert run.state.rate_level is not None
    assert run.state.rate_level >= 59.0


@dataclass(frozen=True)
class Label:
    id: str
    config: PolicyConfig
    fresh: bool  # a restart without state just before the load fell
    breach: bool  # a breach before the load fell
    after_s: float  # how long after the fall the decision is read
    limit: Limit


LABEL_CASES = [
    Label("a restart holds the start size: cautious start", CONFIG, True, False, 60, Limit.CAUTIOUS_START),
    Label("a recent larger recommendation: stabilization", CONFIG, False, False, 60, Limit.STABILIZATION),
]


@pytest.mark.parametrize("case", LABEL_CASES, ids=[c.id for c in LABEL_CASES])
def test_the_limit_that_holds_a_scale_down_is_named(case: Label) -> None:
    run = settled(case.config, 150.0, 4)
    if case.fresh:
        run.state = PolicyState()
    if case.breach:
        run.hold(lambda n: breached(150.0, n), 60)
        run.hold(lambda n: healthy(150.0, n), 60)
    run.hold(lambda n: healthy(20.0, n), case.after_s)
    decision = run.history[-1]
    assert case.limit.value in decision.limits, (decision.limits, decision.reason)


def test_state_with_new_fields_round_trips_and_stays_small() -> None:
    run = settled(CONFIG, 40, 2)
    for i in range(120):
        run.step(healthy(40 + (i % 9) * 15, run.replicas))
    assert run.state.in_flight
    assert PolicyState.from_json(run.state.to_json()) == run.state
    # The budget's histograms are a fixed 128 numbers of four digits: about 1 kB more than before.
    assert len(run.state.to_json()) < 3072


def test_unreadable_new_fields_take_their_defaults() -> None:
    state = PolicyState.from_json('{"in_flight": [[1, "x", 2]], "fleet_sizes": "high"}')
    assert state.in_flight == ()
    assert state.fleet_sizes == ()


def test_decide_is_deterministic_with_the_new_state() -> None:
    run = settled(replace(CONFIG, headroom=0.2), 60, 3)
    obs = replace(healthy(90.0, 3, now=run.now), sample_time=run.now - 5.0, desired_replicas=3)
    first = decide(run.config, run.state, obs, run.now)
    again = decide(run.config, run.state, obs, run.now)
    assert first == again


def test_a_breach_left_over_from_a_drained_queue_cuts_nothing() -> None:
    # The queue of a burst is gone, but the p99 over the rate window still shows its tail: the
    # capacity correction and the max batch stay as they are.
    run = settled(CONFIG, 120.0, 4)
    run.hold(lambda n: breached(120.0, n, waiting=400.0 * n), 60)
    run.hold(lambda n: healthy(120.0, n, p99_tpot_s=0.08, p99_ttft_s=0.9, goodput=0.95), 90)
    assert run.state.capacity_scale >= 1.0
    assert run.max_batch == 256


@dataclass(frozen=True)
class Surge:
    id: str
    # replicas serving a minute ago and now, and running per replica now over the window's batch
    before: int
    after: int
    surge: float
    rises: bool


SURGE_CASES = [
    Surge("a surge right after a scale-down by one still shows", 6, 5, 2.4, True),
    Surge("a scale-down by one alone is no surge", 6, 5, 6 / 5, False),
    Surge("halving the fleet doubles the batch: no surge", 6, 3, 2.0, False),
    Surge("a surge with the same fleet", 5, 5, 1.6, True),
]


@pytest.mark.parametrize("case", SURGE_CASES, ids=[c.id for c in SURGE_CASES])
def test_a_surge_is_read_right_after_a_fleet_change(case: Surge) -> None:
    """The load fits ``after`` replicas at 35 req/s each (the helpers' replica sustains about 38);
    ``before`` replicas served it until a minute ago, then the fleet shrank to ``after``."""
    rate = 35.0 * case.after
    run = settled(CONFIG, rate, case.after)
    for _ in range(8):  # two minutes on the larger fleet
        run.replicas = case.before
        run.step(healthy(rate, case.before))
    run.replicas = case.after
    run.step(healthy(rate, case.after))
    base = healthy(rate, case.after)
    assert base.running is not None
    decision = run.step(replace(base, running=base.running * case.surge))
    assert (decision.replicas > case.after) is case.rises, decision.reason


def _surge_read(burst_window: bool) -> float:
    """The load read when the requests in flight grow to 1.6× the window's batch over a minute
    while arrivals rose by a tenth: the rest of the growth is each request's longer stay in a
    slower batch. With ``burst_window`` the last scrape interval's count is known."""
    rate, replicas = 35.0 * 5, 5
    run = settled(CONFIG, rate, replicas)
    base = healthy(rate, replicas)
    assert base.running is not None
    decision = run.history[-1]
    for k in range(1, 5):
        arrivals = 1.1 * rate
        obs = replace(base, running=base.running * (1.0 + 0.15 * k))
        if burst_window:
            # Finished over the interval: arrivals less what the engines took in meanwhile.
            taken_in = 0.15 * base.running / CONFIG.interval_s
            obs = replace(obs, request_rate_burst=arrivals - taken_in)
        decision = run.step(obs)
    found = re.search(r"load ([0-9.]+) req/s", decision.reason)
    assert found, decision.reason
    return float(found.group(1))


def test_a_surge_is_read_no_higher_than_the_last_interval_counted() -> None:
    """Scaled by the running gauge alone the rate reads the slower batch as more load (1.6×);
    the burst window's count of the last interval (arrivals 1.1×, within two Poisson spreads)
    bounds it."""
    rate = 35.0 * 5
    assert _surge_read(burst_window=False) >= 1.5 * rate
    bounded = _surge_read(burst_window=True)
    assert 1.1 * rate <= bounded <= 1.1 * rate + 2.0 * (1.1 * rate / CONFIG.interval_s) ** 0.5 + 1.0


def _jump_then_catch_up(run: Run, before: float, after: float, seconds: float) -> list[Decision]:
    """The load jumps from ``before`` to ``after``: the running gauge shows it at once, the rate
    window's mean climbs to it over one window and stays."""
    decisions = []
    end = run.now + seconds
    started = run.now
    while run.now < end:
        caught = min(1.0, (run.now - started + run.config.interval_s) / run.config.rate_window_s)
        rate = before + (after - before) * caught
        running = healthy(after, run.replicas).running
        decisions.append(run.step(healthy(rate, run.replicas, running=running)))
    return decisions


def test_the_rate_window_catching_up_with_a_jump_is_no_trend_to_forecast() -> None:
    run = settled(CONFIG, 60.0, 3)
    window = run.config.rate_window_s
    decisions = _jump_then_catch_up(run, 60.0, 120.0, window + 2 * run.config.interval_s)
    assert any(d.replicas > 3 for d in decisions), "the jump itself is sized at once"
    forecasts = [d.reason for d in decisions if "forecast" in d.reason]
    assert not forecasts, forecasts[0]


def test_a_ramp_without_a_jump_is_still_forecast() -> None:
    run = settled(CONFIG, 60.0, 3)
    decisions = []
    for i in range(24):  # +0.2 req/s every second for six minutes, the gauge in step with the rate
        rate = 60.0 + 0.2 * run.config.interval_s * (i + 1)
        decisions.append(run.step(healthy(rate, run.replicas)))
    assert any("forecast" in d.reason for d in decisions), decisions[-1].reason


@dataclass(frozen=True)
class Overload:
    id: str
    # running per replica over the window's batch, and requests added to the queue per second
    surge: float
    queue_growth: float
    # the load the reason should quote, as a multiple of the finished rate
    expect: float


OVERLOAD_CASES = [
    Overload("the surge reads more than the queue's growth: the surge", 1.6, 10.0, 1.6),
    Overload("the queue's growth reads more than the surge: finished plus growth", 1.0, 30.0, 1.5),
    Overload("both read the same arrivals: counted once", 1.5, 30.0, 1.5),
]


@pytest.mark.parametrize("case", OVERLOAD_CASES, ids=[c.id for c in OVERLOAD_CASES])
def test_an_overload_reads_its_arrivals_once(case: Overload) -> None:
    """In a breach the running gauge's surge and the queue's growth are two readings of the same
    arrivals (requests the engines took in, and those left waiting): the larger one is the load,
    never their sum, which would hold the error budget's history at a burst that never came."""
    rate, replicas = 60.0, 3
    run = settled(CONFIG, rate, replicas)
    base = healthy(rate, replicas)
    assert base.running is not None
    waiting = 40.0 * replicas
    run.step(breached(rate, replicas, running=base.running, waiting=waiting))
    run.replicas = replicas  # as if the limits held it: the next reading is on the same fleet
    waiting += case.queue_growth * run.config.interval_s
    decision = run.step(breached(rate, replicas, running=base.running * case.surge, waiting=waiting))
    match = re.search(r"load (\d+\.\d) req/s", decision.reason)
    assert match is not None, decision.reason
    assert float(match.group(1)) == pytest.approx(rate * case.expect, rel=0.02), decision.reason
