"""The one entry point: ``decide(config, state, observation, now) -> (Decision, PolicyState)``.

Order of work, every interval:

1. Check the data. Missing, stale or NaN data holds the current size (clamped to the bounds)
   and leaves the state untouched: a result with ``valid=False``, never a change.
2. Learn: the step-time line, mean output length, the TPOT ratio and the arrival-rate trend.
3. Size: replicas = load ÷ (capacity per replica × target utilization), where the load is the
   larger of the arrival rate now and its forecast over one replica start-up. When the SLO is
   broken the queue is added as load to drain, the model is corrected down to what replicas
   really sustain, and scale-down is off. Starting replicas are part of the current count, so a
   burst asks for what it needs once rather than one more replica per interval.
4. Limit, in this order: hysteresis (scale down only when the load fits with a margin),
   stabilization (up: the smallest recommendation of its window; down: the largest), the
   scale-up rate, Pending pods (no more replicas while GPUs are missing), the bounds.
5. Tune max batch, rate-limited, never during a rollout or while replicas start, and with one
   replica of headroom for the rolling restart.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TypeVar

from tailguard.policy.budget import Headroom, adjust_gain, headroom, record_attainment, record_load
from tailguard.policy.capacity import (
    Capacity,
    StepModel,
    anchored_model,
    capacity,
    implied_base,
    step_model,
    update_fit,
    update_prefill_fit,
)
from tailguard.policy.schedules import scheduled_floor
from tailguard.policy.signals import Derived, breach, check, derive, finite, is_idle
from tailguard.policy.types import Decision, Limit, Observation, PolicyConfig, PolicyState, Reason

#: Smoothing of the arrival rate (Holt's linear method, per decision).
_LEVEL_GAIN = 0.5
_TREND_GAIN = 0.2
#: A trend counts only when it adds this share of the load over the horizon.
_TREND_SIGNIFICANT = 0.08
#: After the ready count changes, rate windows mix two fleet sizes for this long.
_SETTLE_S = 120.0
#: Bounds of the learned correction of the capacity model.
_SCALE_MIN, _SCALE_MAX = 0.2, 2.0
#: How fast a saturated replica's own queue should empty once help arrives.
_DRAIN_S = 60.0
#: Requests in flight above the window's mean batch by this factor mean a rising load (noise stays under it).
_SURGE = 1.3
#: A surge this large is a jump: the rate window then ramps up for one window to catch up with it.
_JUMP = 1.5
#: TPOT-to-step ratio assumed before one is measured.
_DEFAULT_TPOT_RATIO = 1.25


def _target(config: PolicyConfig) -> float:
    """The share of the learned capacity to plan for, after the user's headroom."""
    return config.target_utilization / (1.0 + max(0.0, config.headroom))


def _clamp(config: PolicyConfig, replicas: int) -> tuple[int, list[str]]:
    if replicas < config.min_replicas:
        return config.min_replicas, [Limit.MIN_REPLICAS.value]
    if replicas > config.max_replicas:
        return config.max_replicas, [Limit.MAX_REPLICAS.value]
    return replicas, []


def _schedule_floor(
    config: PolicyConfig, now: float, replicas: int, code: Reason, parts: list[str], limits: list[str]
) -> tuple[int, Reason]:
    """Raise ``replicas`` to the floor of the open schedule windows (at most ``max_replicas``),
    naming the window in ``parts`` and ``limits``; the reason becomes ``Scheduled`` unless the
    SLO is broken. Applied to the decision only: the recommendations the stabilization windows
    keep stay the load's, so a window that closed holds nothing afterwards."""
    floor = scheduled_floor(config.schedules, now)
    held = min(floor.replicas, config.max_replicas)
    if held <= replicas:
        return replicas, code
    names = " and ".join(f"'{name}'" for name in floor.holding)
    parts.append(f"schedule {names} hold{'s' if len(floor.holding) == 1 else ''} ≥ {held}")
    # The declared floor supersedes minReplicas as the bound that holds the fleet up.
    limits[:] = [limit for limit in limits if limit != Limit.MIN_REPLICAS.value]
    limits.append(Limit.SCHEDULE.value)
    return held, code if code is Reason.SLO_BREACH else Reason.SCHEDULED


def _ceil(replicas: float) -> int:
    """Round a replica need up, forgiving float noise (3.0001 is 3) and absurd inputs."""
    if not math.isfinite(replicas):
        return 1_000_000 if replicas > 0 else 0
    return max(0, min(1_000_000, math.ceil(replicas - 0.02)))


