"""What the policy reads, keeps and decides. Plain numbers in seconds; no I/O anywhere."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

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
    #: The window of ``request_rate_burst``: two scrape intervals, so its rate is one scrape's
    #: increase (what the Poisson spread of its count is reckoned on).
    burst_window_s: float = 30.0
    #: Declared windows of known load: while one is open its ``min_replicas`` is a floor
    #: (``Limit.SCHEDULE``), never above ``max_replicas``. ``decide`` reads them at ``now``.
    schedules: tuple[ScheduleWindow, ...] = ()

    @property
    def error_budget(self) -> float:
        """The share of requests allowed to miss, ``1 − goodput_target`` (at least 1e-4)."""
        return max(1e-4, 1.0 - self.goodput_target)


@dataclass(frozen=True)
class SettingRange:
    """The values a number of :class:`PolicyConfig` may take."""

    minimum: float = 0.0
    #: Whether ``minimum`` itself is allowed.
    inclusive: bool = True
    #: The largest value allowed, itself included (``None``: no bound).
    maximum: float | None = None


#: The ranges of :class:`PolicyConfig`'s numbers that are not "any value from 0" (what a field
#: not named takes). The operator's settings come from the CRD, whose schema bounds them; the
#: simulator's ``--tailguard-…`` options are checked against these.
SETTING_RANGES: dict[str, SettingRange] = {
    # (0 would decide without end at one instant of the clock)
    "interval_s": SettingRange(0.0, inclusive=False),
    # (a factor below 1 would let a fleet grow only by ``scale_up_limit_pods``)
    "scale_up_limit_factor": SettingRange(1.0),
    "scale_down_limit_fraction": SettingRange(0.0, inclusive=False, maximum=1.0),
    "max_metric_age_s": SettingRange(0.0, inclusive=False),
    "target_utilization": SettingRange(0.0, inclusive=False, maximum=1.0),
    "scale_down_margin": SettingRange(0.0, maximum=1.0),
    "batch_fill": SettingRange(0.0, inclusive=False, maximum=1.0),
    "rate_window_s": SettingRange(0.0, inclusive=False),
    "burst_window_s": SettingRange(0.0, inclusive=False),
}


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
    #: Mean seconds a request waited for its first engine step over the window:
    #: ``rate(vllm:request_queue_time_seconds_sum)`` over ``rate(..._count)``. Optional; it tells
    #: a queue the waiting gauge missed between two scrapes.
    queue_time_mean_s: float | None = None
    #: Mean prefill time of the window's requests, from the step that first scheduled a request
    #: to its first token: ``rate(vllm:request_prefill_time_seconds_sum)`` over ``rate(..._count)``.
    #: Optional; it is one step (or a long prompt's few) that prefilled a known prompt.
    prefill_time_mean_s: float | None = None
    ttft_within_slo: float | None = None
    tpot_within_slo: float | None = None
    goodput: float | None = None
    #: Finished requests per second (``vllm:request_success_total``).
    request_rate: float | None = None
    #: The same over the short burst window (two scrapes): a burst shorter than the rate window
    #: shows near its height here, diluted there. Optional; the error budget's history reads it.
    request_rate_burst: float | None = None
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
