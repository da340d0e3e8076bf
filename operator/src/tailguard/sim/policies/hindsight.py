"""Yardsticks drawn from hindsight: the lower bound's schedule (oracle), a fleet fixed at its
largest window (static) and the hindsight flat fleet (the fewest fixed replicas that reach the
goodput target on the trace, found by the runner's search)."""

from __future__ import annotations

from collections.abc import Sequence

from tailguard.sim.fleet import Action, FleetView
from tailguard.sim.policies.base import BuildContext, PolicySpec, Settings


class Fixed:
    """A fixed fleet of ``replicas``."""

    def __init__(self, name: str, replicas: int) -> None:
        self.name = name
        self.replicas = replicas
        self.interval_s = 60.0

    def step(self, now: float, view: FleetView) -> Action:
        return Action(self.replicas, reason=f"{self.name} {self.replicas}", recommended=self.replicas)


class Schedule:
    """Replays a precomputed replica schedule (the lower bound's); its pods are Ready at once."""

    name = "oracle"

    def __init__(self, window_s: float, counts: Sequence[int]) -> None:
        self.window_s = window_s
        self.counts = list(counts)
        self.interval_s = window_s

    def __call__(self, now: float) -> int:
        index = min(len(self.counts) - 1, max(0, int(now // self.window_s)))
        return self.counts[index]

    def step(self, now: float, view: FleetView) -> Action:
        n = self(now)
        return Action(n, reason="oracle", recommended=n, instant=True)


def _static(ctx: BuildContext, _settings: Settings) -> Fixed:
    return Fixed("static", max(ctx.bound))


def _flat(ctx: BuildContext, _settings: Settings) -> Fixed:
    if ctx.flat_replicas is None:
        raise ValueError("the flat fleet needs the runner's search (flat_replicas)")
    return Fixed("flat", ctx.flat_replicas)


def _oracle(ctx: BuildContext, _settings: Settings) -> Schedule:
    return Schedule(ctx.oracle_window_s, ctx.bound)


STATIC = PolicySpec(
    "static",
    "a fixed fleet at the lower bound's largest window (the peak, in hindsight)",
    (),
    _static,
    hindsight=True,
)
FLAT = PolicySpec(
    "flat",
    "the hindsight flat fleet: the fewest fixed replicas that reach the target on this trace",
    (),
    _flat,
    hindsight=True,
)
ORACLE = PolicySpec(
    "oracle",
    "the lower bound's schedule with replicas Ready at once (no cold start)",
    (),
    _oracle,
    hindsight=True,
)
