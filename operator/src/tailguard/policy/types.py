"""What the policy reads, keeps and decides. Plain numbers in seconds; no I/O anywhere."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from tailguard.policy.budget import BUCKETS as JUMP_BUCKETS
from tailguard.policy.budget import PEAK_BUCKETS, BudgetMemory
from tailguard.policy.schedules import ScheduleWindow


@dataclass(frozen=True)
class PolicyConfig:
    """The SLO and the limits one InferenceService gives its autoscaler."""

    min_replicas: int = 1
    max_replicas: int = 4
    #: p99 time to first token, seconds.
    ttft_slo_s: float = 0.5
    #: p99 time per output token, seconds; ``None`` when not declared.
    tpot_slo_s: float | None = None
    #: Fraction of requests that must meet every declared SLO.
    goodput_target: float = 0.99
    #: How often ``decide`` is called (the rate limits count in these).
    interval_s: float = 15.0
    #: A scale-up must be recommended throughout this window (0: at once).
    scale_up_stabilization_s: float = 0.0
    #: A scale-down must be recommended throughout this window.
    scale_down_stabilization_s: float = 300.0
    #: At most ``max(current × factor, current + pods)`` replicas after one decision.
    scale_up_limit_factor: float = 2.0
    scale_up_limit_pods: int = 4
    #: At most this share of the largest fleet of the last scale-down window is removed within
    #: it (0.5: at least half stays); 1 removes any number at once.
    scale_down_limit_fraction: float = 0.5
    #: Bounds of ``--max-num-seqs`` tuning; equal bounds switch tuning off.
    max_batch_min: int = 16
    max_batch_max: int = 512
    #: Least time between two max-batch changes (each restarts every replica).
    max_batch_change_interval_s: float = 900.0
    max_batch_tuning: bool = True
    #: After a breach, hold the largest recommendation this long before scaling down, for
    #: ``burst_memory_s`` after the breach: for loads whose bursts recur within minutes. The
    #: default (equal to the scale-down window) leaves it off; see docs/policy.md.
    burst_hold_s: float = 300.0
    burst_memory_s: float = 1800.0
    #: Keep capacity for this share (0..1) of the way from the load now to the largest load seen
    #: within ``burst_memory_s``: headroom learned from bursts already seen. 0 (the default)
    #: switches it off; 1 holds the fleet at the recent peak.
    burst_reserve: float = 0.0
    #: Hold capacity for the load the service may meet within one start-up, at the quantile of
    #: its own history that the error budget allows (see ``policy.budget``).
    budget_headroom: bool = True
    #: Extra capacity the user asks for, as a share of the load (0.25: size for 125% of it).
    headroom: float = 0.0
    #: Expected seconds from a new replica's creation to Ready: the forecast horizon.
    startup_s: float = 90.0
    #: Data older than this is stale and holds every decision.
    max_metric_age_s: float = 90.0
    #: Share of the learned per-replica capacity the service is sized to use.
    target_utilization: float = 0.93
    #: Scale down only once the load fits at ``target_utilization − scale_down_margin``.
    scale_down_margin: float = 0.08
    #: Share of max batch one replica is planned to fill (the rest absorbs fluctuation).
    batch_fill: float = 0.85
    #: The ``rate()`` window of the metrics reader: the finished-request rate is a mean over it,
    #: and the change of requests in flight over the same span turns it into arrivals.
    rate_window_s: float = 120.0
    #: Declared windows of known load: while one is open its ``min_replicas`` is a floor
    #: (``Limit.SCHEDULE``), never above ``max_replicas``. ``decide`` reads them at ``now``.
    schedules: tuple[ScheduleWindow, ...] = ()


@dataclass(frozen=True)
class EngineFigures:
    """What the engines' metrics say over one ``rate()`` window, summed or averaged over pods.

    Every figure is ``None`` when it was not measured; a value is never invented. Rates are per
    second over the reader's ``rate()`` window; ``running`` and ``waiting`` are summed over pods,
    ``kv_cache_usage`` is the mean over pods (0..1). The metrics reader's figures per service and
    the policy's observation both carry exactly these, declared once here.
    """

    p99_ttft_s: float | None = None
    p99_tpot_s: float | None = None
    #: Mean inter-token latency over the window: ``rate(vllm:inter_token_latency_seconds_sum)``
    #: over ``rate(..._count)``, the mean engine step. Optional; the capacity model learns
    #: the step-time curve only when it is there.
    itl_mean_s: float | None = None
    ttft_within_slo: float | None = None
    tpot_within_slo: float | None = None
    goodput: float | None = None
    #: Finished requests per second (``vllm:request_success_total``).
    request_rate: float | None = None
    prompt_token_rate: float | None = None
    generation_token_rate: float | None = None
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage: float | None = None
    preemption_rate: float | None = None


@dataclass(frozen=True)
class Observation(EngineFigures):
    """What Prometheus and the Deployment report at one moment: the engines' figures, when they
    were sampled, and the Deployment's replicas."""

    #: Time of the newest sample (same clock as ``now``); ``None`` when unknown.
    sample_time: float | None = None
    #: Seconds from a pod's creation to Ready, measured over the service's recent pods
    #: (``None``: not measured; the configured ``startup_s`` is used).
    startup_s: float | None = None
    #: Pods whose engine reported (``None``: unknown, then ``ready_replicas`` is used).
    reporting_pods: int | None = None
    ready_replicas: int = 0
    #: Scheduled pods that are not Ready yet (loading the model).
    starting_replicas: int = 0
    #: Pods that cannot be scheduled (no free GPU).
    pending_replicas: int = 0
    #: The replica count the Deployment is set to now.
    desired_replicas: int = 1
    #: The ``--max-num-seqs`` the pods run with now.
    max_batch: int = 256
    rollout_in_progress: bool = False