def _ewma(old: float | None, new: float, gain: float) -> float:
    return new if old is None else old + gain * (new - old)


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None or not math.isfinite(seconds) else f"{seconds * 1e3:.0f} ms"


def decide(
    config: PolicyConfig, state: PolicyState, observation: Observation, now: float
) -> tuple[Decision, PolicyState]:
    """Decide replicas and max batch for one service. Pure and deterministic."""
    obs = observation
    current = obs.desired_replicas
    problem = check(config, obs, now)
    if problem is not None:
        held, held_limits = _clamp(config, current)
        sentence = f"{problem.sentence}; holding {held} replica{'s' if held != 1 else ''}"
        return (
            Decision(held, obs.max_batch, False, problem.code, sentence, tuple(held_limits)),
            state,
        )

    if state.started_at is None:
        # A fresh start (or a lost annotation): remember the current size as a recommendation,
        # so nothing scales down before a full window of our own observations.
        state = replace(PolicyState(), started_at=now, recommendations=((now, current),))
    elapsed = config.interval_s if state.last_valid_at is None else now - state.last_valid_at
    elapsed = min(max(elapsed, 0.0), 20.0 * config.interval_s)

    derived = derive(obs)
    broken = breach(config, obs)
    idle = is_idle(obs)

    ready_changed_at = state.ready_changed_at
    if state.ready is None or state.ready != obs.ready_replicas:
        ready_changed_at = now
    settled = (
        ready_changed_at is not None
        and now - ready_changed_at >= _SETTLE_S
        and obs.starting_replicas == 0
        and not obs.rollout_in_progress
    )

    # -- learn ------------------------------------------------------------------------------
    waiting = obs.waiting or 0.0
    fit = state.fit
    prefill_fit = state.prefill_fit
    floor = state.step_floor_s
    prompt_tokens = state.prompt_tokens
    if derived.prompt_tokens is not None:
        prompt_tokens = _ewma(prompt_tokens, derived.prompt_tokens, 0.2)
    # Prompt tokens prefilled per step: measured, or (the prompt rate missing this once) the
    # remembered prompt length at this window's request rate.
    prefill_x = derived.prefill_tokens
    if prefill_x is None and prompt_tokens is not None and derived.step_s is not None:
        prefill_x = prompt_tokens * (derived.per_replica_rate or 0.0) * derived.step_s
    if derived.batch is not None and derived.step_s is not None and not obs.rollout_in_progress:
        # The base step this pair implies if it lies on the prior curve; at a small batch that is
        # the step itself, at a large one it is not fooled into taking a full step for the base,
        # nor, with long prompts, into taking their chunks for it.
        base = implied_base(derived.batch, derived.step_s, prefill_x or 0.0)
        # Not in a breach: the steps of a queued engine carry the prompts of the queue too, and
        # fitting them would make the curve steep and the capacity low long after the burst.
        if derived.fit_material and not broken:
            fit = update_fit(fit, derived.batch, derived.step_s, elapsed)
            prefill_fit = update_prefill_fit(
                prefill_fit, derived.batch, prefill_x or 0.0, derived.step_s, elapsed
            )
            floor = base if floor is None else min(floor, base)
    out_tokens = state.output_tokens
    if derived.output_tokens is not None:
        out_tokens = _ewma(out_tokens, derived.output_tokens, 0.2)
    offset = state.tpot_offset_s
    tpot = obs.p99_tpot_s
    tpot_ok = (
        config.tpot_slo_s is not None
        and tpot is not None
        and finite(tpot)
        and tpot <= 0.9 * config.tpot_slo_s
    )
    if (
        config.tpot_slo_s is not None
        and tpot is not None
        and finite(tpot)
        and derived.step_s
        and tpot >= 0.4 * config.tpot_slo_s
        and not broken
        and waiting <= 0
    ):
        # Learn the gap only near the SLO: far below it the p99 sits in a wide bucket and its
        # interpolation says little; in a breach the queue's prefill storms widen it.
        gap = min(config.tpot_slo_s, max(0.0, tpot - derived.step_s))
        offset = _ewma(offset, gap, 0.2)

    rate = obs.request_rate or 0.0
    # Finished requests per second lag arrivals by what piles up in (or empties from) the
    # engines: over the rate window, arrivals = finished + the change of requests in flight
    # (Little's law). Right after help arrives the engines empty and finish faster than requests
    # come; right after a surge they fill up.
    in_flight_now = (obs.running or 0.0) + waiting
    assert obs.sample_time is not None
    in_flight_history = _prune_in_flight(state.in_flight, obs.sample_time, config)
    flow = _in_flight_change(in_flight_history, obs.sample_time, in_flight_now, derived.serving, config)
    in_flight_history = (*in_flight_history, (obs.sample_time, in_flight_now, derived.serving))
    flowed = max(0.0, rate + flow) if flow is not None else rate
    # Finished requests per second. Under overload that is only what the replicas sustain: the
    # growth of the queue since the last decision is demand too.
    arrivals = rate
    # Rates lag by the window; the running and waiting gauges do not. When the requests in the
    # engines now outnumber the window's mean batch, the load is rising now: scale the rate by
    # that surge (Little's law: requests in flight grow with arrivals). Both counts are per
    # serving replica, so a scale-up within the window fakes none. After a scale-down each
    # replica runs more, and slower, by design: the bar rises by the share of replicas removed
    # within the window (more than slower steps add), so a real surge still shows through.
    same_fleet = ready_changed_at is not None and now - ready_changed_at >= _SETTLE_S
    fleet_then = max((row[2] for row in in_flight_history), default=derived.serving)
    surge_bar = _SURGE * max(1.0, fleet_then / max(1, derived.serving))
    surge = 1.0
    if derived.fit_material and derived.batch and derived.serving and derived.batch >= 1.0:
        # Running only: a queue says the same thing again, and is counted as its growth below.
        in_flight = (obs.running or 0.0) / derived.serving
        surge = min(2.0, in_flight / derived.batch)
    surging = surge > surge_bar
    jump_at = now if surging and surge >= _JUMP else state.jump_seen_at
    if surging:
        arrivals = max(arrivals, rate * surge)
    if broken and waiting > 0 and state.waiting is not None and elapsed > 0:
        arrivals += max(0.0, (waiting - state.waiting) / elapsed)
    # The in-flight change corrects the rate both ways when all is calm; while the SLO is broken
    # or the engines surge it may only add (what the replicas finish is then the least demand).
    arrivals = max(arrivals, flowed) if broken or surging else flowed
    # The level and trend follow the window's arrivals only. The surge and the queue's growth
    # are a reading of the load now; fed into the trend as well, one step of the load would be
    # extrapolated as a ramp over the whole start-up horizon.
    observed = max(flowed, rate) if broken else flowed
    if state.rate_level is None or elapsed <= 0:
        level, trend = observed, 0.0
    else:
        predicted = state.rate_level + state.rate_trend * elapsed
        level = predicted + _LEVEL_GAIN * (observed - predicted)
        trend = state.rate_trend + _TREND_GAIN * ((level - state.rate_level) / elapsed - state.rate_trend)
    level = max(0.0, level)

    # A queue: more requests waiting than replicas, so no replica is left with a free slot.
    queued = waiting > max(1, derived.serving)
    # The p99s span the rate window: a breach read within one window of a queue may be only that
    # queue's tail, already gone. Such a breach says nothing about the model or the max batch.
    queue_at = now if queued else state.queue_seen_at
    queue_gone = queue_at is None or now - queue_at > config.rate_window_s

    # Without any prompt-token rate the fit has one feature and the prompts of the mix are in β.
    model = step_model(fit, floor, prefill_fit if prompt_tokens is not None else None)
    note = None if prompt_tokens is not None else "prefill cost not learned: no prompt token rate"
    if not derived.fit_material and derived.batch is not None and derived.step_s is not None:
        # Without the latency mean the step is running ÷ token rate, which moves with the running
        # gauge by construction: no slope can be learned from it. Use the prior curve's shape
        # through this observation instead, so the capacity is anchored at what is served now.
        model = anchored_model(derived.batch, derived.step_s, prefill_x or 0.0)
        if prompt_tokens is not None:
            note = "prefill cost from the prior: no inter-token latency"
    elif model is not None and prompt_tokens is not None and not model.prefill_learned:
        note = "prefill cost from the prior: few prompt tokens seen"
    cap = _capacity(config, model, out_tokens, obs.max_batch, offset, derived, tpot_ok, prompt_tokens, note)
    scale = state.capacity_scale
    if cap is not None and derived.per_replica_rate is not None and not idle:
        per = derived.per_replica_rate
        ttft_ok = obs.p99_ttft_s is not None and obs.p99_ttft_s <= 0.6 * config.ttft_slo_s
        steady = not surging and trend * config.startup_s <= _TREND_SIGNIFICANT * max(level, 1e-9)
        # A breach with a queue is saturation, sized from what the replicas finish; a breach
        # without one at a steady load and a settled fleet means the model promised too much.
        if broken and settled and steady and waiting <= 0 and queue_gone:
            # The SLO broke at this load per replica: the replica sustains less than that
            # (at most a 30% cut per decision: one odd window must not halve the fleet's worth).
            scale = max(0.7 * scale, min(scale, 0.95 * per / cap.rate))
        elif not broken and ttft_ok and waiting <= 0 and settled:
            # Met with margin at this load: the replica sustains at least that, and an old cut
            # fades (10% per five healthy minutes) so one bad episode is not remembered forever.
            recovered = min(1.0, scale * (1.0 + 0.1 * elapsed / 300.0)) if scale < 1.0 else scale
            scale = max(recovered, per / cap.rate)
        scale = min(_SCALE_MAX, max(_SCALE_MIN, scale))
    per_replica = cap.rate * scale if cap is not None else None
    saturated = (
        broken and queued and same_fleet and not obs.rollout_in_progress and bool(derived.per_replica_rate)
    )
    if saturated:
        # Saturated replicas finish what they can: that is the capacity to size with now (only
        # when the same replicas served the whole window, which holds while new ones start; a
        # window that mixes fleet sizes would understate it).
        per_replica = derived.per_replica_rate

    # -- size -------------------------------------------------------------------------------
    horizon = config.startup_s
    # The trend of finished requests means little while the queue grows; use it only when healthy.
    # Nor right after a start: the first windows fill up and look like growth.
    warmed_up = state.started_at is not None and now - state.started_at >= 2 * _SETTLE_S
    # Within one rate window of a jump the window's mean climbs to the new load: a trend that
    # says nothing of what comes next (the surge has sized for the jump already). Extrapolated
    # over the start-up it would ask for most of the jump again.
    catching_up = jump_at is not None and now - jump_at <= config.rate_window_s
    rising = warmed_up and not broken and not catching_up and trend * horizon > _TREND_SIGNIFICANT * level
    forecast = level + trend * horizon if rising else level
    # A fall the trend confirms is no blip: the rate window's mean is half a window old, so the
    # load now is lower still, and the hysteresis band (which keeps a flat load near a boundary
    # from flapping) is not needed to tell it from noise. A scale-down waits out its window, so
    # a fall counts when it sheds a significant share of the load over that window.
    fall_horizon = max(horizon, config.scale_down_stabilization_s)
    falling = warmed_up and not broken and -trend * fall_horizon > _TREND_SIGNIFICANT * level
    nowcast = max(0.0, level + trend * 0.5 * config.rate_window_s) if falling else level
    demand = max(arrivals, level)
    parts: list[str] = []
    # What the load needs at the healthy capacity: the figure the stabilization windows keep
    # (a breach's emergency sizing is not worth holding for twenty minutes).
    healthy_capacity = cap.rate * scale if cap is not None else None
    sized: int | None = None
    if healthy_capacity is not None and healthy_capacity > 0 and not idle:
        sized = _ceil(max(flowed, level) / (healthy_capacity * _target(config)))
    load_now = max(flowed, level)
    peaks = _prune_peaks(state.load_peaks, now, config)
    if not idle and config.burst_reserve > 0:
        peaks = (*peaks, (now, load_now))
    peak_at, peak_load = max(peaks, key=lambda p: p[1], default=(now, 0.0))
    reserve: int | None = None
    if config.burst_reserve > 0 and healthy_capacity and peak_load > load_now and not idle:
        reserve_load = load_now + min(1.0, config.burst_reserve) * (peak_load - load_now)
        reserve = _ceil(reserve_load / (healthy_capacity * _target(config)))
    # The error budget's headroom: hold the load the service may meet before a replica asked
    # for now is ready, at the quantile of its history the budget allows (see ``budget``).
    budget = max(1e-4, 1.0 - config.goodput_target)
    startup = _startup_horizon(config, obs)
    memory = record_load(state.budget, now, 0.0 if idle else demand, elapsed, startup)
    good_now = _good_share(obs)
    memory = record_attainment(memory, good_now, rate, elapsed)
    memory = adjust_gain(memory, budget, elapsed, good_now is not None and good_now < config.goodput_target)
    room = headroom(memory, budget)
    hold: int | None = None
    held_load = 0.0
    if config.budget_headroom and room.learned and healthy_capacity and healthy_capacity > 0 and not idle:
        held_load = min(load_now * room.ratio, max(room.peak, load_now)) * room.margin
        hold = _ceil(held_load / healthy_capacity)
    if idle:
        recommended = config.min_replicas
        code = Reason.IDLE
        parts.append("no requests")
    elif per_replica is None or per_replica <= 0:
        # Nothing to size with yet (no finished request): act only on a broken SLO.
        recommended = current + 1 if broken and obs.starting_replicas == 0 else current
        code = Reason.SLO_BREACH if broken else Reason.STEADY
        parts.extend(broken or [f"p99 TTFT {_ms(obs.p99_ttft_s)}"])
        parts.append("capacity not learned yet")
    else:
        u = _target(config)
        plain = _ceil(max(demand, forecast) / (per_replica * u))
        on_the_way = obs.starting_replicas + obs.pending_replicas
        up = plain
        if broken and not on_the_way:
            # Each saturated replica keeps its own queue (the Service does not move requests),
            # so it drains only by the margin between its capacity and its share of arrivals:
            # size the fleet so that margin empties the queue within _DRAIN_S. Once replicas
            # are on the way this extra is not asked for again: the queue grows while they
            # start whatever is done, and asking again would cascade.
            queue_each = waiting / max(1, derived.serving)
            margin = max(0.5 * per_replica, per_replica - queue_each / _DRAIN_S)
            up = max(up, _ceil(demand / margin))
        down_u = u if falling else max(0.05, u - config.scale_down_margin)
        down = _ceil((min(demand, max(flowed, nowcast)) if falling else demand) / (per_replica * down_u))
        if up > current and broken and on_the_way and up <= math.ceil(current * 1.2):
            # Replicas are starting for this breach: wait for them unless the need grew clearly.
            recommended = current
        elif up > current:
            recommended = up
        elif broken:
            recommended = current
            if settled and obs.pending_replicas == 0:
                # The model sees room, yet the SLO is broken: add a replica anyway.
                recommended = current + 1
        else:
            recommended = min(current, down) if down < current else current
        holding = hold is not None and hold > recommended and not broken
        if hold is not None and holding:
            recommended = hold
        reserved = reserve is not None and reserve > recommended
        if reserve is not None and reserved:
            # Headroom for a burst like the last one: it will be here before new replicas are.
            recommended = reserve
        code = (
            Reason.SLO_BREACH
            if broken
            else (
                Reason.LOAD_RISING
                if recommended > current
                else Reason.LOAD_FALLING
                if recommended < current
                else Reason.STEADY
            )
        )
        parts.extend(broken or [f"p99 TTFT {_ms(obs.p99_ttft_s)} within SLO {_ms(config.ttft_slo_s)}"])
        load = f"load {demand:.1f} req/s"
        if forecast > demand * 1.01:
            load += f" (forecast {forecast:.1f} in {horizon:.0f} s)"
        parts.append(load)
        if reserved:
            parts.append(f"reserve for {peak_load:.1f} req/s seen {now - peak_at:.0f} s ago")
        if holding:
            parts.append(_holding_sentence(hold, held_load, room, startup))
        if saturated:
            parts.append(f"capacity {per_replica:.1f} req/s per replica (measured, saturated)")
        elif cap is not None:
            parts.append(f"capacity {per_replica:.1f} req/s per replica ({cap.explain()})")

    # -- limit ------------------------------------------------------------------------------
    last_breach = now if broken else state.last_breach_at
    declared_window = config.scale_down_stabilization_s
    down_window = declared_window
    holding = config.burst_hold_s > config.scale_down_stabilization_s
    if holding and last_breach is not None and now - last_breach < config.burst_memory_s:
        down_window = max(down_window, config.burst_hold_s)
    # In a breach remember what the load needs at the healthy capacity, not the emergency size,
    # but never less than the fleet serving now: the healthy need may be far smaller (the model
    # was wrong, which is why the SLO broke), and once the breach ends the window's largest entry
    # would then let the whole fleet go in one decision.
    remembered = recommended if sized is None or not broken else max(current, min(recommended, sized))
    history = (*_prune(state.recommendations, now, config), (now, remembered))
    final = recommended
    limits: list[str] = []
    if final < current:
        if broken:
            final = current
        else:
            window = [(t, r) for t, r in history if now - t <= down_window]
            largest = max(r for _, r in window)
            if largest > final:
                final = min(current, largest)
                limits.append(_down_limit(window, largest, now, declared_window, state.started_at).value)
            kept = _kept_by_rate_limit(config, state.fleet_sizes, now, down_window)
            if final < kept:
                final = min(current, kept)
                limits.append(Limit.SCALE_DOWN_RATE.value)
            if final < current and obs.rollout_in_progress:
                final = current
                limits.append(Limit.ROLLOUT.value)
    elif final > current and config.scale_up_stabilization_s > 0:
        recent = [r for t, r in history if now - t <= config.scale_up_stabilization_s]
        stable = max(current, min(recent))
        if stable < final:
            final = stable
            limits.append(Limit.STABILIZATION.value)
    ceiling = max(math.ceil(current * config.scale_up_limit_factor), current + config.scale_up_limit_pods)
    if final > ceiling:
        final = ceiling
        limits.append(Limit.SCALE_UP_RATE.value)
    if obs.pending_replicas > 0 and (final > current or broken):
        # Pods waiting for GPUs are not capacity, and more of them would not be either.
        final = min(final, current)
        limits.append(Limit.PENDING_GPUS.value)
        if code is not Reason.SLO_BREACH:
            code = Reason.PENDING_GPUS
    final, bound_limits = _clamp(config, final)
    limits.extend(bound_limits)
    final, code = _schedule_floor(config, now, final, code, parts, limits)

    # -- max batch --------------------------------------------------------------------------
    max_batch = obs.max_batch
    last_change = state.last_max_batch_change_at
    if model is not None and cap is not None and per_replica is not None and not idle:
        proposal = None
        if settled and not (broken and waiting > 0) and (queue_gone or not broken):
            proposal = _tune_max_batch(config, obs, model, cap, offset, derived, demand, scale, out_tokens)
        if proposal is not None:
            new_batch, why = proposal
            if obs.rollout_in_progress:
                limits.append(Limit.ROLLOUT.value)
            elif last_change is not None and now - last_change < config.max_batch_change_interval_s:
                limits.append(Limit.MAX_BATCH_INTERVAL.value)
            elif (
                obs.starting_replicas == 0
                and obs.pending_replicas == 0
                and (new_batch < obs.max_batch or final <= current)
            ):
                new_cap = _capacity(
                    config, model, out_tokens, new_batch, offset, derived, False, prompt_tokens, None
                )
                slower = min(per_replica, new_cap.rate * scale if new_cap else per_replica)
                # Each pod restarts in turn: keep one replica spare for the one that is down.
                during = _ceil(demand / (slower * _target(config))) + 1
                if during <= config.max_replicas:
                    max_batch = new_batch
                    last_change = now
                    final = max(final, min(config.max_replicas, during))
                    code = Reason.MAX_BATCH_RAISED if new_batch > obs.max_batch else Reason.MAX_BATCH_LOWERED
                    parts.append(f"max batch {obs.max_batch} → {new_batch}: {why}")

    # -- explain and remember ---------------------------------------------------------------
    parts.append(f"→ {final} replica{'s' if final != 1 else ''}")
    if obs.starting_replicas:
        parts.append(f"{obs.starting_replicas} starting")
    if obs.pending_replicas:
        parts.append(f"{obs.pending_replicas} pending")
    if limits:
        parts.append("limited by " + ", ".join(dict.fromkeys(limits)))

    direction = (final > current) - (final < current)
    new_state = replace(
        state,
        budget=memory,
        fleet_sizes=_remember_size(state.fleet_sizes, now, max(current, final), config),
        last_valid_at=now,
        recommendations=history,
        rate_level=level,
        rate_trend=trend,
        waiting=waiting,
        output_tokens=out_tokens,
        fit=fit,
        prefill_fit=prefill_fit,
        prompt_tokens=prompt_tokens,
        step_floor_s=floor,
        tpot_offset_s=offset,
        capacity_scale=scale,
        ready=obs.ready_replicas,
        ready_changed_at=ready_changed_at,
        last_scale_at=now if direction else state.last_scale_at,
        last_direction=direction if direction else state.last_direction,
        last_max_batch_change_at=last_change,
        last_breach_at=last_breach,
        in_flight=in_flight_history,
        load_peaks=peaks,
        queue_seen_at=queue_at,
        jump_seen_at=jump_at,
    )
    decision = Decision(
        replicas=final,
        max_batch=max_batch,
        valid=True,
        reason_code=code,
        reason="; ".join(parts),
        limits=tuple(dict.fromkeys(limits)),
        recommended=recommended,
        capacity_per_replica=per_replica,
    )
    return decision, new_state


