"""What one replica sustains: the engine model learned from each window, and its correction.

Every valid window adds its (batch, step, prompt tokens per step) to the decayed fit of the
step-time curve (``capacity``), updates the mix (prompt and output tokens per request) and the
gap between p99 TPOT and the mean step. The capacity that model promises is then corrected by
what the SLO says: cut when it broke at a steady load, recovered when it held with margin.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tailguard.policy.arrivals import (
    Arrivals,
    burst_span_s,
    chance_ceiling,
    queue_waited,
    steady,
    window_serving,
)
from tailguard.policy.budget import burn_rate, planned_utilization
from tailguard.policy.capacity import (
    Batching,
    Capacity,
    Fit,
    MissCurve,
    PrefillFit,
    RequestMix,
    Slo,
    StepModel,
    anchored_model,
    capacity,
    implied_base,
    interference_s,
    step_model,
    update_fit,
    update_prefill_fit,
)
from tailguard.policy.observed import (
    ReplicaFigures,
    finite,
    good_share,
    poisson_tail,
    replica_figures,
    window_misses,
)
from tailguard.policy.state import PolicyState
from tailguard.policy.types import Observation, PolicyConfig
from tailguard.policy.window import Window

#: A window's prefill time is one step of the curve while the prompts arriving during it bring
#: at most this share of a prompt's tokens.
_SHARED_STEP = 0.5
#: Bounds of the learned correction of the capacity model.
_SCALE_MIN, _SCALE_MAX = 0.2, 2.0
#: A breach that loses this many error budgets of the window's requests on a fleet the model
#: thought large enough cuts the correction by ``_BURST_CUT``.
_CUT_BUDGETS = 5.0
_BURST_CUT = 0.85
#: How unlikely those misses must be at that share before they count (one in a thousand: a
#: service decides every 15 s, and a cut is remembered for hours).
_CUT_SIGNIFICANCE = 0.001


@dataclass(frozen=True)
class EngineModel:
    """What the policy knows of the engine after this window (all of it kept in the state)."""

    fit: Fit
    prefill_fit: PrefillFit
    step_floor_s: float | None
    prompt_tokens: float | None
    output_tokens: float | None
    tpot_offset_s: float | None
    #: p99 TPOT sits below 90% of its SLO now.
    tpot_ok: bool
    #: Prompt tokens prefilled per step this window (measured, or from the remembered mix).
    prefill_tokens: float | None
    #: Seconds per prompt token the mean prefill time shows (smoothed; ``None``: never read).
    prompt_cost_s: float | None = None
    #: This window taught the step-time curve.
    curve_taught: bool = False


#: How long a service breaks its SLO in every window before such windows teach its curve.
_UNLEARNED_S = 600.0
#: A step-time curve no window taught for this long learns from windows that mix fleet sizes too.
_STALE_CURVE_S = 600.0


def teaching_figures(
    config: PolicyConfig,
    state: PolicyState,
    obs: Observation,
    replica: ReplicaFigures,
    load: Arrivals,
    window: Window,
    *,
    one_fleet: bool,
) -> tuple[ReplicaFigures, bool]:
    """The figures the curve may learn from this window, and whether they are one fleet's.

    A fleet that changes within every rate window (a day's ramp compressed into half an hour:
    55 minutes of it) would keep the curve of its first minutes, however wrong. Once nothing
    taught it for ``_STALE_CURVE_S``, a mixed window does, its sums divided by the replicas that
    served on average over it (``one_fleet``: the same replicas served the whole window).
    """
    now = window.now
    last = state.curve_taught_at if state.curve_taught_at is not None else state.started_at
    if one_fleet or last is None or now - last < _STALE_CURVE_S:
        return replica, one_fleet
    served = window_serving(load.in_flight, now, config.rate_window_s)
    if served is None:
        return replica, False
    return replica_figures(obs, served), True


def _ewma(old: float | None, new: float, gain: float) -> float:
    return new if old is None else old + gain * (new - old)


def learn_engine(
    config: PolicyConfig,
    state: PolicyState,
    obs: Observation,
    replica: ReplicaFigures,
    window: Window,
    *,
    one_fleet: bool,
) -> EngineModel:
    """Fold this window into the engine model. Windows of a breach or a rollout, and windows whose
    figures are not one fleet's (``one_fleet`` false: the fleet changed within the window, and its
    sums were not divided by the replicas that served on average over it), teach no curve."""
    elapsed, now, broken = window.elapsed, window.now, window.broken
    fit, prefill_fit, floor = state.fit, state.prefill_fit, state.step_floor_s
    taught = False
    prompt_tokens = state.prompt_tokens
    if replica.prompt_tokens is not None:
        prompt_tokens = _ewma(prompt_tokens, replica.prompt_tokens, 0.2)
    # Prompt tokens prefilled per step: measured, or (the prompt rate missing this once) the
    # remembered prompt length at this window's request rate.
    prefill_x = replica.prefill_tokens
    if prefill_x is None and prompt_tokens is not None and replica.step_s is not None:
        prefill_x = prompt_tokens * (replica.per_replica_rate or 0.0) * replica.step_s
    if replica.batch is not None and replica.step_s is not None and not obs.rollout_in_progress:
        # The base step this pair implies if it lies on the prior curve; at a small batch that is
        # the step itself, at a large one it is not fooled into taking a full step for the base,
        # nor, with long prompts, into taking their chunks for it.
        base = implied_base(replica.batch, replica.step_s, prefill_x or 0.0)
        # Not in a breach: the steps of a queued engine carry the prompts of the queue too, and
        # fitting them would make the curve steep and the capacity low long after the burst.
        # Nor while the rate window mixes fleet sizes: its sums hold the work of replicas that
        # left (or not yet that of new ones), and divided by the replicas reporting now they put
        # a few replicas' batch and prompts on one step, and a base step many times too small
        # (after 14 replicas fell to 1, 1.7 ms where the engine's is 7.4) held as the floor.
        # A service that breaks its SLO in every window (an SLO at the latency its prompts alone
        # take) would never learn its curve: once nothing was learned for ten minutes, a breach
        # with no request waiting for a slot teaches it too (its steps carry no queue's prompts).
        # (Not sooner: a new service's first breaches are mostly its start's queue.)
        unlearned = fit[0] < 1e-9 and state.started_at is not None and now - state.started_at >= _UNLEARNED_S
        calm = not broken or (unlearned and (obs.waiting or 0.0) <= 0.0)
        taught = replica.step_measured and calm and one_fleet
        if taught:
            fit = update_fit(fit, replica.batch, replica.step_s, elapsed)
            prefill_fit = update_prefill_fit(
                prefill_fit, replica.batch, prefill_x or 0.0, replica.step_s, elapsed
            )
            floor = base if floor is None else min(floor, base)
    prompt_cost = state.prompt_cost_s
    pair = _prefill_step(obs, replica, prefill_x)
    if (
        pair is not None
        and replica.batch is not None
        and one_fleet
        and not broken
        and not obs.rollout_in_progress
    ):
        # What the prompt's step took beyond the decodes it carried, per prompt token.
        x, seconds = pair
        known = step_model(fit, floor, prefill_fit)
        cost = (seconds - known.step(replica.batch)) / x if known is not None else 0.0
        if cost > 0:
            prompt_cost = _ewma(prompt_cost, cost, 0.2)
    out_tokens = state.output_tokens
    if replica.output_tokens is not None:
        out_tokens = _ewma(out_tokens, replica.output_tokens, 0.2)
    return EngineModel(
        fit=fit,
        prefill_fit=prefill_fit,
        step_floor_s=floor,
        prompt_tokens=prompt_tokens,
        output_tokens=out_tokens,
        tpot_offset_s=_tpot_offset(config, state, obs, replica, broken, prompt_tokens),
        tpot_ok=(
            config.tpot_slo_s is not None
            and obs.p99_tpot_s is not None
            and finite(obs.p99_tpot_s)
            and obs.p99_tpot_s <= 0.9 * config.tpot_slo_s
        ),
        prefill_tokens=prefill_x,
        prompt_cost_s=prompt_cost,
        curve_taught=taught,
    )


def _prefill_step(
    obs: Observation, replica: ReplicaFigures, prefill_x: float | None
) -> tuple[float, float] | None:
    """The window's mean prefill as one step of the curve: (prompt tokens in the step, its
    seconds), at the window's decode batch; ``None`` when it is no one step's.

    A prompt is prefilled in the step after it arrives, beside the decodes and the chunks of the
    prompts that arrived while it waited. While those fill much of a step, prompts wait for the
    budget they leave and span steps: the mean prefill time is then no one step's.
    """
    prefill_s, prompt = obs.prefill_time_mean_s, replica.prompt_tokens
    if prefill_s is None or not finite(prefill_s) or prefill_s <= 0 or not prompt or not replica.step_s:
        return None
    shared = (prefill_x or 0.0) / replica.step_s * prefill_s
    if shared > _SHARED_STEP * prompt:
        return None
    return prompt + shared, prefill_s


def _tpot_offset(
    config: PolicyConfig,
    state: PolicyState,
    obs: Observation,
    replica: ReplicaFigures,
    broken: bool,
    prompt_tokens: float | None,
) -> float | None:
    """How far p99 TPOT runs above the mean step beyond what the prompts' interference at this
    window's rate explains (:func:`~tailguard.policy.capacity.interference_s`), learned only near
    the SLO: far below it the p99 sits in a wide bucket and its interpolation says little; in a
    breach the queue's prefill storms widen it."""
    offset = state.tpot_offset_s
    slo, tpot = config.tpot_slo_s, obs.p99_tpot_s
    if (
        slo is not None
        and tpot is not None
        and finite(tpot)
        and replica.step_s
        and tpot >= 0.4 * slo
        and not broken
        and (obs.waiting or 0.0) <= 0
    ):
        explained = _interference_now(state, replica, prompt_tokens)
        offset = _ewma(offset, min(slo, max(0.0, tpot - replica.step_s - min(slo, explained))), 0.2)
    return offset


