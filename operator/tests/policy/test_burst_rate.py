"""The burst window: a burst shorter than the rate window is read near its height.

The rate window's mean (two minutes) dilutes a ten-second burst twelvefold, so a hold learned from
it alone never holds for the bursts that break the SLO. The short window (two scrapes) shows the
burst; its reading counts beyond two Poisson spreads of its count, and corrected by the change of
requests in flight, so neither noise at a low rate nor a queue draining at full speed reads as one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pytest

from tailguard.policy import Observation
from tailguard.policy.arrivals import InFlightSample, burst_count, read_arrivals
from tailguard.policy.observed import replica_figures
from tailguard.policy.state import PolicyState
from tailguard.policy.types import PolicyConfig

from .helpers import CONFIG, Run, calm_window, healthy

NOW = 1000.0


@dataclass(frozen=True)
class Case:
    id: str
    burst_rate: float | None
    #: requests in flight now, one scrape interval ago, and the replicas serving then
    in_flight: float = 0.0
    before: float = 0.0
    serving_then: int = 2
    low: float = 0.0
    high: float = math.inf


CASES = [
    Case("not measured: no burst", None, high=0.0),
    Case("NaN: no burst", math.nan, high=0.0),
    Case("a low rate is mostly noise: below its own reading", 2.0, high=2.0 * 0.7),
    Case("a burst counts at its height, less two spreads", 60.0, low=56.0, high=58.0),
    Case("engines filling up: more arrived than finished", 60.0, in_flight=900.0, before=300.0, low=90.0),
    Case("a queue draining: fewer arrived than finished", 100.0, in_flight=100.0, before=400.0, high=90.0),
    Case(
        "in flight within its noise: the finished rate",
        60.0,
        in_flight=330.0,
        before=300.0,
        low=56.0,
        high=58.0,
    ),
    Case(
        "fewer replicas serve than then: a removed pod's requests are no fall",
        100.0,
        in_flight=100.0,
        before=400.0,
        serving_then=3,
        low=94.0,
        high=100.0,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_burst_window_reads_arrivals_for_certain(case: Case) -> None:
    config = PolicyConfig(burst_window_s=30.0)
    obs = Observation(sample_time=NOW, request_rate_burst=case.burst_rate)
    history: tuple[InFlightSample, ...] = ((NOW - 30.0, 0.0, 2), (NOW - 15.0, case.before, case.serving_then))
    counted = burst_count(config, obs, history, case.in_flight, 2)
    # (``read_arrivals`` reads no burst rate as no burst)
    burst = counted.certain() if counted is not None else 0.0
    assert case.low <= burst <= case.high, f"{case.id}: read {burst:.2f} req/s"


def _bursty_hour(burst_window: bool) -> Run:
    """An hour of 2 req/s with a 10 s burst at 150 req/s every four minutes, as Prometheus shows
    it: the rate window's mean is 12.5 req/s higher for the two minutes after each burst, the burst
    window shows it whole at the one scrape that follows it."""
    config = replace(CONFIG, budget_headroom=True)
    run = Run(config=config, replicas=2)
    for i in range(240):
        rate = 14.5 if i % 16 < 8 else 2.0
        burst = 150.0 if i % 16 == 0 else 2.0
        run.step(healthy(rate, run.replicas, request_rate_burst=burst if burst_window else None))
    return run


def test_the_hold_learns_bursts_shorter_than_the_rate_window() -> None:
    diluted = _bursty_hour(burst_window=False)
    seen = _bursty_hour(burst_window=True)
    calm_diluted = diluted.history[-1]
    calm_seen = seen.history[-1]
    assert calm_seen.replicas > calm_diluted.replicas, (calm_diluted.reason, calm_seen.reason)
    assert "holding" in calm_seen.reason, calm_seen.reason


def _read_after_a_scale_down(running: float, counted: float) -> tuple[float, bool]:
    """The load (and whether it surges) read one scrape after four replicas became three, at
    25 req/s of long prompts and short answers: 16 requests were in flight on the four, the three
    decode about 4 each, and vLLM counts the requests in their prefill as running too, so the
    gauge swings well beyond the decode batch. ``counted``: what the burst window finished over
    its last scrape interval."""
    config = PolicyConfig(burst_window_s=30.0)
    state = PolicyState(in_flight=((NOW - 30.0, 16.0, 4), (NOW - 15.0, 16.0, 4)))
    obs = Observation(
        sample_time=NOW,
        request_rate=25.0,
        request_rate_burst=counted,
        generation_token_rate=750.0,
        itl_mean_s=0.016,
        running=running,
        waiting=0.0,
        reporting_pods=4,
        ready_replicas=3,
    )
    load = read_arrivals(config, state, obs, replica_figures(obs), calm_window(NOW))
    return load.now, load.surging


def test_right_after_a_scale_down_the_count_still_bounds_a_surge() -> None:
    """The leaver's share of the requests in flight then is taken off the sample, so the count
    of the last interval bounds the running gauge's reading as it does on a steady fleet: the
    gauge at 2.5x the decode batch no longer reads as twice the load."""
    noisy, surging = _read_after_a_scale_down(running=30.0, counted=25.0)
    assert surging
    assert noisy <= 1.2 * 25.0, f"read {noisy:.1f} req/s"
    # A real surge: the engines took in 48 more than the three held, and finished 40 a second.
    real, _ = _read_after_a_scale_down(running=60.0, counted=40.0)
    assert real >= 1.6 * 25.0, f"read {real:.1f} req/s"
