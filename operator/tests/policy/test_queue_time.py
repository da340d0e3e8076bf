"""The requests' queue time tells a queue the waiting gauge missed between two scrapes.

A breach at a steady load with no queue means the capacity model promised too much, and the policy
cuts its capacity; a breach whose requests queued is a queue's tail, which says nothing about the
model, unless prompts take most of the engine's time, the load is steady and the error budget is
spent faster than it accrues: that queue of prompts is the replicas' own at this load. The waiting
gauge is read every 15 s; the queue-time histogram covers every request of the window.
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


@pytest.mark.parametrize(
    ("mean_s", "step_s", "beyond"),
    [
        # A request that arrives while the engine runs a step waits for that step to end, slots
        # free or not: on a 70B pair that is 20-25 ms with no queue at all.
        pytest.param(0.022, 0.025, False, id="within one engine step"),
        pytest.param(0.027, 0.025, False, id="one step and less than 1% of the SLO"),
        pytest.param(0.029, 0.025, True, id="one step and 1% of the SLO"),
        pytest.param(0.022, None, True, id="an unmeasured step adds nothing"),
        pytest.param(0.022, float("nan"), True, id="a NaN step adds nothing"),
        pytest.param(None, 0.025, False, id="an unmeasured wait says nothing"),
    ],
)
def test_a_wait_beyond_one_step_leaves_out_the_step_under_way(
    mean_s: float | None, step_s: float | None, beyond: bool
) -> None:
    obs = Observation(queue_time_mean_s=mean_s, itl_mean_s=step_s)
    config = PolicyConfig(ttft_slo_s=0.3)
    assert queue_waited(config, obs, beyond_step=True) is beyond


def _settled_then_one_breach(
    queue_time_mean_s: float | None, windows: int = 1, config: PolicyConfig = CONFIG
) -> Run:
    """Four replicas healthy at 40 req/s for ten minutes, then ``windows`` windows over the TTFT
    SLO with no request waiting at the scrape."""
    run = Run(config=config, replicas=4)
    run.hold(lambda n: healthy(40.0, n, queue_time_mean_s=0.001), 600.0)
    broken = replace(
        healthy(40.0, run.replicas, queue_time_mean_s=queue_time_mean_s),
        p99_ttft_s=0.9,
        ttft_within_slo=0.95,
        goodput=0.95,
    )
    for _ in range(windows):
        run.step(broken)
    return run


@pytest.mark.parametrize("quiet", [None, 0.001], ids=["not measured", "no wait"])
def test_a_breach_with_no_queue_cuts_the_capacity_the_model_promised(quiet: float | None) -> None:
    run = _settled_then_one_breach(quiet)
    assert run.state.capacity_scale < 1.0, run.history[-1].reason


def test_breaches_whose_requests_waited_one_step_cut_the_capacity_while_the_budget_burns() -> None:
    """A mean wait over 1% of the SLO (5 ms) but within one engine step (8.5 ms here) may be each
    request waiting for the step under way to end, no queue at all. While the error budget burns
    faster than it accrues, breaches like that are read as the model's (the fleet pinned at four
    replicas, so that it stays settled)."""
    pinned = replace(CONFIG, min_replicas=4, max_replicas=4)
    once = _settled_then_one_breach(0.008, config=pinned)
    assert once.state.capacity_scale >= 1.0, once.history[-1].reason
    run = _settled_then_one_breach(0.008, windows=12, config=pinned)
    assert run.state.capacity_scale < 1.0, run.history[-1].reason
    assert "8 ms for a slot on average (within one engine step" in run.history[-1].reason
    # A queue the requests waited well beyond one step is a queue, burning budget or not.
    queued = _settled_then_one_breach(0.4, windows=12, config=pinned)
    assert queued.state.capacity_scale >= 1.0, queued.history[-1].reason


def test_a_breach_whose_requests_queued_between_scrapes_leaves_the_model_alone() -> None:
    before = _settled_then_one_breach(0.001)
    run = _settled_then_one_breach(0.4)
    assert run.state.capacity_scale >= 1.0, run.history[-1].reason
    assert (run.history[-1].capacity_per_replica or 0.0) > (before.history[-1].capacity_per_replica or 0.0)
    assert "requests waited 400 ms for a slot on average" in run.history[-1].reason


#: Long prompts and a tight TTFT SLO, the fleet pinned at four replicas: prompts take most of the
#: engine's time, so a queue of prompts behind prompts can be the replicas' own at a steady load.
PROMPTY = replace(CONFIG, ttft_slo_s=0.25, tpot_slo_s=None, min_replicas=4, max_replicas=4)


def _prompt_queue_breaches(prompt_tokens: float, windows: int, rate: float = 12.0, **overrides: float) -> Run:
    """Four replicas healthy at ``rate`` req/s for ten minutes, then ``windows`` windows in a row that
    miss the TTFT SLO for 10% of their requests, whose requests queued 50 ms on average for their
    first step, with no request waiting at the scrape (a prompt queue, not a slot queue)."""
    run = Run(config=PROMPTY, replicas=4)

    def steady(n: int) -> Observation:
        return healthy(rate, 4, prompt_token_rate=rate * prompt_tokens, queue_time_mean_s=0.001)

    run.hold(steady, 600.0)
    values: dict[str, float] = {"p99_ttft_s": 0.4, "ttft_within_slo": 0.9, "goodput": 0.9}
    values.update(overrides)
    for _ in range(windows):
        run.step(replace(steady(4), queue_time_mean_s=0.05, **values))
    return run


def test_a_steady_prompt_queue_that_spends_the_budget_cuts_the_capacity() -> None:
    run = _prompt_queue_breaches(4000.0, windows=4)
    assert run.state.capacity_scale < 1.0, run.history[-1].reason
    # The reason says the capacity it sized with is a learned share of the model's figure.
    share = f"{run.state.capacity_scale:.0%} of the model's figure, learned from breaches"
    assert share in run.history[-1].reason


@pytest.mark.parametrize(
    ("case", "prompt_tokens", "windows", "rate"),
    [
        # The budget was not yet spent faster than it accrues when the window was judged.
        ("one window", 4000.0, 1, 12.0),
        # Prompts are a small share of the engine's time: the queue is a burst's tail.
        ("short prompts", 200.0, 4, 12.0),
        # A load per replica well under what the modelled prefill queue keeps within the SLO: a
        # burst's tail again, which a steady load of this size cannot make.
        ("a light load", 4000.0, 4, 2.0),
    ],
)
def test_a_prompt_queue_within_the_budget_of_short_prompts_or_at_a_light_load_leaves_the_model_alone(
    case: str, prompt_tokens: float, windows: int, rate: float
) -> None:
    run = _prompt_queue_breaches(prompt_tokens, windows, rate)
    assert run.state.capacity_scale >= 1.0, (case, run.history[-1].reason)