def _interference_now(state: PolicyState, replica: ReplicaFigures, prompt_tokens: float | None) -> float:
    """The modelled interference of this window's prompts at its rate per replica."""
    if prompt_tokens is None or not replica.per_replica_rate:
        return 0.0
    known = step_model(state.fit, state.step_floor_s, state.prefill_fit, state.prompt_cost_s)
    if known is None:
        return 0.0
    return interference_s(known, replica.per_replica_rate, prompt_tokens)


@dataclass(frozen=True)
class ReplicaCapacity:
    """What one replica sustains at the SLO, as modelled and as corrected."""

    #: The step-time curve used (``None``: not learned yet).
    model: StepModel | None
    #: What the model promises at the current max batch (``None``: nothing to size with).
    modelled: Capacity | None
    #: The learned correction (≤ 1 after breaches, kept in the state).
    scale: float
    #: The modelled capacity × the correction: what the load is sized against when healthy.
    healthy: float | None
    #: The capacity to size with now: ``healthy``, or, when saturated, what replicas finish.
    per_replica: float | None
    #: Saturated replicas: the capacity is what they measurably finish.
    saturated: bool
    #: The share of ``healthy`` a burst meets without breaking the SLO (from the modelled prefill
    #: queue, what the replicas sustained over a rate window, and the bursts that broke it on a
    #: fleet held for them; ≤ 1): what the error budget's hold sizes with.
    burst_scale: float = 1.0
    #: When a burst's breach last cut ``burst_scale``.
    cut_at: float | None = None
    #: The most one replica sustains (req/s), learned while the error budget burned on a fleet
    #: that did not settle; it bounds ``healthy`` (``None``: no bound).
    ceiling: float | None = None
    #: The most one replica served with margin beyond the model's figure (req/s): what a
    #: ``scale`` above 1 stands for (``None`` while it is at most 1).
    shown: float | None = None

    @property
    def burst(self) -> float | None:
        """What one replica meets of a burst: ``healthy`` × ``burst_scale``."""
        return None if self.healthy is None else self.healthy * self.burst_scale

    @property
    def misses(self) -> MissCurve | None:
        """How misses grow above the modelled capacity where it is a soft bound (``None``: none)."""
        return self.modelled.misses if self.modelled is not None else None