class Reason(StrEnum):
    """Why a decision came out as it did; a small fixed set, usable as a metric label."""

    METRICS_MISSING = "MetricsMissing"
    METRICS_STALE = "MetricsStale"
    SLO_BREACH = "SLOBreach"
    LOAD_RISING = "LoadRising"
    LOAD_FALLING = "LoadFalling"
    STEADY = "Steady"
    IDLE = "Idle"
    PENDING_GPUS = "PendingGPUs"
    MAX_BATCH_RAISED = "MaxBatchRaised"
    MAX_BATCH_LOWERED = "MaxBatchLowered"
    #: A declared schedule window holds more replicas than the load asks for.
    SCHEDULED = "Scheduled"


class Limit(StrEnum):
    """A limit that changed the recommendation."""

    MIN_REPLICAS = "min_replicas"
    MAX_REPLICAS = "max_replicas"
    SCALE_UP_RATE = "scale_up_rate"
    SCALE_DOWN_RATE = "scale_down_rate"
    STABILIZATION = "stabilization"
    CAUTIOUS_START = "cautious_start"
    BURST_HOLD = "burst_hold"
    PENDING_GPUS = "pending_gpus"
    ROLLOUT = "rollout"
    MAX_BATCH_INTERVAL = "max_batch_interval"
    SCHEDULE = "schedule"


@dataclass(frozen=True)
class Decision:
    """What to run: replicas and max batch, whether the data allowed a decision, and why."""

    replicas: int
    max_batch: int
    valid: bool
    reason_code: Reason
    reason: str
    limits: tuple[str, ...] = ()
    #: The replica count the load asked for before limits (``None`` without valid data).
    recommended: int | None = None
    #: Learned sustainable requests per second per replica at the SLO.
    capacity_per_replica: float | None = None


_STATE_VERSION = 1


@dataclass(frozen=True)
class PolicyState:
    """What the policy remembers between decisions; small, stored as JSON in an annotation.

    Unknown keys are ignored and missing ones take their defaults, so an older or newer operator
    can read it. An empty state (after a restart without the annotation) makes the policy
    cautious: no scale-down until a full stabilization window of its own observations.
    """

    version: int = _STATE_VERSION
    started_at: float | None = None
    last_valid_at: float | None = None
    #: ``(time, recommended replicas)`` within the longest stabilization window.
    recommendations: tuple[tuple[float, int], ...] = ()
    #: Smoothed arrival rate (req/s), its trend (req/s per s), and the queue at the last decision.
    rate_level: float | None = None
    rate_trend: float = 0.0
    waiting: float | None = None
    #: Mean output tokens per request (smoothed).
    output_tokens: float | None = None
    #: Decayed sums of (replica batch N, step time τ): weight, ΣN, ΣN², Στ, ΣNτ.
    fit: tuple[float, float, float, float, float] = (0.0, 0.0, 0.0, 0.0, 0.0)
    #: Decayed sums on the same pairs with the prompt tokens x prefilled per step: Σx, Σx², ΣNx, Σxτ.
    prefill_fit: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    #: Mean prompt tokens per request (smoothed); ``None`` while no prompt-token rate was read.
    prompt_tokens: float | None = None
    #: Shortest step time seen (the base step) and how far p99 TPOT runs above the mean step.
    step_floor_s: float | None = None
    tpot_offset_s: float | None = None
    #: Correction of the model from observed breaches (≤ 1).
    capacity_scale: float = 1.0
    #: Ready replicas at the last decision and when that count last changed.
    ready: int | None = None
    ready_changed_at: float | None = None
    last_scale_at: float | None = None
    last_direction: int = 0
    last_max_batch_change_at: float | None = None
    #: When the SLO was last seen broken.
    last_breach_at: float | None = None
    #: ``(sample time, requests running + waiting, serving replicas)`` over the last rate window.
    in_flight: tuple[tuple[float, float, int], ...] = ()
    #: ``(time, load)`` of the largest loads within ``burst_memory_s`` (a newer one as large
    #: replaces an older one), for the burst reserve.
    load_peaks: tuple[tuple[float, float], ...] = ()
    #: When requests last queued (more than one waiting per serving replica).
    queue_seen_at: float | None = None
    #: When the running gauge last read a jump of the load (see ``decide``'s surge).
    jump_seen_at: float | None = None
    #: ``(time, replicas set)`` within the scale-down window, each larger than every newer one:
    #: the largest fleet of the window, which bounds how much one window may remove.
    fleet_sizes: tuple[tuple[float, int], ...] = ()
    #: The error budget's memory: the load's recent jumps and the attainment (see ``budget``).
    budget: BudgetMemory = field(default_factory=BudgetMemory)

    def to_json(self) -> str:
        """Compact JSON; ``from_json`` reads it back to an equal state."""
        return json.dumps(_finite_only(asdict(self)), separators=(",", ":"), sort_keys=True)

    @staticmethod
    def from_json(text: str | None) -> PolicyState:
        """Parse ``to_json`` output; anything unreadable yields the empty (cautious) state."""
        if not text:
            return PolicyState()
        try:
            raw = json.loads(text)
        except (ValueError, TypeError):
            return PolicyState()
        if not isinstance(raw, dict):
            return PolicyState()
        values: dict[str, Any] = {}
        for f in fields(PolicyState):
            if f.name not in raw:
                continue
            parsed = _parse_field(f.name, raw[f.name])
            if parsed is not _INVALID:
                values[f.name] = parsed
        return PolicyState(**values)


