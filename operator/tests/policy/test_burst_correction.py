"""The burst correction: it starts at the modelled prefill queue's bound and what the replicas
sustain within the SLO over a rate window lifts it (a burst window's count does not, nor does
time alone); a burst that breaks the SLO on a fleet held for it lowers the capacity the error
budget's hold sizes with, once per breach, never below that bound."""

from __future__ import annotations

import math
from copy import deepcopy
from dataclasses import replace
from typing import Any

import pytest

from policy.helpers import CONFIG, Run, healthy
from tailguard.policy import Observation, decide

#: Long prompts and a tight TTFT SLO: prompts queueing behind prompts bound a burst well below
#: what the replicas finish, so the correction has room to fall.
PROMPTY = replace(CONFIG, ttft_slo_s=0.25, tpot_slo_s=None, min_replicas=4, max_replicas=32)
PROMPT_TOKENS = 4000.0


def prompty(rate: float, replicas: int, **overrides: Any) -> Observation:
    return healthy(rate, replicas, prompt_token_rate=rate * PROMPT_TOKENS, **overrides)


def burst_breach(rate: float, replicas: int, **overrides: Any) -> Observation:
    """Half the window's requests missed while the rate read stays within the fleet: a burst
    shorter than the windows, read at a fraction of its height."""
    values: dict[str, Any] = {"goodput": 0.5, "ttft_within_slo": 0.5, "p99_ttft_s": 2.0}
    values.update(overrides)
    return prompty(rate, replicas, **values)


def lift(run: Run, share: float = 1.0, **overrides: Any) -> None:
    """One window that finished ``share`` of the capacity per replica over the rate window."""
    capacity = run.history[-1].capacity_per_replica
    assert capacity is not None
    run.step(prompty(share * capacity * run.replicas, run.replicas, **overrides))


def settled_prompty(rate: float = 12.0) -> Run:
    """A service whose bursts have been served at the full capacity: the correction at 1."""
    run = Run(config=PROMPTY, replicas=4)
    run.hold(lambda n: prompty(rate, n), 900)
    assert run.state.burst_scale < 1.0
    # A rate window that met the SLO at the capacity per replica lifts the correction to 1.
    lift(run)
    assert run.state.burst_scale == 1.0
    run.hold(lambda n: prompty(rate, n), 120)
    assert run.state.burst_scale == 1.0
    return run


def test_before_any_burst_the_correction_starts_at_the_prefill_queues_bound() -> None:
    run = Run(config=PROMPTY, replicas=4)
    run.hold(lambda n: prompty(12.0, n), 900)
    prior = run.state.burst_scale
    # The bound of the modelled queue: where the cuts stop too (see below), well under 1.
    assert 0.2 <= prior < 0.85
    assert run.state.burst_cut_at is not None
    # Windows that show nothing of a burst (no burst window read) leave it there.
    run.hold(lambda n: prompty(12.0, n), 300)
    assert run.state.burst_scale == pytest.approx(prior, rel=0.05)


@pytest.mark.parametrize(
    ("case", "overrides", "lifted"),
    [
        ("a rate window served within the SLO", {}, True),
        ("the same window missing the target", {"goodput": 0.95, "ttft_within_slo": 0.95}, False),
        ("the same window while a replica starts", {"starting_replicas": 1}, False),
    ],
)
def test_what_the_replicas_sustain_within_the_slo_lifts_the_correction(
    case: str, overrides: dict[str, Any], lifted: bool
) -> None:
    run = Run(config=PROMPTY, replicas=4)
    run.hold(lambda n: prompty(12.0, n), 900)
    prior = run.state.burst_scale
    # The replicas finished 1.5 times the prior's share of the capacity each over the window.
    lift(run, 1.5 * prior, **overrides)
    if lifted:
        assert run.state.burst_scale == pytest.approx(1.5 * prior, rel=0.05), case
    else:
        assert run.state.burst_scale == pytest.approx(prior, rel=0.05), case


def test_a_burst_windows_count_lifts_only_within_chance_of_the_mean() -> None:
    # A scrape interval's count says how many requests a burst brought, not how short it was: a
    # count beyond chance of the window's mean lifts no further than that chance, however high it
    # read; one within chance is a rate the replicas held through the interval.
    run = Run(config=PROMPTY, replicas=4)
    run.hold(lambda n: prompty(12.0, n), 900)
    prior = run.state.burst_scale
    capacity = run.history[-1].capacity_per_replica
    assert capacity is not None
    count = 12.0 * 0.5 * PROMPTY.burst_window_s
    edge = (count + 2.0 * math.sqrt(count)) / (0.5 * PROMPTY.burst_window_s)
    beyond = deepcopy(run)
    beyond.step(prompty(12.0, run.replicas, request_rate_burst=capacity * run.replicas))
    assert prior <= beyond.state.burst_scale <= max(prior, edge / run.replicas / capacity) * 1.05
    assert beyond.state.burst_scale < 0.9
    within = 12.0 + 0.5 * (edge - 12.0)
    run.step(prompty(12.0, run.replicas, request_rate_burst=within))
    assert run.state.burst_scale == pytest.approx(max(prior, within / run.replicas / capacity), rel=0.02)
    assert run.state.burst_scale > prior * 1.05