def replica_capacity(
    config: PolicyConfig,
    state: PolicyState,
    obs: Observation,
    replica: ReplicaFigures,
    engine: EngineModel,
    load: Arrivals,
    window: Window,
) -> ReplicaCapacity:
    """The model's capacity at the current max batch, corrected by what the SLO showed."""
    elapsed, now, broken, idle = window.elapsed, window.now, window.broken, window.idle
    settled, same_fleet, overspending = window.settled, window.same_fleet, window.overspending
    model, note = _model(replica, engine)
    cap = capacity_of(config, model, engine, obs.max_batch, replica, tpot_ok=engine.tpot_ok)
    if cap is not None and note is not None:
        cap = replace(cap, note=note)
    scale = state.capacity_scale
    waiting = obs.waiting or 0.0
    # Saturated replicas finish what they can: that is the capacity to size with now (only when
    # the same replicas served the whole window, which holds while new ones start; a window that
    # mixes fleet sizes would understate it). Only from the second decision of a queue on: in the
    # interval a burst arrives in, its requests are still being served and few have finished (a
    # code-completion burst of 1,300 requests on 17 replicas read 1.2 finished per second each
    # where they finish 12, was cut to 70% of the model's figure and asked for 77 replicas; by the
    # next scrape its queue was gone).
    queued_before = state.at_last_decision(state.queue_seen_at)
    saturated = (
        broken
        and load.queued
        and queued_before
        and same_fleet
        and not obs.rollout_in_progress
        and bool(replica.per_replica_rate)
    )
    burst_scale, cut_at = state.burst_scale, state.burst_cut_at
    ceiling = state.capacity_ceiling
    if ceiling is not None and not broken and not _budget_burning(config, state):
        # It fades by 10% per five minutes while the budget no longer burns.
        ceiling *= 1.0 + 0.1 * elapsed / 300.0
    shown = state.capacity_shown
    if cap is not None and replica.per_replica_rate is not None and not idle:
        per = replica.per_replica_rate
        modelled = cap
        scale, shown = _raise_within_shown(scale, shown, cap.rate)

        def floor() -> float:
            return _ttft_floor(config, model, engine, obs, replica, modelled)

        ttft_ok = obs.p99_ttft_s is not None and obs.p99_ttft_s <= 0.6 * config.ttft_slo_s
        # A breach with a queue is saturation, sized from what the replicas finish; a breach
        # without one at a steady load and a settled fleet means the model promised too much.
        # Requests that waited about one engine step (for the step under way to end) may have
        # met no queue at all: on a 70B pair that is 20-25 ms, over 1% of a tight TTFT SLO. Such
        # a breach is read as the model's only while the error budget burns faster than it
        # accrues; within the budget a lower target must not pay for it.
        no_queue = load.queue_gone or (load.step_wait and overspending)
        if broken and settled and steady(config, load) and waiting <= 0 and no_queue:
            # The SLO broke at this load per replica: the replica sustains less than that
            # (at most a 30% cut per decision: one odd window must not halve the fleet's worth).
            scale = max(0.7 * scale, min(scale, 0.95 * per / cap.rate))
        elif (
            broken
            and settled
            and steady(config, load)
            and not load.queued
            and cap.prefill_share >= 0.5
            and overspending
            and queue_waited(config, obs)
            and per >= floor() * cap.rate
        ):
            # Prompts queued behind prompts at a steady load on a settled fleet, with no request
            # left without a slot, where prompts take most of the engine time, while the error
            # budget is spent faster than it accrues: that queue is no burst's tail but the
            # replica's own at this load (the modelled prefill queue's TTFT bound says so too:
            # the load is above it), and the throughput the model promises does not hold
            # within the TTFT SLO. Cut as a breach without a queue does (a stationary code load
            # went 2 → 1 → 2 replicas every few minutes and missed its target). Within the budget
            # such a window is chance the target allows.
            scale = max(0.7 * scale, min(scale, 0.95 * per / cap.rate))
        elif (
            broken
            and not settled
            and cap.prefill_share < 0.5
            and (mean_per := _unsettled_evidence(config, state, obs, load, now)) is not None
            and 0.5 * _bounded(cap.rate * scale, ceiling)
            <= mean_per
            <= cap.rate * scale * planned_utilization(config)
        ):
            # A fleet that changes within every window (a fast ramp) never settles, and the
            # corrections above never act. The error budget is the evidence then (burning at 2x
            # over five minutes, beyond 1x over the hour), at a load per replica over the mean
            # fleet within what the model promises yet at least half of what it is sized with
            # (less is a burst the window's mean hides). Where prompts take most of the engine's
            # time the correction above and the hold own the breach (a ceiling on prompt-heavy
            # bursts held 0.74 of what a replica sustains). Kept in req/s, not as a share of the
            # model: the curve goes on learning, and a share taken against the prior's curve cut
            # again what the curve learned by itself. At most 10% per decision.
            bounded = _bounded(cap.rate * scale, ceiling)
            ceiling = max(0.9 * bounded, min(bounded, 0.95 * mean_per))
        elif not broken and ttft_ok and waiting <= 0 and settled:
            # Met with margin at this load: the replica sustains at least that, and an old cut
            # fades (10% per five healthy minutes) so one bad episode is not remembered forever.
            recovered = min(1.0, scale * (1.0 + 0.1 * elapsed / 300.0)) if scale < 1.0 else scale
            scale = max(recovered, per / cap.rate)
            if per > cap.rate:
                shown = max(shown or 0.0, per)
        scale = min(_SCALE_MAX, max(_SCALE_MIN, scale))
        burst_scale, cut_at = _burst_correction(config, state, obs, load, cap.rate * scale, floor, window)
    healthy = cap.rate * scale if cap is not None else None
    if healthy is not None and ceiling is not None:
        if ceiling >= healthy:
            ceiling = None  # faded back to the model's figure: no bound left
        else:
            healthy = ceiling
    return ReplicaCapacity(
        model=model,
        modelled=cap,
        scale=scale,
        shown=shown if scale > 1.0 else None,
        healthy=healthy,
        per_replica=_finishing_now(obs, replica) if saturated else healthy,
        saturated=saturated,
        burst_scale=burst_scale,
        cut_at=cut_at,
        ceiling=ceiling,
    )


