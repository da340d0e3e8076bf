"""One decision at a time: table-driven cases with readable ids."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import pytest

from policy.helpers import CONFIG, Run, breached, healthy, warmed
from tailguard.policy import Decision, Limit, Observation, PolicyConfig, PolicyState, Reason, decide
from tailguard.policy.observed import Misses, poisson_tail

WARM = warmed()
assert WARM.last_valid_at is not None
NOW = WARM.last_valid_at + 15.0
#: The same, with a queue seen at the last decision: a queue's second window.
QUEUED = replace(WARM, queue_seen_at=WARM.last_valid_at)


@dataclass(frozen=True)
class Case:
    id: str
    obs: Observation
    replicas: int | None = None  # expected replicas (exact)
    at_least: int | None = None
    reason: Reason | None = None
    valid: bool = True
    limit: Limit | None = None
    config: PolicyConfig = CONFIG
    state: PolicyState = WARM


def obs(make: Any, rate: float, replicas: int, **kw: Any) -> Observation:
    return make(rate, replicas, now=NOW, **kw)


CASES = [
    Case(
        "missing request rate holds",
        obs(healthy, 60, 3, request_rate=None),
        3,
        reason=Reason.METRICS_MISSING,
        valid=False,
    ),
    Case(
        "NaN running holds",
        obs(healthy, 60, 3, running=math.nan),
        3,
        reason=Reason.METRICS_MISSING,
        valid=False,
    ),
    Case(
        "no sample time holds",
        obs(healthy, 60, 3, sample_time=None),
        3,
        reason=Reason.METRICS_MISSING,
        valid=False,
    ),
    Case(
        "stale sample holds",
        obs(healthy, 60, 3, sample_time=NOW - 600),
        3,
        reason=Reason.METRICS_STALE,
        valid=False,
    ),
    Case(
        "NaN p99 with traffic holds",
        obs(healthy, 60, 3, p99_ttft_s=math.nan),
        3,
        reason=Reason.METRICS_MISSING,
        valid=False,
    ),
    Case("missing TPOT with a TPOT SLO holds", obs(healthy, 60, 3, p99_tpot_s=None), 3, valid=False),
    Case(
        "above max is clamped even without data",
        obs(healthy, 60, 20, request_rate=None),
        16,
        valid=False,
        limit=Limit.MAX_REPLICAS,
    ),
    Case("steady load holds", obs(healthy, 80, 3), 3, reason=Reason.STEADY),
    Case(
        "breach with a growing queue scales up at once, sized from the queue",
        obs(breached, 150, 2, waiting=3000.0),
        at_least=5,
        reason=Reason.SLO_BREACH,
    ),
    Case("breach scales up", obs(breached, 150, 2), at_least=3, reason=Reason.SLO_BREACH),
    Case(
        "breach with pending pods adds nothing",
        obs(breached, 150, 2, pending_replicas=1, desired_replicas=3),
        None,
        reason=Reason.SLO_BREACH,
        limit=Limit.PENDING_GPUS,
    ),
    Case("scale-up is rate limited", obs(breached, 60, 1, waiting=6000.0), 5, limit=Limit.SCALE_UP_RATE),
    Case(
        "scale-up stops at max replicas",
        obs(breached, 720, 12, waiting=30000.0),
        16,
        limit=Limit.MAX_REPLICAS,
    ),
    Case(
        # 0.5 req/s over a 2-minute window: 60 requests, two slow ones put p99 over the SLO; at a
        # 1% miss rate two of 60 happen in one window of eight (not a breach, nothing added)
        "a quiet window's two slow requests are chance, not a breach",
        obs(healthy, 0.5, 1, p99_ttft_s=0.9, ttft_within_slo=58 / 60, goodput=58 / 60),
        1,
    ),
    Case(
        # the same share of misses over 6,000 requests is far beyond chance
        "the same share of misses in a busy window is a breach",
        obs(breached, 50, 2, p99_ttft_s=0.9, ttft_within_slo=58 / 60, goodput=58 / 60, waiting=0.0),
        at_least=2,
        reason=Reason.SLO_BREACH,
    ),
    Case(
        "rising load scales up before the SLO breaks",
        obs(healthy, 140, 2),
        at_least=3,
        reason=Reason.LOAD_RISING,
    ),
    Case(
        "idle after a restart stays put (cautious)",
        obs(healthy, 0, 3, request_rate=0.0, running=0.0, waiting=0.0, p99_ttft_s=None, p99_tpot_s=None),
        3,
        reason=Reason.IDLE,
        limit=Limit.CAUTIOUS_START,
        state=PolicyState(),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case(case: Case) -> None:
    decision, state = decide(case.config, case.state, case.obs, NOW)
    assert decision.valid is case.valid, decision.reason
    current = case.obs.desired_replicas
    if case.replicas is not None:
        assert decision.replicas == case.replicas, decision.reason
    elif case.at_least is None:
        assert decision.replicas == min(case.config.max_replicas, max(case.config.min_replicas, current))
    if case.at_least is not None:
        assert decision.replicas >= case.at_least, decision.reason
    if case.reason is not None:
        assert decision.reason_code is case.reason, decision.reason
    if case.limit is not None:
        assert case.limit.value in decision.limits, decision.limits
    if not case.valid:
        assert state == case.state, "invalid data must not change the state"
    assert decision.reason, "every decision says why"


def test_reason_carries_the_numbers() -> None:
    decision, _ = decide(CONFIG, WARM, obs(breached, 150, 2), NOW)
    assert "p99 TTFT 2400 ms > SLO 500 ms" in decision.reason
    assert "req/s" in decision.reason
    assert decision.capacity_per_replica is not None
    assert decision.capacity_per_replica > 0


def test_starting_replicas_count_as_capacity_on_the_way() -> None:
    first, state = decide(CONFIG, WARM, obs(breached, 150, 2), NOW)
    starting = first.replicas - 2
    again = obs(breached, 150, 2, starting_replicas=starting, desired_replicas=first.replicas)
    second, _ = decide(CONFIG, state, replace(again, sample_time=NOW + 10), NOW + 15)
    assert second.replicas == first.replicas, second.reason


def _while_starting(growth_per_s: float, *, pending: bool = False) -> list[Decision]:
    """Three decisions 15 s apart on two saturated replicas at 150 req/s: the first asks for
    help, the next two see it still starting (or pending) with the queue growing by
    ``growth_per_s``. The queue was there at the decision before the first too: the replicas
    finish what they can (a queue's first window is read at the model's capacity)."""
    waiting = 400.0
    first, state = decide(CONFIG, QUEUED, obs(breached, 150, 2, waiting=waiting), NOW)
    decisions = [first]
    now = NOW
    for _ in range(2):
        now += 15.0
        waiting += growth_per_s * 15.0
        asked = decisions[-1].replicas
        counts = {"pending_replicas": asked - 2} if pending else {"starting_replicas": asked - 2}
        later = obs(breached, 150, 2, waiting=waiting, desired_replicas=asked, **counts)
        decision, state = decide(CONFIG, state, replace(later, sample_time=now - 5.0), now)
        decisions.append(decision)
    return decisions


def test_a_queue_growing_while_replicas_start_asks_for_the_drain_it_will_meet() -> None:
    # The replicas asked for serve only after a start-up; the queue they find there is the one
    # that keeps growing on the two serving meanwhile, and draining it within a minute takes more.
    steady_queue = [d.replicas for d in _while_starting(0.0)]
    growing = [d.replicas for d in _while_starting(40.0)]
    assert steady_queue[1] == steady_queue[0], steady_queue
    assert growing[1] > growing[0], growing
    # The projection runs to the start-up's end, not a start-up from each decision: the next
    # reading of the same growth asks for no more (no cascade).
    assert growing[2] == growing[1], growing


def test_the_reason_says_what_queue_the_drain_is_sized_for() -> None:
    first, second, _ = _while_starting(40.0)
    assert second.replicas > first.replicas, second.reason
    assert "queued requests within 60 s (the queue the replicas starting will find)" in second.reason


def test_replicas_pending_for_gpus_are_not_multiplied_by_a_growing_queue() -> None:
    # Pods that cannot be scheduled drain nothing whenever they are asked for.
    pending = [d.replicas for d in _while_starting(40.0, pending=True)]
    assert pending[1] == pending[0], pending
    assert pending[2] == pending[0], pending


def _settled_breach(*, queue_s_ago: float | None, scaled_up_s_ago: float | None) -> Decision:
    """A fleet of four settled at 60 req/s, then a window whose p99 TTFT is broken with nothing
    waiting now. ``queue_s_ago``: when requests last queued; ``scaled_up_s_ago``: when the fleet
    was last scaled up (``None``: never)."""
    run = Run(replicas=4)
    run.hold(lambda n: healthy(60, n), 300.0)
    assert run.replicas == 4
    queued = None if queue_s_ago is None else run.now - queue_s_ago
    scaled = None if scaled_up_s_ago is None else run.now - scaled_up_s_ago
    run.state = replace(
        run.state, queue_seen_at=queued, last_scale_at=scaled, last_direction=int(scaled is not None)
    )
    return run.step(breached(60, 4, waiting=0.0))


def test_a_breach_the_model_cannot_explain_adds_a_replica() -> None:
    # No queue anywhere in the window, yet the tail is broken: the model promised too much.
    assert _settled_breach(queue_s_ago=None, scaled_up_s_ago=None).replicas == 5
    # A queue the fleet drained without help: it may be short for the bursts that queue.
    assert _settled_breach(queue_s_ago=60.0, scaled_up_s_ago=None).replicas == 5


def test_the_tail_of_a_queue_the_new_replicas_drained_adds_nothing() -> None:
    # The replicas asked for the breach arrived and drained its queue; the p99s span the rate
    # window and still carry its tail, which says nothing against the model.
    decision = _settled_breach(queue_s_ago=60.0, scaled_up_s_ago=150.0)
    assert decision.reason_code is Reason.SLO_BREACH
    assert decision.replicas == 4, decision.reason
    # A queue older than the rate window, or help asked for long before it: the breach is the model's.
    assert _settled_breach(queue_s_ago=CONFIG.rate_window_s + 30.0, scaled_up_s_ago=150.0).replicas == 5
    assert _settled_breach(queue_s_ago=60.0, scaled_up_s_ago=1800.0).replicas == 5


@pytest.mark.parametrize(
    ("waiting_per_replica", "measured"),
    [(0.5, False), (1.0, False), (3.0, True), (40.0, True)],
    ids=["half a request each", "one each", "three each", "a deep queue"],
)
def test_capacity_is_measured_from_finishes_only_when_a_queue_says_saturated(
    waiting_per_replica: float, measured: bool
) -> None:
    # The same two replicas served the whole window; the tail is broken. No more waiting requests
    # than replicas can leave a replica a free slot: what they finish is then the load, not their
    # capacity.
    replicas = 2
    observation = obs(breached, 60, replicas, waiting=waiting_per_replica * replicas)
    decision, _ = decide(CONFIG, QUEUED, observation, NOW)
    assert ("(measured, saturated)" in decision.reason) is measured, decision.reason


def test_a_queues_first_window_is_read_at_the_models_capacity() -> None:
    # In the interval a burst arrives in, its requests are still being served and few have
    # finished: what the replicas finish then is no measure of what they can (a code-completion
    # burst of 1,300 requests on 17 replicas read 1.2 a second each where they finish 12, and
    # asked for 77 replicas; by the next scrape its queue was gone).
    observation = obs(breached, 60, 2, waiting=80.0)
    first, state = decide(CONFIG, WARM, observation, NOW)
    assert "(measured, saturated)" not in first.reason, first.reason
    assert state.capacity_scale == WARM.capacity_scale, "a burst's first window teaches no cut"
    again = replace(observation, sample_time=NOW + 10.0)
    second, _ = decide(CONFIG, state, again, NOW + 15.0)
    assert "(measured, saturated)" in second.reason, second.reason


@pytest.mark.parametrize(
    ("burst_rate", "per_replica"),
    [(None, 30.0), (40.0, 30.0), (90.0, 45.0)],
    ids=["no burst window", "the rate window shows more", "saturation began within the window"],
)
def test_saturated_replicas_are_read_at_what_they_finish_now(
    burst_rate: float | None, per_replica: float
) -> None:
    # Two saturated replicas finished 60 requests a second over the rate window. When the last
    # two scrapes show them finishing more, the window's mean held calm minutes too.
    observation = obs(breached, 60, 2, waiting=80.0, request_rate_burst=burst_rate)
    decision, _ = decide(CONFIG, QUEUED, observation, NOW)
    assert "(measured, saturated)" in decision.reason, decision.reason
    assert decision.capacity_per_replica == pytest.approx(per_replica)


def test_a_window_over_the_slo_by_chance_says_so() -> None:
    quiet = obs(healthy, 0.5, 1, p99_ttft_s=0.9, ttft_within_slo=58 / 60, goodput=58 / 60)
    decision, _ = decide(CONFIG, WARM, quiet, NOW)
    assert decision.reason_code is not Reason.SLO_BREACH, decision.reason
    assert "p99 TTFT 900 ms over SLO 500 ms: 2 of 60 requests: chance at the 1.00% the SLO allows" in (
        decision.reason
    )


def test_no_window_is_excused_as_chance_while_the_error_budget_is_overspent() -> None:
    quiet = obs(healthy, 0.5, 1, p99_ttft_s=0.9, ttft_within_slo=58 / 60, goodput=58 / 60)
    # the last five minutes missed 3% where 1% is allowed: the service's misses are no chance
    overspent = replace(WARM, budget=replace(WARM.budget, good_short=291.0, all_short=300.0))
    decision, _ = decide(CONFIG, overspent, quiet, NOW)
    assert decision.reason_code is Reason.SLO_BREACH, decision.reason
    assert "p99 TTFT 900 ms > SLO 500 ms" in decision.reason


@pytest.mark.parametrize(
    ("missed_share", "breach_last_time", "judged"),
    [
        (0.009, True, True),  # a breach judged last time stays judged while 0.9% are missing
        (0.009, False, False),  # without one, 0.9% is within the 1% a p99 allows: chance
        (0.006, True, False),  # once the misses are clearly back under, it is chance again
    ],
)
def test_a_judged_breach_stays_judged_until_the_misses_are_clearly_back_under(
    missed_share: float, breach_last_time: bool, judged: bool
) -> None:
    # A service at the SLO's edge flips between a breach and chance from one window to the next
    # (33 of 2,907 requests over), and the replica asked for one window was cancelled the next.
    quiet = obs(healthy, 0.5, 1, p99_ttft_s=0.9, ttft_within_slo=58 / 60, goodput=58 / 60)
    last = NOW - CONFIG.interval_s
    state = replace(
        WARM,
        budget=replace(WARM.budget, good_short=1000.0 * (1.0 - missed_share), all_short=1000.0),
        last_valid_at=last,
        last_breach_at=last if breach_last_time else None,
    )
    decision, _ = decide(CONFIG, state, quiet, NOW)
    assert (decision.reason_code is Reason.SLO_BREACH) is judged, decision.reason


@pytest.mark.parametrize(
    ("missed", "requests", "beyond"),
    [
        (0, 60, False),
        (2, 60, False),  # P(X >= 2 | mean 0.6) = 0.12
        (3, 60, True),  # 0.023
        (2, 600, False),
        (10, 600, False),  # P(X >= 10 | mean 6) = 0.084
        (11, 600, True),  # 0.043
        (130, 12_000, False),  # a 1.08% share of a busy window: within chance of 1%
        (145, 12_000, True),  # 1.21%: beyond it (z = 2.2)
    ],
)
def test_misses_beyond_chance_of_a_p99(missed: int, requests: int, beyond: bool) -> None:
    assert Misses(missed, requests, 0.01).beyond_chance is beyond


def test_the_poisson_tail_matches_its_sum() -> None:
    assert poisson_tail(0, 3.0) == 1.0
    assert poisson_tail(1, 3.0) == pytest.approx(1.0 - math.exp(-3.0))
    assert poisson_tail(3, 0.6) == pytest.approx(1.0 - math.exp(-0.6) * (1 + 0.6 + 0.18))
    assert poisson_tail(200, 0.6) == 0.0
    # the normal approximation beyond a mean of 50 agrees with the exact sum near its switch
    exact = 1.0 - sum(math.exp(-50.0) * 50.0**i / math.factorial(i) for i in range(62))
    assert poisson_tail(62, 50.1) == pytest.approx(exact, abs=0.01)
