"""A breach on a fleet that never settles: while the error budget burns, the load per replica the
replicas served (over the mean fleet of the window) bounds the capacity, as a ceiling in req/s that
fades once the budget stops burning."""

from __future__ import annotations

from dataclasses import replace

from tailguard.policy import Observation, PolicyState

from .helpers import CONFIG, Run, healthy

#: A queue-free TTFT breach that misses a tenth of the window's requests: ten times the budget.
_MISSING = {"p99_ttft_s": 0.9, "ttft_within_slo": 0.9, "goodput": 0.9, "queue_time_mean_s": 0.001}


def _warm() -> tuple[Run, float]:
    """Four replicas healthy at 80 req/s for ten minutes; returns the run and the capacity per
    replica it sizes with."""
    run = Run(config=replace(CONFIG, min_replicas=4), replicas=4)
    run.hold(lambda n: healthy(80.0, n, queue_time_mean_s=0.001), 600.0)
    capacity = run.history[-1].capacity_per_replica
    assert capacity is not None
    assert run.state.capacity_ceiling is None
    return run, capacity


def _changing(
    run: Run, per_replica: float, windows: int, *, last_interval: float | None = None, **overrides: float
) -> None:
    """Windows whose ready count changes at every decision (one replica joins, then leaves), at
    ``per_replica`` req/s per serving replica, missing the SLO; ``last_interval``: the burst
    window's rate as a share of the window's."""
    for i in range(windows):
        ready = run.replicas + (i % 2)
        rate = per_replica * ready
        if last_interval is not None:
            overrides = {**overrides, "request_rate_burst": last_interval * rate}
        obs: Observation = healthy(rate, ready, **{**_MISSING, **overrides})
        run.step(obs)


def test_a_burning_budget_on_a_fleet_that_never_settles_bounds_the_capacity() -> None:
    run, capacity = _warm()
    _changing(run, 0.6 * capacity, windows=16)
    ceiling = run.state.capacity_ceiling
    assert ceiling is not None, run.history[-1].reason
    # Below the capacity the model sized with, at most 10% a decision, never below 95% of the
    # load per replica the windows served.
    assert 0.95 * 0.6 * capacity * 0.9 <= ceiling < capacity
    assert "learned while the error budget burned on a fleet that did not settle" in run.history[-1].reason
    assert run.history[-1].capacity_per_replica is not None
    assert run.history[-1].capacity_per_replica <= ceiling * 1.001
    # The state annotation keeps it.
    assert PolicyState.from_json(run.state.to_json()).capacity_ceiling == ceiling


def test_a_load_under_half_the_capacity_is_a_burst_the_window_hides_and_sets_no_ceiling() -> None:
    run, capacity = _warm()
    _changing(run, 0.3 * capacity, windows=16)
    assert run.state.capacity_ceiling is None, run.history[-1].reason


def test_misses_within_the_budget_set_no_ceiling() -> None:
    run, capacity = _warm()
    # One request in two hundred misses: half the budget, the p99 still broken at the edge.
    _changing(run, 0.6 * capacity, windows=16, ttft_within_slo=0.995, goodput=0.995)
    assert run.state.capacity_ceiling is None, run.history[-1].reason


def test_the_ceiling_fades_once_the_budget_stops_burning() -> None:
    run, capacity = _warm()
    _changing(run, 0.6 * capacity, windows=16)
    ceiling = run.state.capacity_ceiling
    assert ceiling is not None
    run.step(healthy(60.0, run.replicas, queue_time_mean_s=0.001))
    # Burning still (the short window remembers the misses): held.
    held = run.state.capacity_ceiling
    run.hold(lambda n: healthy(60.0, n, queue_time_mean_s=0.001), 3600.0)
    assert held is not None
    assert held >= ceiling
    assert run.state.capacity_ceiling is None, run.history[-1].reason


def test_a_breach_within_a_rate_window_of_a_queue_sets_no_ceiling() -> None:
    """The p99s still carry the queue's tail: the replicas that answered it read as too many."""
    run, capacity = _warm()
    _changing(run, 0.6 * capacity, windows=16, waiting=3.0 * run.replicas)
    assert run.state.capacity_ceiling is None, run.history[-1].reason


def test_a_burst_gone_from_the_last_interval_sets_no_ceiling() -> None:
    """The window's mean still carries a burst the last scrape interval no longer holds: that mean
    is not the load that broke the SLO."""
    run, capacity = _warm()
    _changing(run, 0.6 * capacity, windows=16, last_interval=0.3)
    assert run.state.capacity_ceiling is None, run.history[-1].reason


def test_a_ramp_whose_last_interval_holds_the_windows_load_still_sets_a_ceiling() -> None:
    run, capacity = _warm()
    _changing(run, 0.6 * capacity, windows=16, last_interval=1.0)
    assert run.state.capacity_ceiling is not None, run.history[-1].reason