def test_a_fleet_that_shrank_within_the_window_is_counted_at_the_replicas_that_served() -> None:
    run = Run(config=PROMPTY, replicas=8)
    for _ in range(60):
        run.step(prompty(12.0, 8))
    prior = run.state.burst_scale
    capacity = run.history[-1].capacity_per_replica
    assert capacity is not None
    # Eight replicas finished 0.8 of the prior's share each over the window; two are ready now.
    # Counted at the two, the window would read 3.2 times the prior's share.
    run.step(prompty(0.8 * prior * capacity * 8, 2))
    assert run.state.burst_scale == pytest.approx(prior, rel=0.05)


def test_a_burst_breach_on_a_fleet_held_for_it_cuts_once_per_breach() -> None:
    run = settled_prompty()
    run.step(burst_breach(12.0, run.replicas))
    assert run.state.burst_scale == pytest.approx(0.85)
    # The windows still carry the same burst for a while: no second cut for it.
    for _ in range(8):
        run.step(burst_breach(12.0, run.replicas))
    assert run.state.burst_scale == pytest.approx(0.85)
    run.hold(lambda n: prompty(12.0, n), 300)
    run.step(burst_breach(12.0, run.replicas))
    assert run.state.burst_scale == pytest.approx(0.85 * 0.85)


def test_cuts_stop_at_the_modelled_prefill_queues_bound() -> None:
    run = settled_prompty()
    seen = []
    for _ in range(40):
        run.step(burst_breach(12.0, run.replicas))
        seen.append(run.state.burst_scale)
        # Between the breaches a replica starts, so no window shows what the replicas sustain.
        run.hold(lambda n: prompty(12.0, n, starting_replicas=1), 240)
    assert seen == sorted(seen, reverse=True)
    # It stopped falling, and where it stopped is a real share of the capacity, not zero.
    assert seen[-1] == seen[-2] == seen[-10]
    assert 0.2 <= seen[-1] < 0.85


@pytest.mark.parametrize(
    ("case", "make"),
    [
        # The load read is far beyond what the ready replicas hold for: the load explains it.
        ("load beyond the fleet", lambda n: burst_breach(400.0, n)),
        # A few slow requests of a small window: chance at the share a cut needs.
        ("a small window", lambda n: burst_breach(0.3, n, goodput=0.9, ttft_within_slo=0.9)),
        # Fewer misses than five error budgets.
        ("a mild breach", lambda n: burst_breach(12.0, n, goodput=0.97, ttft_within_slo=0.97)),
    ],
)
def test_a_breach_that_is_not_a_burst_on_a_held_fleet_cuts_nothing(case: str, make: Any) -> None:
    run = settled_prompty()
    run.step(make(run.replicas))
    assert run.state.burst_scale == 1.0, case


def test_a_cut_stands_through_a_calm_until_the_replicas_sustain_more() -> None:
    run = settled_prompty()
    run.step(burst_breach(12.0, run.replicas))
    run.hold(lambda n: prompty(12.0, n), 300)
    run.step(burst_breach(12.0, run.replicas))
    cut = run.state.burst_scale
    assert cut == pytest.approx(0.85 * 0.85)
    # Hours of calm within the budget, far below the capacity: nothing shown, nothing lifted.
    run.hold(lambda n: prompty(12.0, n), 8 * 3600)
    assert run.state.burst_scale == pytest.approx(cut)
    lift(run, 1.2)
    assert run.state.burst_scale == 1.0


def test_the_hold_sizes_bursts_with_the_corrected_capacity() -> None:
    config = replace(PROMPTY, budget_headroom=True, min_replicas=1)
    run = Run(config=config, replicas=3)
    for _ in range(6):
        run.hold(lambda n: prompty(8.0, n), 240)
        run.hold(lambda n: prompty(24.0, n), 60)
    run.hold(lambda n: prompty(8.0, n), 120)
    obs = replace(prompty(8.0, run.replicas), sample_time=run.now - 5.0, desired_replicas=run.replicas)
    trusting, _ = decide(config, replace(run.state, burst_scale=1.0), obs, run.now)
    wary, _ = decide(config, replace(run.state, burst_scale=0.5), obs, run.now)
    assert "holding" in trusting.reason, trusting.reason
    assert wary.recommended is not None
    assert trusting.recommended is not None
    assert wary.recommended > trusting.recommended, (wary.reason, trusting.reason)
    assert "bursts sized at 50% of the capacity" in wary.reason, wary.reason
    assert "bursts sized at" not in trusting.reason, trusting.reason