def _prune(
    history: tuple[tuple[float, int], ...], now: float, config: PolicyConfig
) -> tuple[tuple[float, int], ...]:
    """The recommendations the stabilization windows can still use.

    Everything within the scale-up window is kept (its minimum is taken); older entries only
    when no newer one is as large (the scale-down window takes the maximum), which keeps the
    annotation short however long the window.
    """
    longest = max(config.scale_down_stabilization_s, config.burst_hold_s, config.scale_up_stabilization_s)
    kept: list[tuple[float, int]] = []
    newer_max = -1
    for t, r in reversed(history):
        age = now - t
        if age >= longest:
            break
        if age < config.scale_up_stabilization_s or r > newer_max:
            kept.append((t, r))
        newer_max = max(newer_max, r)
    return tuple(reversed(kept))


def _startup_horizon(config: PolicyConfig, obs: Observation) -> float:
    """Seconds from asking for a replica to its serving: measured from the service's pods when
    reported, else the configured figure."""
    measured = obs.startup_s
    if measured is not None and math.isfinite(measured) and 0 < measured < 3600:
        return measured
    return config.startup_s


def _good_share(obs: Observation) -> float | None:
    """The share of the window's requests that met every SLO (goodput, else the TTFT share)."""
    for value in (obs.goodput, obs.ttft_within_slo):
        if value is not None and math.isfinite(value):
            return value
    return None


