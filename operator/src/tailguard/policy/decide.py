"""The one entry point: ``decide(config, state, observation, now) -> (Decision, PolicyState)``.

Each interval, in order, each step in its own module:

1. ``observed``: check the data. Missing, stale or NaN data holds the current size (clamped to
   the bounds) and leaves the state untouched: a result with ``valid=False``, never a change.
   Otherwise ``window`` reads the facts every later step shares (the SLOs it shows broken, whether
   the fleet has settled, whether the budget is overspent) and ``observed`` the per-replica figures.
2. ``arrivals``: the load now (finished requests corrected by the change in flight, a surge of
   the running gauge, a growing queue), its smoothed level and trend, the outlook over a start-up.
3. ``learning``: fold the window into the engine model; the capacity per replica it promises,
   corrected by what the SLO showed (or, saturated, what the replicas finish).
4. ``need``: replicas = load ÷ (capacity × target utilization), with a queue to drain in a
   breach, hysteresis on the way down, and the error budget's hold (``budget``).
5. ``limits``: stabilization, the scale-down and scale-up rates, a rollout, Pending pods, the
   bounds, the declared schedules.
6. ``max_batch``: tune ``--max-num-seqs``, rate-limited, never during a rollout or while replicas
   start, with one replica spare for the rolling restart.
7. ``rollout``: while any rollout runs (the policy's or the user's), one replica spare for the
   pod that is down.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tailguard.policy.arrivals import Arrivals, outlook, read_arrivals
from tailguard.policy.learning import (
    EngineModel,
    ReplicaCapacity,
    learn_engine,
    replica_capacity,
    teaching_figures,
)
from tailguard.policy.limits import Limited, apply_limits, clamp, remember_size
from tailguard.policy.max_batch import BatchChoice, choose_max_batch
from tailguard.policy.need import Need, Sizing, size_need, startup_horizon
from tailguard.policy.observed import DataProblem, check, replica_figures
from tailguard.policy.rollout import Rollout, Spare, keep_spare, rollout_base, rollout_pending_since, starved
from tailguard.policy.state import PolicyState
from tailguard.policy.types import Decision, Observation, PolicyConfig
from tailguard.policy.window import Window, read_window


@dataclass(frozen=True)
class _Steps:
    """What the steps of one valid decision found: the next state and the reason are made of it."""

    load: Arrivals
    engine: EngineModel
    cap: ReplicaCapacity
    need: Need
    limited: Limited
    batch: BatchChoice
    spare: Spare
    #: The rollout's base (:func:`rollout_base`) and since when a pod of it has been Pending.
    rollout_base: int | None
    pending_since: float | None
    #: The max batch the pods not restarted yet run, while a max-batch change rolls out.
    max_batch_before: int | None

    @property
    def limits(self) -> tuple[str, ...]:
        """The limits that bound the decision, each once, in the order the steps met them."""
        return tuple(dict.fromkeys((*self.limited.limits, *self.batch.limits)))


def decide(
    config: PolicyConfig, state: PolicyState, observation: Observation, now: float
) -> tuple[Decision, PolicyState]:
    """Decide replicas and max batch for one service. Pure and deterministic."""
    obs = observation
    current = obs.desired_replicas
    problem = check(config, obs, now)
    if problem is not None:
        return _hold(config, obs, problem), state

    if state.started_at is None:
        # A fresh start (or a lost annotation): remember the current size as a recommendation,
        # so nothing scales down before a full window of our own observations.
        state = replace(PolicyState(), started_at=now, recommendations=((now, current),))
    window = read_window(config, state, obs, now)
    replica = replica_figures(obs)

    load = read_arrivals(config, state, obs, replica, window)
    ahead = outlook(config, state, load, window)
    # The curve learns from windows one fleet served: the same replicas all window, or, just after
    # a start, the fleet found then (assumed to have served the window before it).
    one_fleet = window.same_fleet or window.ready_changed_at == state.started_at
    # (or, once the curve went untaught for a while, a mixed window over its mean fleet)
    taught, one_fleet = teaching_figures(config, state, obs, replica, load, window, one_fleet=one_fleet)
    engine = learn_engine(config, state, obs, taught, window, one_fleet=one_fleet)
    # While a max-batch change rolls out, the pods not restarted yet still run the old one: read
    # the capacity at the smaller of the two (at the new one a raise credited the old pods with
    # its throughput, and a load rising through the rollout broke the SLO unanswered).
    before = state.max_batch_before if obs.rollout_in_progress else None
    serving = replace(obs, max_batch=min(obs.max_batch, before)) if before is not None else obs
    cap = replica_capacity(config, state, serving, replica, engine, load, window)
    sizing = Sizing(load, ahead, cap)
    need = size_need(config, state, obs, replica, sizing, window)
    limited = apply_limits(config, state, obs, need, window)
    keep = BatchChoice(obs.max_batch, state.last_max_batch_change_at, limited.replicas, limited.code)
    batch = choose_max_batch(config, obs, replica, engine, sizing, window, keep=keep)
    changed = batch.max_batch != obs.max_batch
    base = rollout_base(obs, state.rollout_base, changed_to=limited.replicas if changed else None)
    patience_s = startup_horizon(config, obs)
    pending_since = rollout_pending_since(obs, state.rollout_pending_since, now, patience_s)
    rollout = Rollout(base, own_change=before is not None, starved=starved(pending_since, now, patience_s))
    spare = keep_spare(
        config, obs, rollout,
        replicas=batch.replicas, demand=ahead.demand, per_replica=cap.per_replica, idle=window.idle,
        broken=window.broken,
    )  # fmt: skip
    steps = _Steps(load, engine, cap, need, limited, batch, spare, base, pending_since, before)
    decision = Decision(
        replicas=spare.replicas,
        max_batch=batch.max_batch,
        valid=True,
        reason_code=batch.code,
        reason=_reason(obs, steps),
        limits=steps.limits,
        recommended=need.recommended,
        capacity_per_replica=cap.per_replica,
    )
    return decision, _next_state(config, state, obs, window, steps)


def _hold(config: PolicyConfig, obs: Observation, problem: DataProblem) -> Decision:
    """The decision on data that cannot drive one: the current size, clamped to the bounds."""
    held, held_limits = clamp(config, obs.desired_replicas)
    sentence = f"{problem.sentence}; holding {held} replica{'s' if held != 1 else ''}"
    return Decision(held, obs.max_batch, False, problem.code, sentence, tuple(held_limits))


def _reason(obs: Observation, steps: _Steps) -> str:
    """The reason sentence: each step's parts, then the replicas set and what bound them."""
    final = steps.spare.replicas
    parts = [*steps.need.parts, *steps.limited.parts, *steps.batch.parts, *steps.spare.parts]
    parts.append(f"→ {final} replica{'s' if final != 1 else ''}")
    if obs.starting_replicas:
        parts.append(f"{obs.starting_replicas} starting")
    if obs.pending_replicas:
        parts.append(f"{obs.pending_replicas} pending")
    if steps.limits:
        parts.append("limited by " + ", ".join(steps.limits))
    return "; ".join(parts)


