"""Multi-step scenarios on a fake clock: a fleet whose new replicas take a minute to start."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field, replace

from policy.helpers import CONFIG, Run, breached, healthy
from tailguard.policy import Decision, Observation, PolicyConfig, Reason, decide

#: What one replica of the helpers' model finishes per second when saturated.
SATURATED_RATE = 45.0


@dataclass
class FakeFleet:
    """Replicas that become ready ``start_s`` after they are asked for; removal is immediate.

    Saturated replicas finish at most ``SATURATED_RATE`` each; the rest of the arrivals queue.
    """

    run: Run
    start_s: float = 60.0
    ready: int = 2
    starting: list[float] = field(default_factory=list)  # ready-at times
    queue: float = 0.0

    def tick(self, make: object, rate: float) -> Decision:
        assert callable(make)
        now = self.run.now
        self.ready += sum(1 for t in self.starting if t <= now)
        self.starting = [t for t in self.starting if t > now]
        served = min(rate + self.queue / CONFIG.interval_s, SATURATED_RATE * max(1, self.ready))
        self.queue = max(0.0, self.queue + (rate - served) * CONFIG.interval_s)
        obs: Observation = make(served, max(1, self.ready))
        obs = replace(
            obs, ready_replicas=self.ready, reporting_pods=self.ready, starting_replicas=len(self.starting)
        )
        if self.queue > 0:
            obs = replace(obs, waiting=self.queue)
        decision = self.run.step(obs)
        total = self.ready + len(self.starting)
        if decision.replicas > total:
            self.starting += [now + self.start_s] * (decision.replicas - total)
        elif decision.replicas < total:
            drop = total - decision.replicas
            while drop and self.starting:
                self.starting.pop()
                drop -= 1
            self.ready -= drop
        return decision


def warm_fleet(replicas: int = 2, rate: float = 40.0, config: PolicyConfig = CONFIG) -> FakeFleet:
    """A fleet that has served a varied load for ten minutes, then ``rate`` for three."""
    fleet = FakeFleet(Run(config=config, replicas=replicas), ready=replicas)
    for r in (rate * 0.5, rate * 0.75, rate, rate * 1.25, rate) * 8:
        fleet.tick(healthy, r)
    for _ in range(12):
        fleet.tick(healthy, rate)
    return fleet


def test_a_burst_gets_one_sized_scale_up_and_no_cascade_while_replicas_start() -> None:
    fleet = warm_fleet(2, 40.0)
    before = fleet.run.replicas
    decisions = [fleet.tick(breached, 160.0) for _ in range(4)]  # one minute: nothing ready yet
    first = decisions[0]
    assert first.replicas >= before + 2, first.reason
    assert first.reason_code is Reason.SLO_BREACH
    assert "sized to drain" in first.reason, first.reason
    # No more while they start: each later reading (the replicas now measured at what they
    # finish, saturated) projects to the same start-up's end.
    assert all(d.replicas == first.replicas for d in decisions[1:]), [d.reason for d in decisions]
    assert "(measured, saturated)" in decisions[1].reason, decisions[1].reason


def test_a_confirmed_fall_waits_the_shorter_window() -> None:
    # The load drops to a fifth and stays there: the trend confirms the fall, so the fleet is held
    # for one start-up horizon or rate window (120 s here), not the whole declared window (300 s).
    fleet = warm_fleet(2, 40.0)
    for _ in range(8):
        last_high = fleet.tick(healthy, 150.0)
    assert last_high.recommended is not None
    assert last_high.recommended > 2
    shorter = max(CONFIG.startup_s, CONFIG.rate_window_s)
    assert shorter < CONFIG.scale_down_stabilization_s
    sizes = []
    for i in range(60):
        d = fleet.tick(healthy, 30.0)
        sizes.append(d.replicas)
        if (i + 1) * CONFIG.interval_s < shorter:
            assert d.replicas >= last_high.recommended, (i, d.reason)
    ticks_in_window = int(CONFIG.scale_down_stabilization_s / CONFIG.interval_s)
    assert min(sizes[:ticks_in_window]) < last_high.recommended, "it scales down within the window"
    assert fleet.run.replicas < last_high.recommended


def test_never_scales_down_while_the_slo_is_broken() -> None:
    fleet = warm_fleet(6, 60.0)
    replicas = [fleet.tick(breached, 20.0).replicas for _ in range(40)]
    assert all(b >= a for a, b in itertools.pairwise(replicas)), replicas


def test_a_stationary_noisy_load_never_reverses() -> None:
    rng = random.Random(7)
    fleet = warm_fleet(3, 80.0)
    changes = []
    for _ in range(240):  # one hour
        d = fleet.tick(healthy, 80.0 * (1.0 + rng.uniform(-0.04, 0.04)))
        changes.append(d.replicas)
    directions = [b - a for a, b in itertools.pairwise(changes) if b != a]
    assert all(x > 0 for x in directions) or all(x < 0 for x in directions) or not directions, changes


def test_tpot_breaking_at_steady_ttft_lowers_max_batch_and_adds_replicas() -> None:
    fleet = warm_fleet(3, 80.0)
    bad = fleet.tick(lambda r, n: healthy(r, n, p99_tpot_s=0.08, tpot_within_slo=0.95, goodput=0.95), 80.0)
    assert bad.max_batch < 256, bad.reason
    assert bad.reason_code is Reason.MAX_BATCH_LOWERED
    assert bad.replicas > 3
    again = fleet.tick(lambda r, n: healthy(r, n, p99_tpot_s=0.08, tpot_within_slo=0.95, goodput=0.95), 80.0)
    assert again.max_batch == bad.max_batch, "no second change within the interval"


def test_a_tpot_breach_at_most_halves_max_batch_in_one_change() -> None:
    # The TPOT SLO tightened below what the learned step allows at any batch: the model's batch
    # for the step budget is the floor, but one change only halves the cap; the next, after the
    # change interval, may go further once the smaller batch is measured.
    fleet = warm_fleet(3, 80.0)
    fleet.run.config = replace(CONFIG, tpot_slo_s=0.012, max_replicas=64)
    bad = fleet.tick(healthy, 80.0)
    assert bad.reason_code is Reason.MAX_BATCH_LOWERED, bad.reason
    assert bad.max_batch == 128, bad.reason


def test_no_max_batch_change_during_a_rollout() -> None:
    fleet = warm_fleet(3, 80.0)
    d = fleet.tick(lambda r, n: healthy(r, n, p99_tpot_s=0.08, rollout_in_progress=True), 80.0)
    assert d.max_batch == 256
    assert d.replicas >= 3


def test_a_max_batch_raise_rolling_out_is_sized_at_the_old_batch_with_one_spare() -> None:
    """While a raise of ``--max-num-seqs`` rolls out, the pods not restarted yet still run the old
    cap, and one pod at a time is down: the fleet is sized at the smaller batch's capacity, plus
    that replica. Read at the new batch, a load rising through a diurnal morning broke the SLO for
    five minutes of a rollout, on a fleet the model thought large enough."""
    config = replace(CONFIG, max_batch_tuning=False)
    run = Run(config=config, replicas=4, max_batch=32)
    for _ in range(40):
        run.step(healthy(50.0, run.replicas, max_batch=32))
    now = run.now
    obs = healthy(50.0, run.replicas, now=now, desired_replicas=run.replicas, max_batch=32)
    at_old, _ = decide(config, run.state, obs, now)
    assert at_old.capacity_per_replica is not None
    need_at_old = math.ceil(50.0 / (at_old.capacity_per_replica * config.target_utilization))
    rolling_obs = replace(obs, max_batch=64, rollout_in_progress=True)
    rolling_state = replace(run.state, max_batch_before=32)

    rolling, after = decide(config, rolling_state, rolling_obs, now)
    unaware, _ = decide(config, run.state, rolling_obs, now)

    assert unaware.capacity_per_replica is not None
    assert rolling.capacity_per_replica is not None
    assert unaware.capacity_per_replica > 1.2 * at_old.capacity_per_replica, "the new batch promises more"
    assert rolling.capacity_per_replica == at_old.capacity_per_replica
    assert rolling.replicas == max(run.replicas, need_at_old + 1), rolling.reason
    # Read at the new batch the load asks for fewer (the spare of any rollout is kept on both).
    assert rolling.recommended is not None
    assert unaware.recommended is not None
    assert rolling.recommended > unaware.recommended
    assert "one replica spare while the max-batch change rolls out" in rolling.reason
    # A pod Pending for want of a GPU: no spare would be scheduled either.
    starved, _ = decide(config, rolling_state, replace(rolling_obs, pending_replicas=1), now)
    assert starved.replicas == run.replicas, starved.reason
    # Remembered while the rollout lasts, forgotten once it is done.
    assert after.max_batch_before == 32
    _, done = decide(config, after, replace(rolling_obs, rollout_in_progress=False), now + 15.0)
    assert done.max_batch_before is None


def test_pending_pods_stop_further_scale_up() -> None:
    fleet = warm_fleet(2, 40.0)
    d = fleet.tick(lambda r, n: breached(r, n, pending_replicas=2), 120.0)
    assert d.replicas == fleet.run.history[-2].replicas
    assert "pending_gpus" in d.limits


def test_a_slow_steady_fall_is_followed_without_the_hysteresis_margin() -> None:
    """A decline of 0.6% per minute sheds 8% of the load within one scale-down window: it is a
    fall, not noise, so once the window has passed the fleet is what the load of that window
    needs at the target utilization (the margin that keeps a flat load from flapping is off)."""
    fleet = warm_fleet(8, 240.0)
    window = int(CONFIG.scale_down_stabilization_s / CONFIG.interval_s) + 1
    loads: list[float] = []
    for i in range(80):  # twenty minutes, 1.5 req/s less every 15 s
        loads.append(240.0 - 1.5 * (i + 1))
        d = fleet.tick(healthy, loads[-1])
        if i < window:
            continue
        assert d.capacity_per_replica is not None
        need = max(loads[-window - 1 :]) / (d.capacity_per_replica * CONFIG.target_utilization)
        assert d.replicas <= math.ceil(need), (i, loads[-1], d.reason)
    assert fleet.run.replicas < 8