def _raise_within_shown(scale: float, shown: float | None, modelled: float) -> tuple[float, float | None]:
    """A correction above 1 lifts the model's figure no further than what a replica was shown to
    serve with margin (``shown``, req/s). The raise is a share of the figure it was read against,
    and the model goes on learning: a raise of 21% read in a lead-in's second minute, against a
    step-time curve still at its prior (19.7 req/s for 23.9 served), stood on the 25.2 req/s the
    curve learned since, promised 30.5 and let a conversation load that saturates a replica at 25
    ramp into a queue. Where the model's figure falls (a smaller max batch), the share stands.
    A correction without its served rate (kept before it was remembered) adopts the figure it
    gives now."""
    if scale <= 1.0 or modelled <= 0.0:
        return scale, shown
    if shown is None:
        return scale, scale * modelled
    return max(1.0, min(scale, shown / modelled)), shown


def _budget_burning(config: PolicyConfig, state: PolicyState) -> bool:
    """The error budget burned at twice its rate or more over the short window and beyond it
    over the long one, as of the last decision."""
    memory = state.budget
    short = burn_rate(memory.good_short, memory.all_short, config.error_budget)
    long = burn_rate(memory.good_long, memory.all_long, config.error_budget)
    return short is not None and long is not None and short >= 2.0 and long > 1.0