def _holding_sentence(hold: int | None, load: float, room: Headroom, startup_s: float) -> str:
    burn = "" if room.burn_long is None else f"; error budget burning at {room.burn_long:.1f}×"
    return (
        f"holding {hold} for {load:.1f} req/s: p{room.quantile * 100:.4g} of the load within "
        f"{startup_s:.0f} s in its history{burn}"
    )


def _kept_by_rate_limit(
    config: PolicyConfig, sizes: tuple[tuple[float, int], ...], now: float, window_s: float
) -> int:
    """The fewest replicas the scale-down rate allows now: the largest fleet set within the
    window, less ``scale_down_limit_fraction`` of it (rounded so that one replica may always go)."""
    largest = max((n for t, n in sizes if 0 <= now - t <= window_s), default=0)
    if largest <= 1:
        return 0
    fraction = min(1.0, max(0.0, config.scale_down_limit_fraction))
    return min(largest - 1, math.ceil(largest * (1.0 - fraction) - 1e-9))


def _remember_size(
    sizes: tuple[tuple[float, int], ...], now: float, replicas: int, config: PolicyConfig
) -> tuple[tuple[float, int], ...]:
    """Add this decision's fleet to the sizes the scale-down rate reads, keeping only entries
    within the longest down window that are larger than every newer one (a short list)."""
    longest = max(config.scale_down_stabilization_s, config.burst_hold_s)
    return _larger_than_newer((*sizes, (now, replicas)), now, longest)