_INVALID = object()


def _finite_only(value: Any) -> Any:
    """JSON has no NaN or infinity: such a value is written as null (and read back as unknown)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list | tuple):
        return [_finite_only(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite_only(v) for k, v in value.items()}
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _parse_field(name: str, value: Any) -> Any:
    """One field of the stored state, type-checked; ``_INVALID`` keeps the default."""
    if name in ("version", "last_direction"):
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else _INVALID
    if name == "ready":
        if value is None:
            return None
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else _INVALID
    if name in ("recommendations", "fleet_sizes"):
        if not isinstance(value, list):
            return _INVALID
        out = []
        for item in value:
            if isinstance(item, list) and len(item) == 2:
                t, r = _number(item[0]), item[1]
                if t is not None and isinstance(r, int) and not isinstance(r, bool):
                    out.append((t, r))
        return tuple(out)
    if name == "load_peaks":
        if not isinstance(value, list):
            return _INVALID
        peaks = []
        for item in value:
            if isinstance(item, list) and len(item) == 2:
                t, load = _number(item[0]), _number(item[1])
                if t is not None and load is not None and load >= 0:
                    peaks.append((t, load))
        return tuple(peaks)
    if name == "in_flight":
        if not isinstance(value, list):
            return _INVALID
        rows = []
        for item in value:
            if isinstance(item, list) and len(item) == 3:
                t, n, k = _number(item[0]), _number(item[1]), item[2]
                if t is not None and n is not None and isinstance(k, int) and not isinstance(k, bool):
                    rows.append((t, n, k))
        return tuple(rows)
    if name == "budget":
        return _parse_budget(value)
    if name in ("fit", "prefill_fit"):
        if not isinstance(value, list) or len(value) != (5 if name == "fit" else 4):
            return _INVALID
        nums = [_number(v) for v in value]
        if any(n is None for n in nums):
            return _INVALID
        return tuple(n for n in nums if n is not None)
    if name in ("rate_trend", "capacity_scale"):
        number = _number(value)
        return number if number is not None else _INVALID
    # every other field is an optional float
    if value is None:
        return None
    number = _number(value)
    return number if number is not None else _INVALID


def _parse_budget(value: Any) -> Any:
    """The budget memory, each part checked; a part that does not parse starts over."""
    if not isinstance(value, dict):
        return _INVALID

    def floats(raw: Any, length: int) -> tuple[float, ...]:
        if not isinstance(raw, list) or len(raw) != length:
            return ()
        nums = [_number(v) for v in raw]
        return tuple(n for n in nums if n is not None and n >= 0) if all(n is not None for n in nums) else ()

    loads = []
    for item in value.get("loads", []) if isinstance(value.get("loads"), list) else []:
        if isinstance(item, list) and len(item) == 2:
            t, load = _number(item[0]), _number(item[1])
            if t is not None and load is not None and load >= 0:
                loads.append((t, load))
    sums = {}
    for key in ("good_short", "all_short", "good_long", "all_long"):
        number = _number(value.get(key))
        sums[key] = number if number is not None and number >= 0 else 0.0
    if sums["good_short"] > sums["all_short"] or sums["good_long"] > sums["all_long"]:
        sums = dict.fromkeys(sums, 0.0)
    gain = _number(value.get("gain"))
    jumps = floats(value.get("jumps"), JUMP_BUCKETS)
    peaks = floats(value.get("peaks"), PEAK_BUCKETS)
    return BudgetMemory(
        loads=tuple(loads[-64:]),
        jumps=jumps if len(jumps) == JUMP_BUCKETS else (),
        peaks=peaks if len(peaks) == PEAK_BUCKETS else (),
        gain=gain if gain is not None and gain > 0 else 1.0,
        **sums,
    )
