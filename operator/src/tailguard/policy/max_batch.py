"""Tuning ``--max-num-seqs``: lower it when TPOT or the KV cache suffers, raise it when the batch cap
binds with room to spare and the fleet then needs a replica fewer.

A change restarts every replica in turn, so it is rate-limited, never made during a rollout or
while replicas start, and the fleet keeps one replica spare for the pod that is down.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tailguard.policy.budget import planned_utilization
from tailguard.policy.capacity import Batching, RequestMix, Slo, capacity
from tailguard.policy.learning import EngineModel, ReplicaCapacity, capacity_of
from tailguard.policy.need import Sizing, ceil_replicas
from tailguard.policy.observed import ReplicaFigures, finite, fmt_ms
from tailguard.policy.rollout import with_spare
from tailguard.policy.types import Limit, Observation, PolicyConfig, Reason
from tailguard.policy.window import Window

#: TPOT-to-step ratio assumed before one is measured.
_DEFAULT_TPOT_RATIO = 1.25


@dataclass(frozen=True)
class BatchChoice:
    """The max batch to run, and what choosing it changed."""

    max_batch: int
    #: When max batch last changed (this decision, if it did).
    changed_at: float | None
    #: Replicas to run: raised to keep one spare through the rolling restart.
    replicas: int
    code: Reason
    #: The sentence and the limits it adds to the reason.
    parts: tuple[str, ...] = ()
    limits: tuple[str, ...] = ()


def choose_max_batch(
    config: PolicyConfig,
    obs: Observation,
    replica: ReplicaFigures,
    engine: EngineModel,
    sizing: Sizing,
    window: Window,
    *,
    keep: BatchChoice,
) -> BatchChoice:
    """The max batch for this decision, or ``keep`` (the max batch the pods run, with the replicas
    and the code the limits left, and its last change). A change raises the replicas to keep one
    spare for the pod that is down; through the rollout that follows,
    :func:`tailguard.policy.rollout.keep_spare` keeps it."""
    now, broken, idle, settled = window.now, window.broken, window.idle, window.settled
    cap, demand, queue_gone = sizing.cap, sizing.ahead.demand, sizing.load.queue_gone
    per_replica = cap.per_replica
    if per_replica is None or idle:
        return keep
    waiting = obs.waiting or 0.0
    if not settled or (broken and waiting > 0) or not (queue_gone or not broken):
        return keep
    proposal = _propose(config, obs, cap, engine, replica, demand)
    if proposal is None:
        return keep
    new_batch, why = proposal
    if obs.rollout_in_progress:
        return replace(keep, limits=(Limit.ROLLOUT.value,))
    last_change = keep.changed_at
    if last_change is not None and now - last_change < config.max_batch_change_interval_s:
        return replace(keep, limits=(Limit.MAX_BATCH_INTERVAL.value,))
    current, replicas = obs.desired_replicas, keep.replicas
    if (
        obs.starting_replicas
        or obs.pending_replicas
        or not (new_batch < obs.max_batch or replicas <= current)
    ):
        return keep
    new_cap = capacity_of(config, cap.model, engine, new_batch, replica, tpot_ok=False)
    slower = min(per_replica, new_cap.rate * cap.scale if new_cap else per_replica)
    during = with_spare(config, demand, slower)
    if during > config.max_replicas:
        return keep
    return BatchChoice(
        max_batch=new_batch,
        changed_at=now,
        replicas=max(replicas, min(config.max_replicas, during)),
        code=Reason.MAX_BATCH_RAISED if new_batch > obs.max_batch else Reason.MAX_BATCH_LOWERED,
        parts=(f"max batch {obs.max_batch} → {new_batch}: {why}",),
    )


def _tpot_step_budget(slo: float, offset: float | None) -> float:
    """The mean step that keeps p99 TPOT at 85% of its SLO."""
    return 0.85 * slo - offset if offset is not None else 0.85 * slo / _DEFAULT_TPOT_RATIO


def _round_down(value: float, step: int = 8) -> int:
    if not math.isfinite(value):
        return 1_000_000 if value > 0 else step
    return max(step, int(value // step) * step)


def _propose(
    config: PolicyConfig,
    obs: Observation,
    learned: ReplicaCapacity,
    engine: EngineModel,
    replica: ReplicaFigures,
    demand: float,
) -> tuple[int, str] | None:
    """A new max batch and why, or ``None`` to keep it (or with nothing modelled to size with)."""
    model, cap, scale = learned.model, learned.modelled, learned.scale
    if model is None or cap is None:
        return None
    lo, hi = config.max_batch_min, config.max_batch_max
    if not config.max_batch_tuning or lo >= hi:
        return None
    current = obs.max_batch
    tpot = obs.p99_tpot_s
    slo = config.tpot_slo_s
    offset = engine.tpot_offset_s
    out_tokens = engine.output_tokens
    preempting = finite(obs.preemption_rate) and (obs.preemption_rate or 0.0) > 0.5
    full = model
    if cap.prompt_tokens is not None:
        # the mean step at a batch carries the prompt chunks of this mix too
        model = model.for_mix(cap.prompt_tokens, out_tokens or 1.0)
    if (slo is not None and tpot is not None and finite(tpot) and tpot > slo) or preempting:
        target = current * 0.75
        if slo is not None:
            target = min(target, model.batch_for_step(_tpot_step_budget(slo, offset)))
            target /= config.batch_fill
        # At most half per change: the model's batch for a step budget extrapolates far below
        # what it has seen (on a decode-heavy load with a 15 ms TPOT it asked for 256 → 32, and
        # the capped replicas then queued), and the next change may go further, once measured.
        target = max(target, current * 0.5)
        new = max(lo, min(current - 8, _round_down(target)))
        if new < current:
            why = f"p99 TPOT {fmt_ms(tpot)} over SLO" if not preempting else "KV cache preempting"
            return new, why
        return None
    if cap.bound != "max batch" or replica.batch is None:
        return None
    # The batch cap binds: how far could it go before TPOT, the KV cache or the step time
    # (which every prefill waits for) take over?
    room = [model.batch_for_step(config.ttft_slo_s / 4.0)]
    if slo is not None:
        room.append(model.batch_for_step(_tpot_step_budget(slo, offset)))
    if replica.kv_per_seq is not None:
        room.append(0.85 / replica.kv_per_seq)
    target = min(min(room) / config.batch_fill, 2.0 * current, float(hi))
    new = _round_down(target)
    if new < current * 1.25 or replica.batch < 0.75 * current * config.batch_fill:
        return None
    # Worth a rolling restart only if the fleet then needs at least one replica fewer.
    bigger = capacity(
        full,
        RequestMix(out_tokens or 1.0, cap.prompt_tokens, replica.kv_per_seq),
        Batching(new, config.batch_fill),
        Slo(slo, offset),
    )
    u = planned_utilization(config)
    if ceil_replicas(demand / (bigger.rate * scale * u)) >= ceil_replicas(demand / (cap.rate * scale * u)):
        return None
    return new, f"batch cap binds with headroom (batch {replica.batch:.0f} of {current})"
