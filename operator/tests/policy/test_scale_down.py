"""How far and how fast the fleet may shrink: the breach memory keeps the fleet that served the
breach for one scale-down window, and no window removes more than its share of the fleet."""

from __future__ import annotations

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