def _unsettled_evidence(
    config: PolicyConfig, state: PolicyState, obs: Observation, load: Arrivals, now: float
) -> float | None:
    """The load per replica over the replicas that served on average in the rate window, where a
    breach on a fleet that has not settled may teach the capacity: the budget burning, no request
    without a slot, no rollout, the fleet at least what the policy last asked for (not a fleet
    something else sized), and no burst's aftermath. ``None`` where it may not."""
    # Not within a rate window of a queue the gauge saw: the p99s still carry that queue's tail
    # (a step's doubling, answered by replicas that then read as too many at the load).
    if load.queue_in_window or obs.rollout_in_progress or not state.recommendations:
        return None
    if obs.desired_replicas < min(state.recommendations[-1][1], config.max_replicas):
        return None
    if not _budget_burning(config, state):
        return None
    # Not while the last scrape interval's arrivals are for certain below the window's mean: the
    # window then still carries a burst that is gone, and its mean is not the load that broke
    # the SLO (after a code-completion burst, four windows read 34-58 req/s while 4-26 arrived;
    # each cut the ceiling, to two thirds of the capacity, held to the end of the run). A ramp's
    # last interval reads at or above its window's mean.
    if load.interval_ceiling is not None and load.interval_ceiling < load.finished:
        return None
    served = window_serving(load.in_flight, now, config.rate_window_s)
    return None if served is None else replica_figures(obs, served).per_replica_rate


