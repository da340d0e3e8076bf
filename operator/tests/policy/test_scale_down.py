"""How far and how fast the fleet may shrink: the breach memory keeps, for one scale-down window,
the fleet that served a breach the load does not explain and the load's need for one it does
(not the size asked for to drain its queue); no window removes more than its share of the fleet;
a fall the trend confirms is held for a shorter window."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest

from policy.helpers import CONFIG, Run, breached, calm_window, healthy
from tailguard.policy import Limit, PolicyConfig, PolicyState, Reason
from tailguard.policy.arrivals import Arrivals, Outlook
from tailguard.policy.budget import BudgetMemory, Headroom
from tailguard.policy.limits import apply_limits
from tailguard.policy.need import Need, _gradual_fall, _kept_shed


def _after_breach(config: PolicyConfig) -> Run:
    """Twelve replicas through a breach whose need, at the learned capacity, is tiny."""
    run = Run(config=config, replicas=12)
    run.hold(lambda n: healthy(20.0, n), 600)
    run.replicas = 12
    run.hold(lambda n: breached(20.0, n, p99_ttft_s=4.0, waiting=0.0), 120)
    return run


def test_the_fleet_that_served_a_breach_stays_through_the_window() -> None:
    run = _after_breach(CONFIG)
    serving = run.replicas
    first = run.step(healthy(20.0, run.replicas))
    assert first.recommended is not None
    assert first.recommended < serving  # the load asks for less
    assert first.replicas == serving, first.reason  # but the window remembers the breach's fleet
    assert Limit.STABILIZATION.value in first.limits


def test_a_breach_keeps_the_load_it_met_until_the_next() -> None:
    """The state keeps the arrivals' level at the last breach (what a later fall is measured
    against), through the JSON of the state annotation, and a window within the SLO leaves it."""
    run = _after_breach(CONFIG)
    met = run.state.breach_load
    assert met is not None
    assert met == pytest.approx(20.0, rel=0.1)
    assert run.state.last_breach_at is not None
    run.step(healthy(10.0, run.replicas))
    assert run.state.breach_load == met
    run.hold(lambda n: breached(30.0, n, p99_ttft_s=4.0, waiting=0.0), 120)
    later = run.state.breach_load
    assert later is not None
    assert later > met


@pytest.mark.parametrize(
    ("fraction", "fewest_after_one_window"),
    [(0.5, 6), (0.25, 9), (1.0, 1)],
    ids=["half per window", "a quarter per window", "no limit"],
)
def test_one_window_removes_at_most_its_share(fraction: float, fewest_after_one_window: int) -> None:
    config = replace(CONFIG, scale_down_limit_fraction=fraction)
    run = _after_breach(config)
    sizes = []
    for _ in range(int(config.scale_down_stabilization_s / config.interval_s) * 2):
        sizes.append(run.step(healthy(2.0, run.replicas)).replicas)
    window = int(config.scale_down_stabilization_s / config.interval_s)
    assert min(sizes[: window + 1]) >= fewest_after_one_window, sizes
    for i, size in enumerate(sizes):
        # the largest fleet set within the window (the twelve of the breach while it lies within)
        largest = max([*sizes[max(0, i - window) : i + 1], *([12] if i < window else [])])
        assert size >= min(largest - 1, largest * (1 - fraction)) - 1e-9 or size == config.min_replicas


def test_the_rate_limit_is_named_when_it_holds() -> None:
    run = _after_breach(CONFIG)
    limits: set[str] = set()
    for _ in range(60):
        limits.update(run.step(healthy(2.0, run.replicas)).limits)
    assert Limit.SCALE_DOWN_RATE.value in limits


def _burst_breach() -> tuple[Run, int]:
    """A burst to three times the load leaves a long queue on two replicas: the fleet is sized up
    with room to drain it within a minute, the breach's p99 outlasts the burst by half a minute,
    then the load is back. Returns the run and the largest fleet asked for."""
    run = Run(config=CONFIG, replicas=2)
    run.hold(lambda n: healthy(40.0, n), 600)
    run.hold(lambda n: breached(120.0, n, waiting=3000.0), 60)
    run.hold(lambda n: breached(40.0, n, waiting=0.0, queue_time_mean_s=0.2), 30)
    largest = max(d.replicas for d in run.history)
    run.hold(lambda n: healthy(40.0, n), 60)
    return run, largest


def test_a_burst_breach_is_remembered_at_its_loads_need_not_the_emergency_size() -> None:
    """The breach is the burst's (its queue explains it): the window remembers what the load
    measured in it needs at the replicas' capacity, not the size asked for to drain the queue,
    so a minute after the burst the fleet is below that size while the window still runs."""
    run, largest = _burst_breach()
    capacity = run.history[-1].capacity_per_replica
    assert capacity is not None
    read = [float(m.group(1)) for d in run.history[-8:] if (m := re.search(r"load ([\d.]+) req/s", d.reason))]
    need = math.ceil(max(read) / (capacity * CONFIG.target_utilization) - 0.02)
    assert need < largest, (need, largest)
    assert run.replicas <= need, run.history[-1].reason
    assert Limit.STABILIZATION.value in run.history[-1].limits  # the window still holds that need


@pytest.mark.parametrize(
    ("falling", "age_s", "started_at", "expected"),
    [
        pytest.param(False, 200.0, None, 10, id="a flat load: the declared window holds 200 s on"),
        pytest.param(True, 200.0, None, 7, id="a confirmed fall: 200 s is past the shorter window"),
        pytest.param(True, 100.0, None, 10, id="a confirmed fall: 100 s is within the shorter window"),
        pytest.param(True, 200.0, "entry", 10, id="the size found at a start keeps its whole window"),
        pytest.param(True, 400.0, None, 7, id="past every window"),
    ],
)
def test_the_window_a_scale_down_waits(
    falling: bool, age_s: float, started_at: str | None, expected: int
) -> None:
    """Ten replicas recommended ``age_s`` ago, 7 now, the fleet at 10 and no other limit binding."""
    now = 10_000.0
    then = now - age_s
    state = PolicyState(
        started_at=then if started_at else now - 3600.0,
        recommendations=((then, 10), (now - 15.0, 7)),
        fleet_sizes=((now - 15.0, 10),),
    )
    obs = healthy(60.0, 10, now=now)
    need = Need(7, Reason.LOAD_FALLING, (), 7, BudgetMemory(), gradual_fall=falling)
    limited = apply_limits(CONFIG, state, obs, need, calm_window(now))
    assert limited.replicas == expected, limited.limits
    assert (Limit.STABILIZATION.value in limited.limits or Limit.CAUTIOUS_START.value in limited.limits) == (
        expected == 10
    )


@pytest.mark.parametrize(
    ("falling", "learned", "jump", "breach_age_s", "breach_load", "level", "shed", "gradual"),
    [
        pytest.param(True, True, 1.3, None, None, 50.0, 0.2, True, id="a fall of a load that does not jump"),
        pytest.param(False, True, 1.3, None, None, 50.0, 0.2, False, id="no fall"),
        pytest.param(
            True, True, 2.5, None, None, 50.0, 0.2, False, id="a load that may more than double: bursts"
        ),
        pytest.param(True, False, 1.0, None, None, 50.0, 0.2, False, id="no history to tell"),
        pytest.param(
            True, True, 1.3, 100.0, None, 50.0, 0.2, False, id="a breach within the window, load unknown"
        ),
        # 50 req/s: 6,000 requests in the rate window, whose spread is 77 of them (1.3%)
        pytest.param(
            True, True, 1.3, 100.0, 51.0, 50.0, 0.2, False, id="a breach within the window at this load"
        ),
        pytest.param(
            True, True, 1.3, 100.0, 52.0, 50.0, 0.2, True, id="a breach within the window at a higher load"
        ),
        pytest.param(True, True, 1.3, 400.0, None, 50.0, 0.2, True, id="a breach before the window"),
        # 0.5 req/s: 60 requests in the rate window, whose spread is 13% of them
        pytest.param(True, True, 1.3, None, None, 0.5, 0.2, False, id="a fall within the counting noise"),
        pytest.param(True, True, 1.3, None, None, 0.5, 0.4, True, id="a fall beyond the counting noise"),
        pytest.param(
            True, True, 1.3, 100.0, 0.6, 0.5, 0.4, False, id="a breach's load within the counting noise"
        ),
        pytest.param(
            True, True, 1.3, 100.0, 0.7, 0.5, 0.4, True, id="a breach's load beyond the counting noise"
        ),
    ],
)
def test_which_fall_is_gradual(
    falling: bool,
    learned: bool,
    jump: float,
    breach_age_s: float | None,
    breach_load: float | None,
    level: float,
    shed: float,
    gradual: bool,
) -> None:
    """``shed``: the share of the load the trend sheds over the declared scale-down window;
    ``breach_load``: the arrivals' level at the last breach."""
    now = 10_000.0
    state = PolicyState(
        last_breach_at=None if breach_age_s is None else now - breach_age_s, breach_load=breach_load
    )
    trend = -shed * level / CONFIG.scale_down_stabilization_s
    load = Arrivals(level, level, level, level, trend, False, None, False, None, True, 0.0, ())
    ahead = Outlook(level, level, falling, level * 0.95, level, 90.0, level)
    room = Headroom(jump, 1.0, 80.0, 0.98, learned, None, None)
    assert _gradual_fall(CONFIG, state, load, ahead, room, now) is gradual