def _down_limit(
    recent: list[tuple[float, int]], stable: int, now: float, declared_s: float, started_at: float | None
) -> Limit:
    """Which rule the largest recommendation of the window stands for.

    The size recorded at a (re)start is the cautious start; one older than the declared window,
    kept only because a breach extended it, is the burst hold; otherwise the stabilization.
    """
    binding = [t for t, r in recent if r >= stable]
    if any(now - t <= declared_s and t != started_at for t in binding):
        return Limit.STABILIZATION
    if any(t == started_at for t in binding):
        return Limit.CAUTIOUS_START
    return Limit.BURST_HOLD


def _prune_peaks(
    peaks: tuple[tuple[float, float], ...], now: float, config: PolicyConfig
) -> tuple[tuple[float, float], ...]:
    """The loads the burst reserve remembers: within ``burst_memory_s``, each larger than every
    newer one (so the list stays short and its largest entry is the recent peak)."""
    if config.burst_reserve <= 0:
        return ()
    return _larger_than_newer(peaks, now, config.burst_memory_s)


_Size = TypeVar("_Size", int, float)


def _larger_than_newer(
    entries: tuple[tuple[float, _Size], ...], now: float, window_s: float
) -> tuple[tuple[float, _Size], ...]:
    """The ``(time, value)`` entries within ``window_s`` of ``now`` that are larger than every newer
    one: the largest value over any later window is the same, and the list stays short."""
    kept: list[tuple[float, _Size]] = []
    newer_max: float = -math.inf
    for t, value in reversed(entries):
        if now - t >= window_s or t > now:
            continue
        if value > newer_max:
            kept.append((t, value))
            newer_max = value
    return tuple(reversed(kept))


