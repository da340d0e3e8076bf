"""The decision's window: what one valid observation says before anything is sized.

Every step of ``decide`` reads the same few facts of the window (when it is, how long since the
last decision, which SLOs it shows broken, whether the fleet has settled, whether the budget is
being overspent). They are read once here, into one frozen record the steps share, rather than
passed to each step as a row of loose flags.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailguard.policy.budget import P99_ALLOWED, burn_rate
from tailguard.policy.observed import breach, is_idle
from tailguard.policy.state import PolicyState
from tailguard.policy.types import Observation, PolicyConfig

#: After the ready count changes, rate windows mix two fleet sizes for this long.
SETTLE_S = 120.0


@dataclass(frozen=True)
class Window:
    """The facts of one valid observation's window that every step of a decision reads."""

    #: The decision's clock, and the seconds since the last valid decision (bounded).
    now: float
    elapsed: float
    #: A sentence per SLO the window shows broken (empty when all hold).
    breaches: tuple[str, ...]
    #: No request ran, waited or finished over the window.
    idle: bool
    #: When the ready count last changed (this decision's ``now`` if it changed now).
    ready_changed_at: float | None
    #: The same replicas served the whole rate window.
    same_fleet: bool
    #: ``same_fleet``, and nothing starts or rolls.
    settled: bool
    #: The error budget burned faster than it accrues over the short window, as of the last decision.
    overspending: bool

    @property
    def broken(self) -> bool:
        """Some SLO is broken in this window."""
        return bool(self.breaches)


def read_window(config: PolicyConfig, state: PolicyState, obs: Observation, now: float) -> Window:
    """The window of a valid observation, against the state of the last decision."""
    elapsed = config.interval_s if state.last_valid_at is None else now - state.last_valid_at
    elapsed = min(max(elapsed, 0.0), 20.0 * config.interval_s)
    # A quiet window's slow requests are excused as chance only while the last minutes missed no
    # more than a p99 allows.
    breaches = breach(config, obs, excuse_chance=not missing_beyond_p99(state))
    ready_changed_at = state.ready_changed_at
    if state.ready is None or state.ready != obs.ready_replicas:
        ready_changed_at = now
    same_fleet = ready_changed_at is not None and now - ready_changed_at >= SETTLE_S
    return Window(
        now=now,
        elapsed=elapsed,
        breaches=tuple(breaches),
        idle=is_idle(obs),
        ready_changed_at=ready_changed_at,
        same_fleet=same_fleet,
        settled=same_fleet and obs.starting_replicas == 0 and not obs.rollout_in_progress,
        overspending=overspending(config, state),
    )


def overspending(config: PolicyConfig, state: PolicyState) -> bool:
    """The error budget burned faster than it accrues over the short window, as of the last
    decision (unknown with too few requests: not overspending)."""
    memory = state.budget
    burn = burn_rate(memory.good_short, memory.all_short, config.error_budget)
    return burn is not None and burn > 1.0


def missing_beyond_p99(state: PolicyState) -> bool:
    """The last minutes' requests missed more than the 1% a p99 SLO allows, as of the last
    decision (unknown with too few requests: not). Whatever the goodput target: a lower target
    must not make the policy wait longer before it answers a breach."""
    memory = state.budget
    burn = burn_rate(memory.good_short, memory.all_short, P99_ALLOWED)
    # Once a breach is judged, it stays judged until the burn is clearly back under: a service at
    # the SLO's edge otherwise flips between a breach and chance from one window to the next.
    was_broken = state.at_last_decision(state.last_breach_at)
    return burn is not None and (burn > 1.0 or (was_broken and burn > 0.75))