@pytest.mark.parametrize(
    ("shed", "current", "broken", "relieved", "burn_short", "kept"),
    [
        ((7, 74.2), 7, False, True, 0.3, True),
        ((7, 74.2), 8, False, True, 0.3, False),
        ((7, 74.2), 7, True, True, 0.3, False),
        ((7, 74.2), 7, False, False, 0.3, False),
        ((7, 74.2), 7, False, True, 1.0, False),
        ((7, 74.2), 7, False, True, None, False),
        ((None, None), 7, False, True, 0.3, False),
    ],
    ids=[
        "the shed fleet serves",
        "the fleet changed since",
        "the SLO broke",
        "the relief ended",
        "the budget burns as fast as it accrues",
        "no attainment yet",
        "nothing shed",
    ],
)
def test_a_shed_stands_while_its_fleet_serves_within_a_lasting_budget(
    shed: tuple[int | None, float | None],
    current: int,
    broken: bool,
    relieved: bool,
    burn_short: float | None,
    kept: bool,
) -> None:
    """The relief's shed keeps its fleet against chance only while that fleet serves, the SLO
    holds, the relief lasts and the short window burns the budget slower than it accrues."""
    state = PolicyState(shed_replicas=shed[0], shed_capacity=shed[1])
    room = Headroom(1.2, 1.0, 80.0, 0.98, True, burn_short, 0.2)
    got = _kept_shed(CONFIG, state, current, broken, relieved, room)
    if not kept:
        assert got is None
        return
    assert got is not None
    assert (got.replicas, got.capacity) == (7, 74.2)
    # three Poisson spreads of the rate window's count at that load: about 3.3% at 74 req/s
    count = 74.2 * CONFIG.rate_window_s
    assert got.within == pytest.approx(74.2 * (1.0 + 3.0 / math.sqrt(count)))


def test_a_shed_survives_a_restart() -> None:
    """The shed fleet and the load it was judged to hold travel in the state annotation; a torn
    value keeps the default (none kept)."""
    state = PolicyState(shed_replicas=7, shed_capacity=74.2)
    again = PolicyState.from_json(state.to_json())
    assert (again.shed_replicas, again.shed_capacity) == (7, 74.2)
    torn = PolicyState.from_json('{"shed_replicas": "seven", "shed_capacity": 74.2}')
    assert torn.shed_replicas is None