def _bounded(capacity: float, ceiling: float | None) -> float:
    return capacity if ceiling is None else min(capacity, ceiling)


def _burst_correction(
    config: PolicyConfig,
    state: PolicyState,
    obs: Observation,
    load: Arrivals,
    healthy: float,
    floor: Callable[[], float],
    window: Window,
) -> tuple[float, float | None]:
    """The burst correction after this window, and when it was last cut.

    A burst that breaks the SLO for many of a window's requests (``_CUT_BUDGETS`` error budgets)
    on a fleet the hold thought large enough for the load measured shows the hold's capacity too
    high: the windows read a burst shorter than they are at a fraction of its height, and prompts
    queueing behind prompts hold TTFT where the throughput would not. Cut by ``_BURST_CUT``, once
    per breach, never below ``floor()`` (what the modelled prefill queue keeps within the TTFT SLO
    at a steady load).

    Before any burst was judged it starts at ``floor()``: a burst of a few seconds is a steady
    queue for that long, and the throughput capacity, twice that bound where prompts take most of
    the engine's time, let the first bursts break the SLO before anything was learned. What the
    replicas sustain lifts it: a rate window served within the SLO grants what each replica that
    served it finished per second, and a burst window's count only within chance of that mean
    (:func:`_sustained`). Beyond it the count reads the burst's requests, not its shape (one
    served at 0.993 lifted the correction to 91%, and a ten-second burst then broke that fleet at
    half of it). Nor does time alone: a calm that never comes near the correction says nothing of
    what a burst costs.
    """
    now, broken = window.now, window.broken
    scale, cut_at = min(1.0, state.burst_scale), state.burst_cut_at
    if cut_at is None and scale >= 1.0:
        prior = floor()
        if prior < 1.0:
            return prior, now
    if scale < 1.0:
        # (the bound moves with the model: a correction never sits below where it is now)
        scale = max(floor(), scale)
    budget = config.error_budget
    good = good_share(obs)
    # One cut per breach: none while the windows still carry the burst that made the last one.
    may_cut = cut_at is None or now - cut_at >= 2.0 * config.rate_window_s
    held_for = obs.ready_replicas * healthy * scale
    if (
        broken
        and may_cut
        and not obs.rollout_in_progress
        and _lost_many(config, obs, good, _CUT_BUDGETS * budget)
        and max(load.flowed, load.burst) <= held_for
    ):
        return max(floor(), _BURST_CUT * scale), now
    shown = _sustained(config, obs, load, good, broken, now)
    if shown is not None and healthy > 0:
        scale = max(scale, min(1.0, shown / healthy))
    return scale, cut_at


def _sustained(
    config: PolicyConfig, obs: Observation, load: Arrivals, good: float | None, broken: bool, now: float
) -> float | None:
    """What each replica held per second, when the window met the goodput target and no replica
    was starting (``None`` otherwise): a rate the replicas have shown they hold.

    That is the rate window's mean, or the burst window's last interval where its count lies
    within chance of that mean (``arrivals.chance_ceiling``): such an interval ran at about one rate
    throughout, and the replicas held it. A count beyond chance is a burst whose shape it does
    not show. Counted over the larger of the replicas ready now and those that served on average
    in the window (``None`` without that average): a fleet that shrank within the window finished
    its requests on more replicas than are ready now."""
    rate = obs.request_rate
    if broken or good is None or good < config.goodput_target or rate is None or not finite(rate):
        return None
    if obs.ready_replicas <= 0 or obs.starting_replicas:
        return None
    served = window_serving(load.in_flight, now, config.rate_window_s)
    if not served:
        return None
    burst = obs.request_rate_burst
    if burst is not None and finite(burst):
        span = burst_span_s(config)
        rate = max(rate, min(burst, chance_ceiling(rate * span, span)))
    return rate / max(served, float(obs.ready_replicas))


def _lost_many(config: PolicyConfig, obs: Observation, good: float | None, share: float) -> bool:
    """The window lost more than ``share`` of its requests, beyond what chance explains at that
    share (a few slow requests of a small window are no burst)."""
    if good is None or good >= 1.0 - share:
        return False
    misses = window_misses(config, obs, good, share)
    return misses is None or poisson_tail(misses.missed, misses.requests * share) < _CUT_SIGNIFICANCE