def _prune_in_flight(
    history: tuple[tuple[float, float, int], ...], sample_time: float, config: PolicyConfig
) -> tuple[tuple[float, float, int], ...]:
    """The in-flight samples one rate window can still use (older ones, and any from the future
    of this sample after a clock step, are dropped)."""
    oldest = sample_time - config.rate_window_s - 2 * config.interval_s
    return tuple(row for row in history if oldest <= row[0] < sample_time)


def _in_flight_change(
    history: tuple[tuple[float, float, int], ...],
    sample_time: float,
    in_flight: float,
    serving: int,
    config: PolicyConfig,
) -> float | None:
    """Requests per second added to the engines over about one rate window, or ``None``.

    ``None`` without a sample from at least half a window ago, and when fewer replicas serve
    now than then: a removed pod's requests leave the sum without finishing, which is no fall
    of arrivals.
    """
    start = sample_time - config.rate_window_s
    usable = [row for row in history if sample_time - row[0] >= 0.5 * config.rate_window_s]
    if not usable:
        return None
    t, then, serving_then = min(usable, key=lambda row: abs(row[0] - start))
    if serving < serving_then:
        return None
    # Requests in flight jitter by about the square root of their number (arrivals and
    # finishes are random): only the change beyond twice that is a trend of arrivals.
    change = in_flight - then
    noise = 2.0 * math.sqrt(max(0.0, in_flight) + max(0.0, then))
    change = math.copysign(max(0.0, abs(change) - noise), change)
    return change / (sample_time - t)


