"""The requests' queue time tells a queue the waiting gauge missed between two scrapes.

A breach at a steady load with no queue means the capacity model promised too much, and the policy
cuts its capacity; a breach whose requests queued is a queue's tail, which says nothing about the
model. The waiting gauge is read every 15 s; the queue-time histogram covers every request of the
window.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tailguard.policy import Observation
from tailguard.policy.arrivals import queue_waited
from tailguard.policy.types import PolicyConfig

from .helpers import CONFIG, Run, healthy


@pytest.mark.parametrize(
    ("mean_s", "slo_s", "waited"),
    [
        pytest.param(None, 0.5, False, id="not measured: says nothing"),
        pytest.param(float("nan"), 0.5, False, id="NaN: says nothing"),
        pytest.param(0.0, 0.5, False, id="no wait"),
        pytest.param(0.004, 0.5, False, id="under 1% of the SLO: cannot carry a p99 breach"),
        pytest.param(0.005, 0.5, True, id="1% of the SLO: 1% of requests may have waited it all"),
        pytest.param(0.03, 5.0, False, id="the bar scales with the SLO"),
        pytest.param(0.8, 1.0, True, id="a burst's queue"),
    ],
)
def test_a_queue_is_a_mean_wait_of_the_share_a_p99_allows(
    mean_s: float | None, slo_s: float, waited: bool
) -> None:
    obs = Observation(queue_time_mean_s=mean_s)
    assert queue_waited(PolicyConfig(ttft_slo_s=slo_s), obs) is waited


def _settled_then_one_breach(queue_time_mean_s: float | None) -> Run:
    """Four replicas healthy at 40 req/s for ten minutes, then one window over the TTFT SLO with
    no request waiting at the scrape."""
    run = Run(config=CONFIG, replicas=4)
    run.hold(lambda n: healthy(40.0, n, queue_time_mean_s=0.001), 600.0)
    broken = replace(
        healthy(40.0, run.replicas, queue_time_mean_s=queue_time_mean_s),
        p99_ttft_s=0.9,
        ttft_within_slo=0.95,
        goodput=0.95,
    )
    run.step(broken)
    return run


@pytest.mark.parametrize("quiet", [None, 0.001], ids=["not measured", "no wait"])
def test_a_breach_with_no_queue_cuts_the_capacity_the_model_promised(quiet: float | None) -> None:
    run = _settled_then_one_breach(quiet)
    assert run.state.capacity_scale < 1.0, run.history[-1].reason


def test_a_breach_whose_requests_queued_between_scrapes_leaves_the_model_alone() -> None:
    before = _settled_then_one_breach(0.001)
    run = _settled_then_one_breach(0.4)
    assert run.state.capacity_scale >= 1.0, run.history[-1].reason
    assert (run.history[-1].capacity_per_replica or 0.0) > (before.history[-1].capacity_per_replica or 0.0)
    assert "requests waited 400 ms for a slot on average" in run.history[-1].reason