def _ttft_floor(
    config: PolicyConfig,
    model: StepModel | None,
    engine: EngineModel,
    obs: Observation,
    replica: ReplicaFigures,
    cap: Capacity,
) -> float:
    """The lowest correction a burst's breach may cut to: the capacity at which the modelled
    queue of prompts keeps p99 TTFT within its SLO at a steady load, relative to the model's."""
    tpot_ok = engine.tpot_ok
    bounded = capacity_of(config, model, engine, obs.max_batch, replica, tpot_ok=tpot_ok, ttft_bound=True)
    if bounded is None or cap.rate <= 0:
        return 1.0
    return min(1.0, max(_SCALE_MIN, bounded.rate / cap.rate))


def _finishing_now(obs: Observation, replica: ReplicaFigures) -> float | None:
    """What saturated replicas finish per second each: over the rate window, or over the burst
    window where that shows more (saturation that began within the rate window is diluted there
    by the calm before it)."""
    per = replica.per_replica_rate
    burst = obs.request_rate_burst
    if per is None or burst is None or not finite(burst) or not replica.serving:
        return per
    return max(per, burst / replica.serving)


def _model(replica: ReplicaFigures, engine: EngineModel) -> tuple[StepModel | None, str | None]:
    """The step-time curve to size with and, when it leans on the prior, a note saying why."""
    # Without any prompt-token rate the fit has one feature and the prompts of the mix are in β.
    known_prompts = engine.prompt_tokens is not None
    model = step_model(
        engine.fit,
        engine.step_floor_s,
        engine.prefill_fit if known_prompts else None,
        engine.prompt_cost_s,
    )
    note = None if known_prompts else "prefill cost not learned: no prompt token rate"
    if not replica.step_measured and replica.batch is not None and replica.step_s is not None:
        # Without the latency mean the step is running ÷ token rate, which moves with the running
        # gauge by construction: no slope can be learned from it. Use the prior curve's shape
        # through this observation instead, so the capacity is anchored at what is served now.
        model = anchored_model(
            replica.batch, replica.step_s, engine.prefill_tokens or 0.0, engine.prompt_cost_s
        )
        if known_prompts and not model.prefill_learned:
            note = "prefill cost from the prior: no inter-token latency"
    elif model is not None and known_prompts and not model.prefill_learned:
        note = "prefill cost from the prior: few prompt tokens seen"
    return model, note


def capacity_of(
    config: PolicyConfig,
    model: StepModel | None,
    engine: EngineModel,
    max_batch: int,
    replica: ReplicaFigures,
    *,
    tpot_ok: bool,
    ttft_bound: bool = False,
) -> Capacity | None:
    """The capacity ``model`` promises at ``max_batch`` for the learned mix (``None``: no model or
    no output length yet). ``tpot_ok``: TPOT is within its SLO now, so its bound is never below
    the batch running; ``ttft_bound``: bound it where the modelled prompt queue keeps TTFT within
    its SLO."""
    if model is None or engine.output_tokens is None:
        return None
    return capacity(
        model,
        RequestMix(engine.output_tokens, engine.prompt_tokens, replica.kv_per_seq),
        Batching(max_batch, config.batch_fill, now=replica.batch, tpot_ok_now=tpot_ok),
        Slo(
            config.tpot_slo_s,
            engine.tpot_offset_s,
            # The modelled TTFT bound (``capacity.ttft_p99``) is not applied to the capacity: its
            # queue assumes one spread of prompt lengths, and long prompts of narrow spread queue
            # far less (one replica, ``make bench-queue``: the engine's p99 at 0.52-0.68x the
            # model's); on the long-context benchmark it held 32 replicas where a flat 8 reach the
            # target (31.8 GPU-h at 0.9989; without it 10.9 at 0.9942). A broken TTFT still corrects
            # the capacity; the bound is where the burst correction starts and the floor of its
            # cuts, and what the replicas serve within the SLO lifts it (``_burst_correction``).
            ttft_s=config.ttft_slo_s if ttft_bound else None,
            saturation_ttft_s=config.ttft_slo_s,
        ),
    )