def _capacity(
    config: PolicyConfig,
    model: StepModel | None,
    out_tokens: float | None,
    max_batch: int,
    offset: float | None,
    derived: Derived,
    tpot_ok: bool,
    prompt_tokens: float | None,
    note: str | None,
) -> Capacity | None:
    if model is None or out_tokens is None:
        return None
    return capacity(
        model,
        output_tokens=out_tokens,
        max_batch=max_batch,
        batch_fill=config.batch_fill,
        tpot_slo_s=config.tpot_slo_s,
        tpot_offset_s=offset,
        kv_per_seq=derived.kv_per_seq,
        batch_now=derived.batch,
        tpot_ok_now=tpot_ok,
        prompt_tokens=prompt_tokens,
        # The modelled TTFT bound (``capacity.ttft_p99``) is not applied: with long prompts of
        # widely spread lengths it read a queueing tail that the prompt's own prefill makes, and on
        # the long-context benchmark held 32 replicas where a flat 8 reach the target (31.8
        # GPU-h at 0.9989; without it 10.9 at 0.9942). A broken TTFT still corrects the capacity.
        ttft_slo_s=None,
        note=note,
    )


def _tpot_step_budget(slo: float, offset: float | None) -> float:
    """The mean step that keeps p99 TPOT at 85% of its SLO."""
    return 0.85 * slo - offset if offset is not None else 0.85 * slo / _DEFAULT_TPOT_RATIO


