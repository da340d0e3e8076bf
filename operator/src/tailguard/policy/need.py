"""The replicas the load asks for, before any limit: the sizing rule and the error budget's hold.

replicas = load ÷ (capacity per replica × target utilization), where the load is the larger of the
load now and its forecast over one start-up. When the SLO is broken the queue is added as load to
drain, and a fleet the model thinks large enough gets one replica more anyway (unless the replicas
asked for the breach have just drained its queue). The error budget's
headroom then holds capacity for the load the service may meet before a new replica is ready.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from tailguard.policy.arrivals import Arrivals, Outlook
from tailguard.policy.budget import (
    GAIN_MAX,
    BudgetMemory,
    Headroom,
    adjust_gain,
    burn_rate,
    given_trend,
    headroom,
    lenient,
    miss_curve_scale,
    planned_utilization,
    record_attainment,
    record_curve_misses,
    record_load,
    soften,
    utilization_relief,
)
from tailguard.policy.learning import ReplicaCapacity
from tailguard.policy.observed import (
    ReplicaFigures,
    finite,
    fmt_ms,
    good_share,
    slo_held,
    window_misses,
)
from tailguard.policy.state import PolicyState
from tailguard.policy.types import Observation, PolicyConfig, Reason
from tailguard.policy.window import Window

#: How fast a saturated replica's own queue should empty once help arrives.
_DRAIN_S = 60.0
#: A history whose jump quantile exceeds this (the load may more than double within a start-up)
#: keeps the declared scale-down window through a fall.
_JUMPY = 2.0
#: Poisson spreads of the rate window's count a gradual fall must shed over the scale-down window.
_FALL_SPREADS = 2.0
#: Replicas a hold for bursts keeps to spare before it comes down one (its hysteresis).
_HOLD_BAND = 0.25


#: Poisson spreads of the rate window's count a load shed on a lasting budget keeps below the
#: relieved utilization (``_fits_fewer``).
_SHED_SPREADS = 3.0

#: Capacity bounds that are a full batch's throughput, not an SLO's edge (``Capacity.bound``).
_SLOT_BOUNDS = ("max batch", "KV cache")


def gain_ceiling(config: PolicyConfig) -> float:
    """The most the budget's gain may reach: as far as relieves the target utilization up to all
    of the learned capacity (``GAIN_MAX``, no relief, without the budget's headroom)."""
    if not config.budget_headroom:
        return GAIN_MAX
    return GAIN_MAX / min(1.0, max(config.target_utilization, 0.5))


def ceil_replicas(replicas: float) -> int:
    """Round a replica need up, forgiving float noise (3.0001 is 3) and absurd inputs."""
    if not math.isfinite(replicas):
        return 1_000_000 if replicas > 0 else 0
    return max(0, min(1_000_000, math.ceil(replicas - 0.02)))


@dataclass(frozen=True)
class Need:
    """What the load asks for, why, and what the error budget learned on the way."""

    recommended: int
    code: Reason
    #: The reason's sentences so far (the limits add theirs).
    parts: tuple[str, ...]
    #: Replicas the measured load needs at the healthy capacity (``None``: nothing to size with):
    #: what a breach's stabilization entry remembers instead of its emergency size.
    sized: int | None
    budget: BudgetMemory
    #: What the scale-down window remembers of this recommendation in a breach the load explains:
    #: the need of the load measured at the capacity the replicas showed (no drain, no queue);
    #: ``None``: the limits decide (the fleet serving a breach, the recommendation otherwise).
    remembered: int | None = None
    #: A gradual fall (:func:`_gradual_fall`; the outlook's ``falling`` is only its first test):
    #: the scale-down window is then shortened to :func:`falling_window_s`.
    gradual_fall: bool = False
    #: The last replica added for a breach the model saw room for (:class:`Probe`), to keep.
    probe: Probe | None = None
    #: The relief's shed to keep (:class:`Shed`): one asked for now, or the one still standing.
    shed: Shed | None = None


@dataclass(frozen=True)
class Shed:
    """A replica the budget's relief shed: the fleet it leaves, and the load (req/s) that fleet
    was judged to hold at the relieved utilization."""

    replicas: int
    capacity: float
    #: The most a reading of the load may show before the shed fleet grows back: the capacity
    #: with the band of chance a shed is judged with (:func:`_noise_band`).
    within: float


@dataclass(frozen=True)
class Probe:
    """A replica added for a breach the model saw room for, and what the SLO showed then."""

    #: Replicas serving when it was asked for.
    replicas: int
    #: Share of that window's requests that missed an SLO.
    misses: float
    #: Finished requests per second per serving replica then.
    load: float
    at: float


#: How long the last such replica is remembered: its start, a settled window, a few decisions.
_PROBE_MEMORY_S = 600.0
#: The share of the misses replicas added for a breach must at least have taken away: a window
#: with more misses than chance explains at what is left of them shows the replicas did not help.
_NO_HELP_MISSES = 0.5
#: The share of its replica's load the added one must have taken off the others before the misses
#: say anything of it: on a load that grew meanwhile (a ramp) the same misses say the load grew.
_NO_HELP_LOAD_TAKEN = 0.5


def remembered_probe(state: PolicyState, now: float) -> Probe | None:
    """The last replica added for a breach the model saw room for, while it is remembered."""
    replicas, misses, load, at = state.probe_replicas, state.probe_misses, state.probe_load, state.probe_at
    if replicas is None or misses is None or load is None or at is None or now - at > _PROBE_MEMORY_S:
        return None
    return Probe(replicas, misses, load, at)


def _no_help(
    config: PolicyConfig, probe: Probe | None, obs: Observation, replica: ReplicaFigures
) -> str | None:
    """A clause when the replica added at ``probe`` took its share of the load off the others and
    did not lower the misses (an SLO that the prompts' own latency breaks at any fleet size);
    ``None`` otherwise.

    Judged on counts, not shares: the window's misses must be more than chance explains had the
    replicas taken away half of them, so a quiet window's few slow requests decide nothing.
    """
    good, per = good_share(obs), replica.per_replica_rate
    # Judged on the fleet it made, one replica more: a fleet the load resized since says nothing.
    if probe is None or good is None or per is None or obs.ready_replicas != probe.replicas + 1:
        return None
    n = probe.replicas
    if per > probe.load * (n + 1.0 - _NO_HELP_LOAD_TAKEN) / (n + 1.0):
        return None
    misses = window_misses(config, obs, good, _NO_HELP_MISSES * probe.misses)
    if misses is None or not misses.beyond_chance:
        return None
    return (
        f"the replica added for it did not lower the misses ({probe.misses:.1%} of requests at "
        f"{probe.replicas} replicas, {1.0 - good:.1%} at {obs.ready_replicas}): none added"
    )


def startup_horizon(config: PolicyConfig, obs: Observation) -> float:
    """Seconds from asking for a replica to its serving: measured from the service's pods when
    reported, else the configured figure."""
    measured = obs.startup_s
    if measured is not None and math.isfinite(measured) and 0 < measured < 3600:
        return measured
    return config.startup_s


def falling_window_s(config: PolicyConfig, obs: Observation) -> float:
    """The scale-down window through a gradual fall (:func:`_gradual_fall`): one start-up horizon
    or one rate window, whichever is longer, within the declared window.

    The declared window keeps a fleet through the noise of a flat load and through a dip that
    comes back. A gradual fall is neither, and what may come back within
    a start-up the error budget's hold keeps anyway: holding the largest size of the last five
    minutes then only keeps replicas for a load that has gone.
    """
    return min(config.scale_down_stabilization_s, max(startup_horizon(config, obs), config.rate_window_s))


def window_filling(config: PolicyConfig, state: PolicyState, now: float) -> bool:
    """Less than one rate window since the policy started watching (a new service, or state lost):
    the load it reads may still be the window filling up, not the load."""
    return state.started_at is not None and now - state.started_at < config.rate_window_s


def _learn_budget(
    config: PolicyConfig,
    state: PolicyState,
    obs: Observation,
    load: float,
    window: Window,
    cap: ReplicaCapacity,
    *,
    falling: bool,
) -> tuple[BudgetMemory, Headroom, float]:
    """Fold this window into the error budget's memory; the headroom the whole history allows and
    the horizon (``falling``: the trend confirms a fall now)."""
    now, elapsed, idle = window.now, window.elapsed, window.idle
    budget = config.error_budget
    startup = startup_horizon(config, obs)
    # The measured load is the rate window's mean, half a window behind the arrivals: a jump shows
    # in full only that much later, so the history looks that much further ahead. Until the policy
    # has watched one full window, the window still fills up: its readings climb to the load
    # (a tenth of it, then a fifth...), and each would enter the history as a jump of ten.
    memory = state.budget
    if not window_filling(config, state, now):
        horizon = startup + 0.5 * config.rate_window_s
        memory = record_load(
            memory, now, 0.0 if idle else load, elapsed, horizon, config.rate_window_s, falling=falling
        )
    good_now = good_share(obs)
    memory = record_attainment(memory, good_now, obs.request_rate or 0.0, elapsed)
    missing_now = good_now is not None and good_now < config.goodput_target
    # The fleet is the policy's own when no larger than the most it asked for within its scale-down
    # window (what its own stabilization holds; above it a floor holds the fleet) and no smaller than
    # what it asks now (below it the fleet was sized by something else: a fixed fleet beside DryRun,
    # a lead-in it only watched, GPUs it could not get). Slack on any other fleet says nothing of
    # the headroom the policy's own sizing needs, and neither do the misses of a smaller one: it was
    # short of what the policy asked for, not of headroom (a lead-in served at the edge of each
    # minute's need burned the budget at twice its rate, and the hour after it held for p99.7 of
    # the jumps, not p99.3).
    asked = [r for t, r in state.recommendations if now - t <= config.scale_down_stabilization_s]
    smaller = bool(asked) and obs.desired_replicas < min(state.recommendations[-1][1], config.max_replicas)
    own_fleet = not asked or (obs.ready_replicas <= max(asked) and not smaller)
    missing_at_its_size = missing_now and not smaller
    memory = adjust_gain(memory, budget, elapsed, missing_at_its_size, own_fleet, gain_ceiling(config))
    if own_fleet:
        memory = _read_miss_curve(memory, obs, cap, load, good_now, window)
    return memory, headroom(memory, budget), startup


def _read_miss_curve(
    memory: BudgetMemory,
    obs: Observation,
    cap: ReplicaCapacity,
    load: float,
    good: float | None,
    window: Window,
) -> BudgetMemory:
    """Fold in what a soft capacity's miss curve read for this window, at the load the hold is
    sized for on the replicas that served it, beside the share that missed (``1 − good``)."""
    # The curve is the model's, read under Poisson load; arrivals in bursts shorter than the
    # window that reads them miss more at the same reading (code completion: a median of 2.9
    # times the curve on the fleet the policy sized). Only the policy's own fleet says what its
    # hold meets: the benchmark's lead-in fleet, resized each minute to what that minute needed,
    # served windows read at three to seven times the capacity per replica at about 1% misses.
    curve, each = cap.misses, cap.burst or cap.healthy
    if curve is None or good is None or not each or obs.ready_replicas <= 0 or window.idle:
        return memory
    expected = curve.share(load / (obs.ready_replicas * each))
    return record_curve_misses(memory, 1.0 - good, expected, obs.request_rate or 0.0, window.elapsed)


@dataclass(frozen=True)
class Sizing:
    """What a decision sizes the fleet from: the load now, its outlook, and a replica's capacity."""

    load: Arrivals
    ahead: Outlook
    cap: ReplicaCapacity


@dataclass(frozen=True)
class _At:
    """The capacity the load is sized at in this window: per replica (learned, above 0), at the
    utilization ``u`` (the target one, ``planned``, or more while the error budget relieves it)."""

    per_replica: float
    u: float
    planned: float


def size_need(
    config: PolicyConfig,
    state: PolicyState,
    obs: Observation,
    replica: ReplicaFigures,
    sizing: Sizing,
    window: Window,
) -> Need:
    """The recommendation for this window: the load's need at the capacity, a breach's answer,
    the hysteresis on the way down, and the error budget's hold."""
    load, ahead, cap = sizing.load, sizing.ahead, sizing.cap
    now, idle = window.now, window.idle
    breaches, broken = list(window.breaches), window.broken
    current = obs.desired_replicas
    healthy = cap.healthy
    # The history is of the load measured, the same load the hold scales: the surge and the
    # queue's growth are readings to act on now, and a burst's onset read up to twice its rate.
    # A burst shorter than the rate window counts at the height the burst window saw: the rate
    # window's mean dilutes a ten-second burst twelvefold, and the hold would miss it every time.
    seen = max(ahead.measured, load.burst)
    memory, room, startup = _learn_budget(config, state, obs, seen, window, cap, falling=ahead.falling)
    u, planned = _utilization(config, cap, memory)
    relieved = u > planned * 1.001
    sized = None
    if healthy is not None and healthy > 0 and not idle:
        sized = ceil_replicas(ahead.measured / (healthy * u))
    # Whether a fall is gradual asks the whole history: the calm between bursts falls too.
    gradual = _gradual_fall(config, state, load, ahead, room, now)
    held_from = given_trend(memory, ahead.falling)
    if held_from is not memory:
        room = replace(headroom(held_from, config.error_budget), while_falling=True)
    held = _budget_hold(config, cap, room, held_from, seen, idle)
    per_replica = cap.per_replica
    probe = remembered_probe(state, now)
    if idle:
        return Need(config.min_replicas, Reason.IDLE, ("no requests",), sized, memory, probe=probe)
    if per_replica is None or per_replica <= 0:
        # Nothing to size with yet (no finished request): act only on a broken SLO.
        recommended = current + 1 if broken and obs.starting_replicas == 0 else current
        parts = [*(breaches or [f"p99 TTFT {fmt_ms(obs.p99_ttft_s)}"]), "capacity not learned yet"]
        code = Reason.SLO_BREACH if broken else Reason.STEADY
        return Need(recommended, code, tuple(parts), sized, memory, probe=probe)

    demand = ahead.demand
    at = _At(per_replica, u, planned)
    # The margin the budget relieves is what covers a rise while a new replica starts: a relieved
    # fleet sizes for where the trend takes the load within one start-up, however slow the rise
    # (a load tripling in an hour broke the SLO at every replica it crossed, each new one ready
    # only after the load had outgrown the fleet).
    drifted = relieved and ahead.drift > max(demand, ahead.forecast)
    rising = max(demand, ahead.forecast, ahead.drift if relieved else 0.0)
    up = ceil_replicas(rising / (per_replica * u))
    on_the_way = obs.starting_replicas + obs.pending_replicas
    draining = ""
    if broken and not obs.pending_replicas:
        drained = _drain(obs, replica, sizing, at, _startup_left(state, startup, now))
        if drained is not None and drained[0] > up:
            up, draining = drained
    withheld = ""
    shed_to: int | None = None
    kept = _kept_shed(config, state, current, broken, relieved, room)
    keeping = False
    if up > current and broken and on_the_way and up <= math.ceil(current * 1.2):
        # Replicas are starting for this breach: wait for them unless the need grew clearly.
        recommended = current
    elif up > current and kept is not None and rising <= kept.within:
        # A replica the relief shed is not taken back for chance within what it was shed for.
        recommended, keeping = current, True
    elif up > current:
        recommended = up
    elif broken:
        added, withheld, probe = _one_more(config, state, obs, replica, load, memory, window)
        recommended = current + 1 if added else current
    else:
        recommended = _fits_fewer(config, sizing, at, current)
        if relieved and window.settled and not ahead.falling and _budget_lasts(room):
            # What the way up reads at the smaller fleet: the trend's reach and the largest load of
            # the horizon, not a dip's reading.
            recent = max((seen_then for _, seen_then in memory.loads), default=0.0)
            fewer = _relieved_fit(config, max(rising, recent), at)
            if fewer < recommended:
                recommended = shed_to = fewer
    held = _banded(held, recommended, current, seen)
    # A breach asks for at least the hold too: the load it was learned for may be the very burst
    # that broke the SLO, and a fleet still short of the hold (after a restart, a manual
    # scale-down) would otherwise be sized for the breach's load alone.
    holding = held.replicas is not None and held.replicas > recommended
    if holding and kept is not None and recommended == current and held.load <= kept.within:
        holding, keeping = False, True
    if held.replicas is not None and holding:
        recommended = held.replicas
    remembered = _remembered(obs, sizing, at, recommended, broken)

    parts = [*(breaches or [slo_held(config, obs)])]
    if broken and finite(obs.queue_time_mean_s):
        # Queueing or the prompts' own prefill: what the breach is made of.
        waited = f"requests waited {fmt_ms(obs.queue_time_mean_s)} for a slot on average"
        if load.step_wait:
            waited += " (within one engine step: the step under way, perhaps no queue)"
        parts.append(waited)
    said = f"load {demand:.1f} req/s"
    if ahead.forecast > demand * 1.01:
        said += f" (forecast {ahead.forecast:.1f} in {ahead.horizon_s:.0f} s)"
    parts.append(said)
    if draining and recommended == up and recommended > current:
        parts.append(draining)
    if withheld:
        parts.append(withheld)
    if holding and held.replicas is not None:
        parts.append(_holding_sentence(held, startup, cap.burst_scale, seen))
    if cap.saturated:
        parts.append(f"capacity {per_replica:.1f} req/s per replica (measured, saturated)")
    elif cap.modelled is not None:
        described = cap.modelled.explain() + _learned(cap)
        parts.append(f"capacity {per_replica:.1f} req/s per replica ({described})")
    if relieved:
        relief_said = f"sized at {u:.0%} of it while the error budget lasts"
        if drifted:
            relief_said += f", for the load rising to {ahead.drift:.1f} in {ahead.horizon_s:.0f} s"
        if shed_to is not None and recommended == shed_to:
            relief_said += (
                f", and down to {recommended} within {_SHED_SPREADS:.0f} spreads of chance of it:"
                " the budget lasted with room over the short and the long window"
            )
        parts.append(relief_said)
    if keeping and kept is not None:
        parts.append(f"kept at {current}: within the {kept.capacity:.1f} req/s it was shed for")
    shed = None
    if shed_to is not None and recommended == shed_to:
        shed = _shed(config, shed_to, shed_to * per_replica * u)
    elif kept is not None and recommended == current:
        shed = kept
    code = _code(broken, recommended, current)
    return Need(
        recommended,
        code,
        tuple(parts),
        sized,
        memory,
        remembered,
        gradual_fall=gradual,
        probe=probe,
        shed=shed,
    )


def _utilization(config: PolicyConfig, cap: ReplicaCapacity, memory: BudgetMemory) -> tuple[float, float]:
    """The utilization of the capacity the load is sized at now, and the target one (planned)."""
    # The budget's slack beyond the quantile's top relieves the target utilization: the load now
    # is sized at up to all of the learned capacity while the budget lasts.
    relief = utilization_relief(memory) if config.budget_headroom else 1.0
    planned = planned_utilization(config)
    # The relief spends the margin on a capacity an SLO bounds (TPOT, or TTFT through the prompts'
    # queue): at that bound the SLO still holds. A capacity the slots bound (the max batch, the KV
    # cache) is the throughput of a full batch, where requests queue for a slot without end:
    # there the relief stops at the target utilization (a fleet relieved to all of it met a slow
    # ramp at 99% of its slots at each replica it crossed, and the queue broke the TTFT SLO).
    slot_bound = cap.modelled is not None and cap.modelled.bound in _SLOT_BOUNDS
    return (planned if slot_bound else planned_utilization(config, relief)), planned


@dataclass(frozen=True)
class Held:
    """The error budget's hold for this window."""

    #: Replicas held (``None``: nothing to hold with: no history, no capacity, or idle).
    replicas: int | None
    #: The load held for (req/s), and what each replica is held for (the capacity a burst meets).
    load: float
    each: float
    #: The headroom as read (given the trend, softened where the capacity is a soft bound).
    room: Headroom
    #: The 1% budget's floor set the held load.
    floored: bool = False
    #: A replica kept above the hold by its band (``_HOLD_BAND``).
    banded: bool = False


def _budget_hold(
    config: PolicyConfig,
    cap: ReplicaCapacity,
    room: Headroom,
    held_from: BudgetMemory,
    seen: float,
    idle: bool,
) -> Held:
    """The replicas the error budget's headroom holds for the load ``seen``."""
    healthy = cap.healthy
    if not (config.budget_headroom and room.learned and healthy and healthy > 0 and not idle):
        return Held(None, 0.0, 0.0, room)
    curve = cap.misses
    if curve is not None:
        scale = miss_curve_scale(held_from, config.error_budget)
        room = soften(room, held_from, config.error_budget, curve.share, scale)
    held_load, floored = room.held(seen)
    each = cap.burst or healthy
    return Held(ceil_replicas(held_load / each), held_load, each, room, floored=floored)


def _banded(held: Held, recommended: int, current: int, seen: float) -> Held:
    """The hold with its band: a hold for bursts comes down a replica only once its load fits the
    smaller fleet with a quarter of a replica to spare."""
    if held.replicas is None or recommended >= current or held.load <= seen * 1.01:
        return held
    # A hold at a replica's edge moved with each few percent the capacity read (a spiky code
    # load's fleet went 4, 3, 4 every few minutes around a hold for 28 req/s at 9–10 req/s per
    # replica), and the hour's burst met it on its low side. A band in replicas, not in percent,
    # costs a large fleet no more than a small one. A hold for no more than the load (an evening's
    # fall) follows the load down.
    keep = min(current, ceil_replicas(held.load / held.each + _HOLD_BAND))
    return replace(held, replicas=max(held.replicas, keep), banded=keep > held.replicas)


def _drain(
    obs: Observation, replica: ReplicaFigures, sizing: Sizing, at: _At, startup_left: float
) -> tuple[int, str] | None:
    """The fleet that drains a breach's queue within ``_DRAIN_S``, and the sentence saying so
    (``None`` with less than one request queued). ``startup_left``: seconds until the replicas
    starting now serve (:func:`_startup_left`)."""
    # Each saturated replica keeps its own queue (the Service does not move requests), so it
    # drains only by the margin between its capacity and its share of arrivals: size the fleet so
    # that margin empties the queue within _DRAIN_S. While replicas start, the queue the drain
    # meets is the one they find: it grows on the replicas serving until then.
    demand, per_replica = sizing.ahead.demand, at.per_replica
    waiting = obs.waiting or 0.0
    queue = waiting
    if obs.starting_replicas:
        excess = demand - replica.serving * per_replica
        queue += _queue_growth(sizing.load.queue_growth, excess, startup_left)
    if queue < 1.0:
        return None
    queue_each = queue / max(1, replica.serving)
    margin = max(0.5 * per_replica, per_replica - queue_each / _DRAIN_S)
    said = f"sized to drain {queue:.0f} queued requests within {_DRAIN_S:.0f} s"
    if queue > waiting + 0.5:
        said += " (the queue the replicas starting will find)"
    return ceil_replicas(demand / margin), said


def _one_more(
    config: PolicyConfig,
    state: PolicyState,
    obs: Observation,
    replica: ReplicaFigures,
    load: Arrivals,
    memory: BudgetMemory,
    window: Window,
) -> tuple[bool, str, Probe | None]:
    """A breach the model sees room for: whether to add one replica anyway, the sentence of why
    none was added, and the probe to remember."""
    now = window.now
    probe = remembered_probe(state, now)
    startup = startup_horizon(config, obs)
    # The replicas asked for this breach have drained its queue (seen within the rate window,
    # none now): the p99s still carry its tail, which says nothing against the model.
    queue_at, scaled_at = load.queue_at, state.last_scale_at
    helped = (
        not load.queued
        and queue_at is not None
        and now - queue_at <= config.rate_window_s
        and state.last_direction > 0
        and scaled_at is not None
        and now - scaled_at <= config.rate_window_s + startup
    )
    if not window.settled or obs.pending_replicas or helped:
        return False, "", probe
    # The model sees room, yet the SLO is broken: add a replica anyway, unless the last one added
    # for such a breach did not lower its misses, or (below a 0.99 target) the misses are within
    # what the error budget allows.
    burn = burn_rate(memory.good_short, memory.all_short, config.error_budget)
    no_help = _no_help(config, probe, obs, replica)
    if no_help is not None:
        return False, no_help, probe
    if lenient(config.error_budget) and burn is not None and burn <= 1.0:
        return False, f"error budget burning at {burn:.1f}× over the last minutes: none added", probe
    good = good_share(obs)
    if good is not None and replica.per_replica_rate is not None:
        probe = Probe(obs.ready_replicas, 1.0 - good, replica.per_replica_rate, now)
    return True, "", probe


def _fits_fewer(config: PolicyConfig, sizing: Sizing, at: _At, current: int) -> int:
    """The fleet once the load fits fewer replicas with a margin (hysteresis), or at the target
    utilization when the trend confirms a fall; never above ``current``."""
    # The margin is below the target utilization the user set, whatever the budget relieves: a
    # relieved fleet grows later on a noisy steady load and shrinks no sooner (a band that moved
    # up with the relief put a steady load of two replicas' worth on its edge: a reversal every
    # few minutes). Only a lasting budget sheds past it (:func:`_relieved_fit`).
    load, ahead = sizing.load, sizing.ahead
    demand = ahead.demand
    down_u = at.u if ahead.falling else max(0.05, at.planned - config.scale_down_margin)
    down_load = min(demand, max(load.flowed, ahead.nowcast)) if ahead.falling else demand
    down = ceil_replicas(down_load / (at.per_replica * down_u))
    return min(current, down) if down < current else current


def _relieved_fit(config: PolicyConfig, load: float, at: _At) -> int:
    """The fleet that holds ``load`` (req/s) at the relieved utilization with the band of its
    chance (:func:`_noise_band`) to spare: where a settled fleet whose budget lasted with room over
    the last hour as well as the last minutes (:func:`_budget_lasts`) may shed to. A fleet that
    grew before the relief was earned (a cold start, a burst) otherwise kept the margin's replica
    for as long as the load held; judged on the horizon's largest load and the trend's reach, not
    the window's reading, a dip does not shed it."""
    return ceil_replicas(load * (1.0 + _noise_band(config, load)) / (at.per_replica * at.u))


def _noise_band(config: PolicyConfig, load: float) -> float:
    """The share of ``load`` that ``_SHED_SPREADS`` Poisson spreads of the rate window's count
    make: how far below the relieved capacity a shed fleet's load must sit for chance not to
    take it back up (1 without requests)."""
    count = max(load, 0.0) * config.rate_window_s
    return min(1.0, _SHED_SPREADS / math.sqrt(count)) if count > 0.0 else 1.0


def _kept_shed(
    config: PolicyConfig, state: PolicyState, current: int, broken: bool, relieved: bool, room: Headroom
) -> Shed | None:
    """The relief's last shed while it stands: the fleet it left still serves, the SLO holds, the
    relief lasts and the short window burns the budget slower than it accrues (``None``: none).
    A shed needs the load three spreads of chance below the relieved capacity; chance that takes a
    reading as far above it is no reason to grow back (a steady 70 req/s went 8 → 7 → 8 when the
    trend's reach read 73.3 against the 72.8 the smaller fleet's capacity read, and a hold on a
    step's calm 3 → 2 → 3 within two minutes)."""
    replicas, capacity = state.shed_replicas, state.shed_capacity
    if replicas is None or capacity is None or replicas != current or broken or not relieved:
        return None
    if room.burn_short is None or room.burn_short >= 1.0:
        return None
    return _shed(config, replicas, capacity)


def _shed(config: PolicyConfig, replicas: int, capacity: float) -> Shed:
    """A shed to ``replicas`` judged to hold ``capacity`` (req/s), with its band of chance."""
    return Shed(replicas, capacity, capacity * (1.0 + _noise_band(config, capacity)))


def _budget_lasts(room: Headroom) -> bool:
    """The budget burned under half its rate over both the short and the long window: the slack
    that relaxes the gain, held for an hour."""
    short, long = room.burn_short, room.burn_long
    return short is not None and long is not None and short < 0.5 and long < 0.5


def _remembered(obs: Observation, sizing: Sizing, at: _At, recommended: int, broken: bool) -> int | None:
    """What the scale-down window remembers of a breach the load explains (``None``: the limits
    decide)."""
    # A breach the load explains: it outgrew the replicas ready, or a queue within the rate window
    # (which the p99s still carry after it drained) broke it. What to remember of it is the need of
    # the load measured, at the capacity saturated replicas showed or the healthy one: its queue
    # and drain are transient. A breach neither explains shows the model wrong, and the limits
    # then remember the fleet that served it.
    cap, measured, u = sizing.cap, sizing.ahead.measured, at.u
    healthy = cap.healthy
    explained = not sizing.load.queue_gone or (
        healthy is not None and measured > obs.ready_replicas * healthy * u
    )
    if broken and (cap.saturated or explained):
        return min(recommended, ceil_replicas(measured / (at.per_replica * u)))
    return None


def _code(broken: bool, recommended: int, current: int) -> Reason:
    if broken:
        return Reason.SLO_BREACH
    if recommended > current:
        return Reason.LOAD_RISING
    if recommended < current:
        return Reason.LOAD_FALLING
    return Reason.STEADY


def _learned(cap: ReplicaCapacity) -> str:
    """What the SLO taught the model's capacity, as a clause of the capacity sentence ('' when
    nothing): a breach cut it, or windows met with margin at a higher load raised it; and the
    ceiling a burning budget on a fleet that did not settle set, where it binds."""
    if cap.ceiling is not None:
        return (
            f"; at most {cap.ceiling:.2f} req/s per replica, learned while the error budget burned"
            " on a fleet that did not settle"
        )
    if cap.scale < 0.995:
        return f"; {cap.scale:.0%} of the model's figure, learned from breaches"
    if cap.scale > 1.005:
        return f"; {cap.scale:.0%} of the model's figure, learned from loads met with margin"
    return ""


def _gradual_fall(
    config: PolicyConfig, state: PolicyState, load: Arrivals, ahead: Outlook, room: Headroom, now: float
) -> bool:
    """The trend confirms a fall on a load whose history does not jump, beyond the counting noise
    of the rate window, and below the load of any breach within the declared scale-down window.

    Where the load may more than double within a start-up (``_JUMPY``), a fall is as likely the
    quiet between two bursts as a trend: the declared window keeps the fleet the bursts needed.
    At a few requests per second the rate window holds a few hundred requests, and a trend of a
    tenth of the load is their Poisson spread: the fall must shed ``_FALL_SPREADS`` spreads of the
    window's count over the declared window, or it is noise, which the declared window is for.
    A breach within the window showed the fleet short at the load it met: the fall is gradual
    only once the load has left that load behind by as many spreads (:func:`_below_breach`).
    """
    window = config.scale_down_stabilization_s
    count = max(load.level, 0.0) * config.rate_window_s
    shed = -load.trend * window * config.rate_window_s  # of the window's count, over the window
    beyond_noise = count > 0 and shed > _FALL_SPREADS * math.sqrt(count)
    breached = state.last_breach_at is not None and now - state.last_breach_at <= window
    clear = not breached or _below_breach(config, state, count)
    return ahead.falling and beyond_noise and room.learned and room.ratio <= _JUMPY and clear


def _below_breach(config: PolicyConfig, state: PolicyState, count: float) -> bool:
    """The rate window's ``count`` of requests now is below the count at the last breach by more
    than ``_FALL_SPREADS`` of its Poisson spreads: the load has fallen from the one that broke the
    SLO, not wandered about it (a stationary load at the fleet's edge). Unknown load: not."""
    if state.breach_load is None:
        return False
    then = max(state.breach_load, 0.0) * config.rate_window_s
    return then - count > _FALL_SPREADS * math.sqrt(then)


def _startup_left(state: PolicyState, startup: float, now: float) -> float:
    """Seconds until the replicas starting now serve: what is left of a start-up since the fleet
    was last scaled."""
    if state.last_scale_at is None:
        return startup
    return min(startup, max(0.0, state.last_scale_at + startup - now))


def _queue_growth(growth: float, excess: float, left: float) -> float:
    """Requests the queue gains over the ``left`` seconds until the replicas starting now serve,
    at the rate it grew since the last decision (``growth``), and no faster than the arrivals
    beyond what the replicas serving finish (``excess``). A burst read as load but no queue
    growing behind it projects nothing."""
    return max(0.0, min(excess, growth)) * left


def _holding_sentence(held: Held, startup_s: float, burst_scale: float, seen: float) -> str:
    """What the hold holds and why, e.g. 'holding 22 for 41.0 req/s: p99.5 of the load within
    90 s in its history; error budget burning at 0.6×'."""
    room, load = held.room, held.load
    after = "" if room.burn_long is None else f"; error budget burning at {room.burn_long:.1f}×"
    if held.banded:
        after += f"; a replica kept until the load fits one fewer with {_HOLD_BAND:g} of one to spare"
    history = "the history of falling loads" if room.while_falling else "its history"
    what = f"p{room.quantile * 100:.4g} of the load within {startup_s:.0f} s in {history}"
    if room.soft:
        what = (
            f"the load within {startup_s:.0f} s in {history}, less what costs at most "
            f"{1.0 - room.quantile:.1%} of its requests in TPOT misses (they grow gently above "
            "the capacity"
            + (
                f"; {room.miss_scale:.1f}× the model's, as its windows showed"
                if room.miss_scale >= 1.05
                else ""
            )
            + ")"
        )
    if held.floored:
        # A larger budget sheds at most its extra misses' share of what a 1% budget holds.
        what = (
            f"{room.floor_share:.0%} of the 1% budget's hold, p{room.floor_quantile * 100:.4g} "
            f"of the load within {startup_s:.0f} s"
        )
    scale = room.start_scale(seen)
    unscaled, _ = replace(room, follows=1.0).held(seen)
    if unscaled > 0 and abs(load / unscaled - 1.0) >= 0.05:
        # The history's peaks do not follow the load they start from (bursts out of any calm).
        side = "below" if scale > 1.0 else "above"
        what += (
            f", its jump {scale:.2f}× the history's from {seen:.1f} req/s, {side} the usual "
            f"{room.usual:.1f} (its peaks follow their start {room.follows:.0%})"
        )
    if burst_scale < 0.995:
        after += (
            f"; bursts sized at {burst_scale:.0%} of the capacity (the prefill queue's TTFT bound, "
            "corrected by the windows served and the bursts broken)"
        )
    return f"holding {held.replicas} for {load:.1f} req/s: {what}{after}"
