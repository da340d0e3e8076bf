"""A breach the model sees room for: a replica is added, unless the replicas added before did not
lower the misses, or a target below 0.99 allows them; and a service that breaks its SLO in every
window still learns its engine."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tailguard.policy import Decision, Observation, PolicyConfig, PolicyState, decide

from .helpers import CONFIG, Run, breached, healthy


def _missing(rate: float, replicas: int, share: float) -> Observation:
    """A window whose TTFT tail is broken for ``share`` of its requests, with no request waiting
    now and a mean wait for the first step that rules no queue out (so the breach teaches the
    capacity nothing): the SLO is missed by the prompts' own latency, not by the load."""
    return breached(
        rate,
        replicas,
        waiting=0.0,
        goodput=1.0 - share,
        ttft_within_slo=1.0 - share,
        p99_ttft_s=0.8,
        queue_time_mean_s=0.02,
    )


def _settled_at(run: Run, share: float, seconds: float = 150.0) -> Decision:
    """Breached windows at 60 req/s on the fleet as it is, long enough for it to settle."""
    return run.hold(lambda n: _missing(60.0, n, share), seconds)


def _four_settled(config: PolicyConfig = CONFIG) -> Run:
    run = Run(config=config, replicas=4)
    run.hold(lambda n: healthy(60, n), 300.0)
    assert run.replicas == 4
    return run


def test_a_breach_the_model_sees_room_for_adds_a_replica_and_remembers_it() -> None:
    run = _four_settled()
    decision = run.step(_missing(60.0, 4, 0.03))
    assert decision.replicas == 5, decision.reason
    assert run.state.probe_replicas == 4
    assert run.state.probe_misses == pytest.approx(0.03)
    # (the state annotation keeps it)
    assert PolicyState.from_json(run.state.to_json()) == run.state


def test_replicas_that_did_not_lower_the_misses_are_not_followed_by_more() -> None:
    run = _four_settled()
    run.step(_missing(60.0, 4, 0.03))
    assert run.replicas == 5
    # Five replicas served long enough to be judged, and the misses did not fall by a fifth.
    decision = _settled_at(run, 0.028)
    assert decision.replicas == 5, decision.reason
    assert "did not lower the misses (3.0% of requests at 4 replicas, 2.8% at 5)" in decision.reason


def test_replicas_that_lowered_the_misses_may_be_followed_by_another() -> None:
    run = _four_settled()
    run.step(_missing(60.0, 4, 0.03))
    # Fewer misses on five, still a breach: the load is the cause, and one more may end it.
    decision = _settled_at(run, 0.015)
    assert decision.replicas == 6, decision.reason
    assert run.state.probe_replicas == 5


def test_a_quiet_windows_few_misses_do_not_judge_the_replicas_added() -> None:
    run = _four_settled()
    run.step(_missing(60.0, 4, 0.05))
    assert run.replicas == 5
    # At 1 req/s a window holds 120 requests: 6 misses are a breach at the SLO's 1%, and no proof
    # that the replicas left more than half of the misses in place.
    decision = run.hold(lambda n: _missing(1.0, n, 0.05), 150.0)
    assert decision.replicas == 6, decision.reason


def test_a_load_that_grew_into_the_added_replica_makes_another_worth_trying() -> None:
    run = _four_settled()
    run.step(_missing(60.0, 4, 0.03))
    # The same misses on five, but the load grew to 75 req/s meanwhile (a ramp): 15 per replica,
    # as on four before. The replica took no load off the others; the misses say the load grew.
    decision = run.hold(lambda n: _missing(75.0, n, 0.03), 150.0)
    assert run.replicas >= 6, decision.reason


def test_below_a_099_target_misses_within_the_error_budget_add_no_replica() -> None:
    # 3% of requests over the TTFT SLO: a p99 breach, yet within a 0.95 target's 5%.
    lenient = _four_settled(replace(CONFIG, goodput_target=0.95))
    decision = lenient.step(_missing(60.0, 4, 0.03))
    assert decision.replicas == 4, decision.reason
    assert "error budget burning at" in decision.reason
    # At 0.99 the same window adds one.
    strict = _four_settled()
    assert strict.step(_missing(60.0, 4, 0.03)).replicas == 5


def test_below_a_099_target_misses_beyond_the_error_budget_still_add_a_replica() -> None:
    run = _four_settled(replace(CONFIG, goodput_target=0.95))
    decision = run.hold(lambda n: _missing(60.0, n, 0.2), 120.0)
    assert run.replicas >= 5, decision.reason


def _fresh_breaches(waiting: float, seconds: float) -> PolicyState:
    """A policy that starts on a fleet breaking its TTFT SLO in every window."""
    state = PolicyState()
    start = now = 1000.0
    while now - start <= seconds:
        obs = replace(_missing(20.0, 2, 0.05), waiting=waiting, sample_time=now - 5.0, desired_replicas=2)
        _, state = decide(CONFIG, state, obs, now)
        now += CONFIG.interval_s
    return state


def test_a_service_that_breaks_its_slo_in_every_window_still_learns_its_engine() -> None:
    # Not in its first minutes: a new service's first breaches are mostly its start's queue.
    assert _fresh_breaches(waiting=0.0, seconds=540.0).fit[0] == 0.0
    # Ten minutes on, with no request waiting for a slot, the steps carry no queue's prompts.
    assert _fresh_breaches(waiting=0.0, seconds=660.0).fit[0] > 0.0
    # With a queue they might: nothing is learned from them.
    assert _fresh_breaches(waiting=10.0, seconds=660.0).fit[0] == 0.0


def test_once_the_engine_is_learned_a_breach_teaches_it_nothing() -> None:
    run = _four_settled()
    weight = run.state.fit[0]
    for _ in range(4):
        run.step(_missing(60.0, run.replicas, 0.03))
    assert run.state.fit[0] == weight
