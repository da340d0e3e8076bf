"""What every policy of the simulator shares: the SLO and bounds it is given, what it is built
from, a knob table for its settings, and the helpers two peers have in common."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from tailguard.policy import PolicyConfig
from tailguard.sim.engine import EngineSnapshot
from tailguard.sim.fleet import Autoscaler
from tailguard.sim.prometheus import ModelledPrometheus

Setting = float | int | str
Settings = Mapping[str, Setting]


@dataclass(frozen=True)
class SloAndBounds:
    """The scenario's SLO and replica bounds, as every peer policy is built with them."""

    ttft_s: float
    tpot_s: float | None
    goodput: float
    min_replicas: int
    max_replicas: int


@dataclass(frozen=True)
class BuildContext:
    """What a policy is built from: the scenario's SLO and bounds, tailguard's configuration, and
    the hindsight figures of the same trace (the lower bound's schedule, the flat fleet)."""

    slo: SloAndBounds
    policy_config: PolicyConfig
    #: The lower bound's replicas per window, and the window.
    bound: Sequence[int]
    oracle_window_s: float
    #: The hindsight flat fleet (the fewest fixed replicas that reach the target), when searched.
    flat_replicas: int | None = None
    #: Requests per second one replica served in the lower bound's schedule (a hindsight profile).
    profiled_rate: float | None = None
    #: The UNIX time of the trace's start, for tailguard's declared schedule windows.
    clock_origin_s: float = 0.0


@dataclass(frozen=True)
class Knob:
    """One setting of a policy, exposed as ``--<policy>-<name>`` on ``tailguard simulate``."""

    name: str
    default: Setting
    help: str
    #: Values a text knob may take; numbers are checked against ``minimum``, ``maximum`` (and
    #: finiteness).
    choices: tuple[str, ...] = ()
    minimum: float | None = 0.0
    #: Whether ``minimum`` itself is allowed.
    inclusive: bool = True
    #: The largest value allowed (itself included; ``None``: no bound), as for a share.
    maximum: float | None = None
    #: A whole number.
    integer: bool = False
    #: The scenario gives the default (``default`` is ``""``: "from the scenario").
    derived: bool = False
    #: Offered as a command-line option (a setting the scenario already has an option for is not).
    cli: bool = True

    def check(self, value: Setting) -> str | None:
        """Why ``value`` is not allowed, or ``None``."""
        if self.derived and value == "":
            return None
        if self.choices:
            return None if value in self.choices else f"must be one of {', '.join(self.choices)}"
        if isinstance(value, str):
            return "must be a number"
        if not math.isfinite(value):
            return "must be a finite number"
        if self.integer and value != int(value):
            return "must be a whole number"
        if self.minimum is not None:
            if self.inclusive and value < self.minimum:
                return f"must be >= {self.minimum:g}"
            if not self.inclusive and value <= self.minimum:
                return f"must be > {self.minimum:g}"
        if self.maximum is not None and value > self.maximum:
            return f"must be <= {self.maximum:g}"
        return None


@dataclass(frozen=True)
class PolicySpec:
    """A policy of the registry: its name, what it is, its knobs, a sweep and how to build it."""

    name: str
    describe: str
    knobs: tuple[Knob, ...]
    make: Callable[[BuildContext, Settings], Autoscaler]
    #: Settings the frontier benchmark sweeps (each a partial override of the defaults).
    grid: tuple[Settings, ...] = field(default_factory=tuple)
    #: Hindsight yardsticks (oracle, static, flat) are not autoscalers a user could run.
    hindsight: bool = False

    def defaults(self) -> dict[str, Setting]:
        return {k.name: k.default for k in self.knobs}

    def settings(self, overrides: Settings | None = None) -> dict[str, Setting]:
        """The defaults with ``overrides``; a ``ValueError`` names an unknown or bad setting."""
        out = self.defaults()
        known = {k.name: k for k in self.knobs}
        for key, value in (overrides or {}).items():
            knob = known.get(key)
            if knob is None:
                raise ValueError(f"{self.name} has no setting {key!r}; known: {', '.join(known) or 'none'}")
            problem = knob.check(value)
            if problem is not None:
                raise ValueError(f"{self.name} {key} {problem}, got {value!r}")
            out[key] = value
        return out

    def build(self, ctx: BuildContext, overrides: Settings | None = None) -> Autoscaler:
        return self.make(ctx, self.settings(overrides))


def number(settings: Settings, key: str) -> float:
    value = settings[key]
    if isinstance(value, str):
        raise TypeError(f"setting {key} is not a number: {value!r}")
    return float(value)


def label(settings: Settings, spec: PolicySpec) -> str:
    """A short label of the settings that differ from the defaults (``kpa target=50``)."""
    defaults = spec.defaults()
    parts = [
        f"{k}={v:g}" if not isinstance(v, str) else f"{k}={v}"
        for k, v in settings.items()
        if defaults.get(k) != v
    ]
    return f"{spec.name} {' '.join(parts)}" if parts else f"{spec.name} (defaults)"


class HpaBehaviour:
    """The HPA controller around a recommendation: tolerance is applied by the caller; here the
    scale-down stabilization (max of the window), the scale-up limit max(4 pods, 100%) per 15 s
    and the bounds."""

    def __init__(self, slo: SloAndBounds, *, down_window_s: float = 300.0) -> None:
        self.slo = slo
        self.down_window_s = down_window_s
        self.history: deque[tuple[float, int]] = deque()
        self.ups: deque[tuple[float, int]] = deque()

    def limit(self, now: float, current: int, recommended: int) -> int:
        if not self.history:
            # A controller that has been running keeps its window; start as if it had been
            # recommending the current size (the simulation starts warm for every policy).
            self.history.append((now, current))
        self.history.append((now, recommended))
        while self.history and now - self.history[0][0] > self.down_window_s:
            self.history.popleft()
        desired = recommended
        if desired < current:
            desired = min(current, max(r for _, r in self.history))
        if desired > current:
            # Scale-up policies: 4 pods or 100% per 15 s period, the larger.
            while self.ups and now - self.ups[0][0] >= 15.0:
                self.ups.popleft()
            base = current - sum(n for _, n in self.ups)
            allowed = max(base + 4, base * 2)
            desired = min(desired, max(current, allowed))
        desired = min(self.slo.max_replicas, max(self.slo.min_replicas, desired))
        if desired > current:
            self.ups.append((now, desired - current))
        return desired


def mean_per_pod(
    prom: ModelledPrometheus,
    now: float,
    window_s: float,
    total: Callable[[EngineSnapshot], float],
    count: Callable[[EngineSnapshot], float],
) -> dict[str, float]:
    """Per pod ``rate(x_sum[w]) / rate(x_count[w])``: the mean over the window."""
    sums = prom.per_pod_rate(now, window_s, total)
    counts = prom.per_pod_rate(now, window_s, count)
    return {p: sums[p] / counts[p] for p in sums if counts.get(p, 0.0) > 0}


def bounded(slo: SloAndBounds, desired: int) -> int:
    return min(slo.max_replicas, max(slo.min_replicas, desired))
