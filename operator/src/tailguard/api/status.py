"""The observed state of an InferenceService, written by the operator."""

from __future__ import annotations

from pydantic import Field

from tailguard.api.types import ApiModel, Condition


class ObservedMetrics(ApiModel):
    """What Prometheus reported at the last decision (absent when not measured)."""

    time: str | None = Field(default=None, description="When the figures were read (RFC 3339).")
    p99_ttft_ms: float | None = Field(default=None, description="p99 time to first token, ms.")
    p99_tpot_ms: float | None = Field(default=None, description="p99 time per output token, ms.")
    goodput: float | None = Field(
        default=None, description="Estimated fraction of requests meeting every SLO (lower bound)."
    )
    request_rate: float | None = Field(default=None, description="Finished requests per second.")
    running: float | None = Field(default=None, description="Requests being decoded, all replicas.")
    waiting: float | None = Field(default=None, description="Requests queued, all replicas.")
    kv_cache_usage: float | None = Field(default=None, description="Mean KV-cache use, 0..1.")
    preemption_rate: float | None = Field(default=None, description="Preemptions per second.")


class LastDecision(ApiModel):
    """The autoscaler's most recent decision and why."""

    time: str | None = Field(default=None, description="When it was taken (RFC 3339).")
    replicas: int | None = Field(default=None, description="Replicas decided.")
    max_num_seqs: int | None = Field(default=None, description="Max batch decided.")
    reason: str = Field(default="", description="Machine-readable reason code.")
    message: str = Field(default="", description="Why, with the numbers.")
    limits: list[str] = Field(default_factory=list, description="Limits that bounded the decision.")
    applied: bool = Field(default=False, description="Whether it was applied (false in DryRun).")


class InferenceServiceStatus(ApiModel):
    """Observed state, written by tailguard."""

    observed_generation: int | None = Field(
        default=None, description="The .metadata.generation this status reflects."
    )
    replicas: int | None = Field(default=None, description="Replicas of the managed Deployment.")
    ready_replicas: int | None = Field(default=None, description="Replicas ready to serve.")
    pending_replicas: int | None = Field(
        default=None, description="Replicas whose pods cannot be scheduled (e.g. no free GPU)."
    )
    desired_replicas: int | None = Field(
        default=None, description="Replicas tailguard wants (mode Auto) or spec.replicas."
    )
    ready: str | None = Field(default=None, description="ready/desired replicas, for kubectl get.")
    label_selector: str | None = Field(
        default=None, description="Selector of the replicas' pods, as a string, for /scale."
    )
    max_num_seqs: int | None = Field(default=None, description="Max batch the replicas run with.")
    image: str | None = Field(
        default=None,
        description="vLLM image of the Deployment's pod template: spec.engine.image or the operator's "
        "default. The replicas run it once any rollout completes.",
    )
    observed: ObservedMetrics | None = Field(default=None, description="Last metrics read.")
    last_decision: LastDecision | None = Field(default=None, description="Last autoscaling decision.")
    last_scale_time: str | None = Field(default=None, description="When replicas last changed.")
    last_max_batch_change_time: str | None = Field(default=None, description="When max batch last changed.")
    conditions: list[Condition] = Field(default_factory=list, description="Current conditions.")
