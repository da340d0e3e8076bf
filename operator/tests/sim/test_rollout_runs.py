"""A spec change the user applies rolls every pod in turn; through the simulator the fleet keeps one
replica spare for the pod that is down and the SLO holds: a stationary Poisson load of 70 req/s on
the 70B replica, which seven replicas serve within the target and six do not."""

from __future__ import annotations

from sim.helpers import steady_70b
from tailguard.sim.fleet import Action, FleetView, simulate
from tailguard.sim.policies.tailguard import Tailguard
from tailguard.sim.report import summarise

SECONDS = 900.0
ROLLOUT_AT = 120.0


def test_a_users_rollout_keeps_one_replica_spare_and_the_slo() -> None:
    scenario = steady_70b(SECONDS, rollouts_at=(ROLLOUT_AT,))
    result = simulate(
        scenario.trace, Tailguard(scenario.policy_config()), scenario.fleet(scenario.lead_in_schedule[-1])
    )
    rows = [row for row in result.timeline if row.time >= 0.0]
    before = {row.desired for row in rows if row.time < ROLLOUT_AT}
    during = [row for row in rows if ROLLOUT_AT + 30.0 <= row.time <= ROLLOUT_AT + 300.0]
    assert len(before) == 1, before
    # At least the fleet it ran plus one; here what the load needs at the target utilization
    # (the budget's relief, earned on a steady fleet, is not spent through a rollout) plus one.
    assert {row.desired for row in during} <= set(range(min(before) + 1, min(before) + 3)), during
    assert any(
        "one replica spare while the rollout runs" in (row.action.reason if row.action else "")
        for row in during
    )
    # Without the spare this run served 0.9555 of an hour with the rollout at minute 20.
    assert summarise(result, scenario.slo).attainment >= 0.99


class Watching:
    """The autoscaler it wraps, recording when the fleet it sees is rolling out."""

    def __init__(self, inner: Tailguard) -> None:
        self.inner = inner
        self.name = inner.name
        self.interval_s = inner.interval_s
        self.rolling: list[tuple[float, bool]] = []

    def step(self, now: float, view: FleetView) -> Action:
        self.rolling.append((now, view.rollout_in_progress))
        return self.inner.step(now, view)


def test_a_rollout_on_a_cluster_with_no_gpu_free_finishes() -> None:
    """With GPUs for exactly the fleet, a spare can never be scheduled, and a Pending spare holds
    the rollout for good (the Deployment takes no old pod down while one is unavailable): the
    spare is given back once a pod waited a start-up horizon for a GPU, and the rollout ends.
    Before, the fleet stayed rolling for the rest of the hour: eight asked, seven serving (six of
    them on the old template) and the spare Pending."""
    seconds = 1800.0  # each pod waits for the GPU its predecessor frees: a slow rollout
    scenario = steady_70b(seconds, rollouts_at=(ROLLOUT_AT,), gpu_limit=14)
    scaler = Watching(Tailguard(scenario.policy_config()))
    result = simulate(scenario.trace, scaler, scenario.fleet(scenario.lead_in_schedule[-1]))
    during = [t for t, rolling in scaler.rolling if rolling and t >= 0.0]
    assert during, "the rollout was seen"
    assert not scaler.rolling[-1][1], "the rollout finished"
    reasons = [row.action.reason for row in result.timeline if row.action is not None]
    assert any("no replica spare for the rollout" in reason for reason in reasons)
