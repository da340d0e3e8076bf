"""The limits between a recommendation and the replica count set, applied in a fixed order.

Stabilization (up: the smallest recommendation of its window; down: the largest), the scale-down
rate (a share of the window's largest fleet), no scale-down during a rollout, the scale-up rate,
Pending pods (no more replicas while GPUs are missing), the bounds, then the declared schedules'
floors. Each limit that changed the count is named, as a metric label and in the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tailguard.policy.need import Need, falling_window_s
from tailguard.policy.schedules import scheduled_floor
from tailguard.policy.state import PolicyState
from tailguard.policy.types import Limit, Observation, PolicyConfig, Reason
from tailguard.policy.window import Window

#: ``(time, replicas)``: a recommendation, or the fleet one decision set.
SizeAt = tuple[float, int]


@dataclass(frozen=True)
class Limited:
    """The replica count after every limit, the limits that bound it, and what to remember."""

    replicas: int
    limits: tuple[str, ...]
    code: Reason
    #: Sentences the limits add to the reason (a schedule window that holds the fleet).
    parts: tuple[str, ...]
    #: The recommendations the stabilization windows keep, this one included.
    recommendations: tuple[SizeAt, ...]


def apply_limits(
    config: PolicyConfig, state: PolicyState, obs: Observation, need: Need, window: Window
) -> Limited:
    """Bound ``need`` by the stabilization windows, the rates, Pending pods, the bounds and the
    schedules, in that order."""
    now, broken = window.now, window.broken
    current = obs.desired_replicas
    recommended = need.recommended
    code = need.code
    # In a breach remember what the measured load needs, not the emergency size with its drain:
    # at the capacity the replicas showed (``need.remembered``: what saturated ones finish) and at
    # least at the healthy one (``sized``), up to the fleet serving now. The healthy need alone
    # may be far smaller (the model was wrong, which is why the SLO broke), and once the breach
    # ended the window's largest entry then let the whole fleet go in one decision; without a
    # capacity shown, the fleet now is remembered.
    sized = need.sized
    if broken:
        shown = current if need.remembered is None else min(current, max(need.remembered, sized or 0))
        remembered = recommended if sized is None else max(shown, min(recommended, sized))
    else:
        remembered = recommended
    history = (*_prune(state.recommendations, now, config), (now, remembered))
    final = recommended
    limits: list[str] = []
    if final < current:
        if broken:
            final = current
        else:
            final, held_by = _limit_down(config, state, obs, need, history, final, now)
            limits.extend(held_by)
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
    final, bound = clamp(config, final)
    limits.extend(bound)
    parts: list[str] = []
    final, code = _schedule_floor(config, now, final, code, parts, limits)
    return Limited(final, tuple(dict.fromkeys(limits)), code, tuple(parts), history)


def _limit_down(
    config: PolicyConfig,
    state: PolicyState,
    obs: Observation,
    need: Need,
    history: tuple[SizeAt, ...],
    final: int,
    now: float,
) -> tuple[int, list[str]]:
    """A scale-down, held by the window's largest recommendation (over a shorter window through a
    gradual fall), the rate and a rollout; and the limits that held it."""
    current = obs.desired_replicas
    limits: list[str] = []
    window_s = config.scale_down_stabilization_s
    # (the size found at a start keeps its whole window: the cautious start)
    stable_s = falling_window_s(config, obs) if need.gradual_fall else window_s
    window = [(t, r) for t, r in history if now - t <= (window_s if t == state.started_at else stable_s)]
    largest = max(r for _, r in window)
    if largest > final:
        final = min(current, largest)
        limits.append(_down_limit(window, largest, state.started_at).value)
    kept = _kept_by_rate_limit(config, state.fleet_sizes, now, window_s)
    if final < kept:
        final = min(current, kept)
        limits.append(Limit.SCALE_DOWN_RATE.value)
    if final < current and obs.rollout_in_progress:
        final = current
        limits.append(Limit.ROLLOUT.value)
    return final, limits


def clamp(config: PolicyConfig, replicas: int) -> tuple[int, list[str]]:
    """``replicas`` within ``[min_replicas, max_replicas]``, and the bound that applied."""
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


def _prune(history: tuple[SizeAt, ...], now: float, config: PolicyConfig) -> tuple[SizeAt, ...]:
    """The recommendations the stabilization windows can still use.

    Everything within the scale-up window is kept (its minimum is taken); older entries only
    when no newer one is as large (the scale-down window takes the maximum), which keeps the
    annotation short however long the window.
    """
    longest = max(config.scale_down_stabilization_s, config.scale_up_stabilization_s)
    kept: list[SizeAt] = []
    newer_max = -1
    for t, r in reversed(history):
        age = now - t
        if age >= longest:
            break
        if age < config.scale_up_stabilization_s or r > newer_max:
            kept.append((t, r))
        newer_max = max(newer_max, r)
    return tuple(reversed(kept))


def _down_limit(recent: list[SizeAt], stable: int, started_at: float | None) -> Limit:
    """Which rule the largest recommendation of the window stands for: the size recorded at a
    (re)start is the cautious start, any other the stabilization."""
    binding = [t for t, r in recent if r >= stable]
    if any(t != started_at for t in binding):
        return Limit.STABILIZATION
    return Limit.CAUTIOUS_START


def _kept_by_rate_limit(config: PolicyConfig, sizes: tuple[SizeAt, ...], now: float, window_s: float) -> int:
    """The fewest replicas the scale-down rate allows now: the largest fleet set within the
    window, less ``scale_down_limit_fraction`` of it (rounded so that one replica may always go)."""
    largest = max((n for t, n in sizes if 0 <= now - t <= window_s), default=0)
    if largest <= 1:
        return 0
    fraction = min(1.0, max(0.0, config.scale_down_limit_fraction))
    return min(largest - 1, math.ceil(largest * (1.0 - fraction) - 1e-9))


def remember_size(
    sizes: tuple[SizeAt, ...], now: float, replicas: int, config: PolicyConfig
) -> tuple[SizeAt, ...]:
    """Add this decision's fleet to the sizes the scale-down rate reads, keeping only entries
    within the scale-down window that are larger than every newer one (a short list)."""
    return _larger_than_newer((*sizes, (now, replicas)), now, config.scale_down_stabilization_s)


def _larger_than_newer(entries: tuple[SizeAt, ...], now: float, window_s: float) -> tuple[SizeAt, ...]:
    """The entries within ``window_s`` of ``now`` that are larger than every newer one: the largest
    over any later window is the same, and the list stays short."""
    kept: list[SizeAt] = []
    newer_max = -1
    for t, value in reversed(entries):
        if now - t >= window_s or t > now:
            continue
        if value > newer_max:
            kept.append((t, value))
            newer_max = value
    return tuple(reversed(kept))