def _next_state(
    config: PolicyConfig, state: PolicyState, obs: Observation, window: Window, steps: _Steps
) -> PolicyState:
    """What this decision leaves for the next one."""
    now, current, final = window.now, obs.desired_replicas, steps.spare.replicas
    load, engine, cap, need, probe = steps.load, steps.engine, steps.cap, steps.need, steps.need.probe
    direction = (final > current) - (final < current)
    changed = steps.batch.max_batch != obs.max_batch
    return replace(
        state,
        budget=need.budget,
        fleet_sizes=remember_size(state.fleet_sizes, now, max(current, final), config),
        last_valid_at=now,
        recommendations=steps.limited.recommendations,
        rate_level=load.level,
        rate_trend=load.trend,
        waiting=obs.waiting or 0.0,
        output_tokens=engine.output_tokens,
        fit=engine.fit,
        prefill_fit=engine.prefill_fit,
        prompt_tokens=engine.prompt_tokens,
        step_floor_s=engine.step_floor_s,
        tpot_offset_s=engine.tpot_offset_s,
        prompt_cost_s=engine.prompt_cost_s,
        capacity_scale=cap.scale,
        capacity_shown=cap.shown,
        burst_scale=cap.burst_scale,
        burst_cut_at=cap.cut_at,
        capacity_ceiling=cap.ceiling,
        curve_taught_at=now if engine.curve_taught else state.curve_taught_at,
        ready=obs.ready_replicas,
        ready_changed_at=window.ready_changed_at,
        last_scale_at=now if direction else state.last_scale_at,
        last_direction=direction if direction else state.last_direction,
        last_max_batch_change_at=steps.batch.changed_at,
        max_batch_before=obs.max_batch if changed else steps.max_batch_before,
        rollout_base=steps.rollout_base,
        rollout_pending_since=steps.pending_since,
        last_breach_at=now if window.broken else state.last_breach_at,
        breach_load=load.level if window.broken else state.breach_load,
        shed_replicas=need.shed.replicas if need.shed else None,
        shed_capacity=need.shed.capacity if need.shed else None,
        probe_replicas=probe.replicas if probe else None,
        probe_misses=probe.misses if probe else None,
        probe_load=probe.load if probe else None,
        probe_at=probe.at if probe else None,
        in_flight=load.in_flight,
        queue_seen_at=load.queue_at,
        jump_seen_at=load.jump_at,
    )
