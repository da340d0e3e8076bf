"""How far and how fast the fleet may shrink: the breach memory keeps, for one scale-down window,
the fleet that served a breach the load does not explain and the load's need for one it does
(not the size asked for to drain its queue); no window removes more than its share of the fleet."""

from __future__ import annotations

import math
import re
from dataclasses import replace

import pytest

from policy.helpers import CONFIG, Run, breached, healthy
from tailguard.policy import Limit, PolicyConfig


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
        largest = max([*sizes[max(0, i - window) : i + 1], 12])
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