def _round_down(value: float, step: int = 8) -> int:
    if not math.isfinite(value):
        return 1_000_000 if value > 0 else step
    return max(step, int(value // step) * step)


def _tune_max_batch(
    config: PolicyConfig,
    obs: Observation,
    model: StepModel,
    cap: Capacity,
    offset: float | None,
    derived: Derived,
    demand: float,
    scale: float,
    out_tokens: float | None,
) -> tuple[int, str] | None:
    """A new max batch and why, or ``None`` to keep it."""
    lo, hi = config.max_batch_min, config.max_batch_max
    if not config.max_batch_tuning or lo >= hi:
        return None
    current = obs.max_batch
    tpot = obs.p99_tpot_s
    slo = config.tpot_slo_s
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
        new = max(lo, min(current - 8, _round_down(target)))
        if new < current:
            why = f"p99 TPOT {_ms(tpot)} over SLO" if not preempting else "KV cache preempting"
            return new, why
        return None
    if cap.bound != "max batch" or derived.batch is None:
        return None
    # The batch cap binds: how far could it go before TPOT, the KV cache or the step time
    # (which every prefill waits for) take over?
    room = [model.batch_for_step(config.ttft_slo_s / 4.0)]
    if slo is not None:
        room.append(model.batch_for_step(_tpot_step_budget(slo, offset)))
    if derived.kv_per_seq is not None:
        room.append(0.85 / derived.kv_per_seq)
    target = min(min(room) / config.batch_fill, 2.0 * current, float(hi))
    new = _round_down(target)
    if new < current * 1.25 or derived.batch < 0.75 * current * config.batch_fill:
        return None
    # Worth a rolling restart only if the fleet then needs at least one replica fewer.
    bigger = capacity(
        full,
        output_tokens=out_tokens or 1.0,
        max_batch=new,
        batch_fill=config.batch_fill,
        tpot_slo_s=slo,
        tpot_offset_s=offset,
        kv_per_seq=derived.kv_per_seq,
        prompt_tokens=cap.prompt_tokens,
    )
    u = _target(config)
    if _ceil(demand / (bigger.rate * scale * u)) >= _ceil(demand / (cap.rate * scale * u)):
        return None
    return new, f"batch cap binds with headroom (batch {derived.batch:.0f} of {current})"
