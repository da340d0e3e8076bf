"""The desired state of an InferenceService: model, engine, resources, SLOs and autoscaling."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator, model_validator

from tailguard import cron
from tailguard.api.rules import CrossFieldRule
from tailguard.api.types import ApiModel, EnvVar, SecretKeyRef, Toleration

#: The vLLM image used when neither the spec nor the operator's ``--default-vllm-image`` names one.
#: Pinned: a new engine version is a deliberate change.
DEFAULT_VLLM_IMAGE = "vllm/vllm-openai:v0.33.0"
#: An image reference as a container takes it: one word (the registry resolves the rest).
IMAGE_PATTERN = r"^\S+$"


class ModelCache(ApiModel):
    """A volume that holds downloaded weights, so a new replica does not fetch them again."""

    claim_name: str = Field(
        min_length=1,
        max_length=253,
        description="PersistentVolumeClaim mounted as the model cache (ReadOnlyMany or ReadWriteMany).",
    )
    mount_path: str = Field(
        default="/root/.cache/huggingface",
        pattern=r"^/.*",
        description="Where the cache is mounted; HF_HOME points here.",
    )
    read_only: bool = Field(default=False, description="Mount the cache read-only.")


class ModelSpec(ApiModel):
    """What vLLM serves."""

    name: str = Field(
        min_length=1,
        max_length=512,
        description="Hugging Face hub id (e.g. meta-llama/Llama-3.1-8B-Instruct) or a path in the container.",
    )
    served_name: str | None = Field(
        default=None,
        max_length=253,
        description="Model name clients send and vLLM reports in the model_name label; "
        "defaults to the InferenceService name.",
    )
    token_secret_ref: SecretKeyRef | None = Field(
        default=None, description="Secret holding a hub token, exposed to vLLM as HF_TOKEN."
    )
    cache: ModelCache | None = Field(default=None, description="Optional model-cache volume.")


class EngineSpec(ApiModel):
    """vLLM engine settings. Defaults suit an 8B model on one H100."""

    image: str | None = Field(
        default=None,
        min_length=1,
        pattern=IMAGE_PATTERN,
        description="vLLM OpenAI-server image; its entrypoint must be `vllm serve`. When unset the "
        "operator's default applies (its --default-vllm-image, the chart's vllm.image), and a change "
        "of that default rolls the replicas at the next reconcile; set it to pin a version.",
    )
    max_num_seqs: int = Field(
        default=256,
        ge=1,
        le=4096,
        description="Starting --max-num-seqs (max batch). In mode Auto tailguard may tune it "
        "within spec.autoscaling.maxBatch; each change is a rolling restart.",
    )
    max_num_batched_tokens: int = Field(
        default=8192,
        ge=1,
        le=1048576,
        description="--max-num-batched-tokens: token budget of one engine step (prefill chunks included).",
    )
    max_model_len: int | None = Field(
        default=None, ge=1, description="--max-model-len; the model's own context length when unset."
    )
    gpu_memory_utilization: float = Field(
        default=0.9,
        gt=0,
        le=1,
        description="--gpu-memory-utilization: fraction of GPU memory vLLM may use (weights + KV cache).",
    )
    tensor_parallel_size: int = Field(
        default=1, ge=1, le=64, description="--tensor-parallel-size: GPUs one model copy spans."
    )
    shutdown_timeout_seconds: int = Field(
        default=30,
        ge=0,
        le=3600,
        description="--shutdown-timeout: seconds in-flight requests may drain after SIGTERM; "
        "the pod's grace period is set above it.",
    )
    startup_timeout_seconds: int = Field(
        default=900,
        ge=60,
        le=7200,
        description="How long a replica may take to load the model before its startup probe fails.",
    )
    extra_args: list[str] = Field(
        default_factory=list, description="More `vllm serve` arguments, appended as given."
    )
    env: list[EnvVar] = Field(default_factory=list, description="Environment of the vLLM container.")


class ResourcesSpec(ApiModel):
    """Compute for one replica and where it may run."""

    gpus: int = Field(
        default=1, ge=1, le=64, description="GPUs per replica; at least engine.tensorParallelSize."
    )
    gpu_resource_name: str = Field(
        default="nvidia.com/gpu",
        min_length=1,
        description="Extended resource name of the GPU in the cluster.",
    )
    cpu: str = Field(default="4", pattern=r"^[0-9]+(\.[0-9]+)?m?$", description="CPU request.")
    memory: str = Field(
        default="32Gi",
        pattern=r"^[0-9]+(\.[0-9]+)?([EPTGMK]i?)?$",
        description="Memory request and limit of the vLLM container.",
    )
    shm_size: str = Field(
        default="8Gi",
        pattern=r"^[0-9]+(\.[0-9]+)?([EPTGMK]i?)?$",
        description="Size of /dev/shm (a memory emptyDir), used by tensor parallelism.",
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Node labels a replica's node must carry."
    )
    tolerations: list[Toleration] = Field(default_factory=list, description="Pod tolerations.")
    affinity: dict[str, Any] | None = Field(
        default=None,
        description="Pod affinity, as in a Pod spec.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class SLOSpec(ApiModel):
    """The latency objectives and the share of requests that must meet them."""

    ttft_p99_ms: float = Field(
        default=500, gt=0, le=600000, description="p99 time to first token, in milliseconds."
    )
    tpot_p99_ms: float | None = Field(
        default=None,
        gt=0,
        le=60000,
        description="Optional p99 time per output token, in milliseconds.",
    )
    goodput_target: float = Field(
        default=0.99,
        gt=0,
        le=1,
        description="Fraction of finished requests that must meet every declared SLO at once, in (0, 1].",
    )


class AutoscalingMode(StrEnum):
    AUTO = "Auto"
    DRY_RUN = "DryRun"
    MANUAL = "Manual"


#: The name ``Manual`` had before; still accepted when quoted (YAML reads a bare ``Off`` as false).
LEGACY_MANUAL_MODE = "Off"
MODE_WORDING = (
    'write mode: Manual (YAML reads a bare Off as the boolean false; the old value works only quoted, "Off")'
)


def _mode_value(value: Any) -> Any:
    """The mode as written, with the legacy ``"Off"`` read as Manual and a YAML boolean explained."""
    if isinstance(value, bool):
        raise ValueError(f"mode is the boolean {str(value).lower()}: {MODE_WORDING}")
    return AutoscalingMode.MANUAL if value == LEGACY_MANUAL_MODE else value


class MaxBatchSpec(ApiModel):
    """How far and how often tailguard may retune --max-num-seqs."""

    min: int = Field(default=16, ge=1, le=4096, description="Lowest max batch tailguard may set.")
    max: int = Field(default=512, ge=1, le=4096, description="Highest max batch tailguard may set.")
    min_change_interval_seconds: int = Field(
        default=900,
        ge=60,
        description="Least time between two max-batch changes (each restarts every replica).",
    )
    enabled: bool = Field(default=True, description="Let tailguard retune max batch in mode Auto.")


#: The most schedule windows one service may declare.
MAX_SCHEDULES = 16


class ScheduleSpec(ApiModel):
    """A window of known load: from each start, for a duration, at least minReplicas run."""

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="Names the window in decisions and events (a DNS label, unique in the list).",
    )
    start: str = Field(
        description="When the window opens: a five-field cron expression (minute hour day-of-month "
        "month day-of-week) read in timeZone, e.g. `0 8 * * MON-FRI`. Fields take `*`, values, "
        "lists, ranges and steps; months and weekdays also three-letter names.",
        json_schema_extra={"pattern": cron.CRON_PATTERN, "maxLength": 100},
    )
    duration: str = Field(
        description="How long the window stays open after each start, in hours and minutes "
        "(`2h`, `30m`, `1h30m`; one minute to 168h). Elapsed time, whatever the clocks do.",
        json_schema_extra={"pattern": cron.DURATION_PATTERN, "maxLength": 16},
    )
    time_zone: str = Field(
        default="UTC",
        description="IANA time zone the start is read in, e.g. Europe/Berlin. A start skipped when "
        "the clocks go forward opens the window at the jump; one repeated when they go back opens it twice.",
        json_schema_extra={"pattern": cron.ZONE_PATTERN, "maxLength": 64},
    )
    min_replicas: int = Field(
        ge=1,
        le=1000,
        description="Fewest replicas while the window is open; at most autoscaling.maxReplicas.",
    )

    @field_validator("start")
    @classmethod
    def _start_parses(cls, value: str) -> str:
        cron.parse_cron(value)
        return value

    @field_validator("duration")
    @classmethod
    def _duration_parses(cls, value: str) -> str:
        cron.parse_duration(value)
        return value

    @field_validator("time_zone")
    @classmethod
    def _zone_exists(cls, value: str) -> str:
        cron.zone(value)
        return value

    @property
    def duration_seconds(self) -> int:
        """``duration`` in seconds."""
        return cron.parse_duration(self.duration)


class AutoscalingSpec(ApiModel):
    """How tailguard sizes the service."""

    mode: Annotated[AutoscalingMode, BeforeValidator(_mode_value)] = Field(
        default=AutoscalingMode.AUTO,
        description="Auto: tailguard sets replicas and max batch. DryRun: it decides and reports, "
        "spec.replicas applies. Manual: spec.replicas applies (kubectl scale, HPA or KEDA via /scale). "
        '"Off" (quoted) is the former name of Manual.',
        json_schema_extra={"enum": [*AutoscalingMode, LEGACY_MANUAL_MODE]},
    )
    min_replicas: int = Field(default=1, ge=1, le=1000, description="Fewest replicas in mode Auto.")
    max_replicas: int = Field(default=4, ge=1, le=1000, description="Most replicas in mode Auto.")
    interval_seconds: int = Field(
        default=15, ge=5, le=600, description="How often tailguard reads metrics and decides."
    )
    scale_down_stabilization_seconds: int = Field(
        default=300,
        ge=0,
        le=3600,
        description=(
            "A scale-down needs every recommendation of this window to agree; through a gradual "
            "fall (a trend on a load that does not jump) of one start-up or rate window, at most this."
        ),
    )
    max_batch: MaxBatchSpec = Field(
        default_factory=MaxBatchSpec, description="Bounds and pace of max-batch tuning."
    )
    schedules: list[ScheduleSpec] = Field(
        default_factory=list,
        max_length=MAX_SCHEDULES,
        description="Windows of known load (pre-warm for peaks): while one is open, at least its "
        "minReplicas run in mode Auto; overlapping windows hold the largest. At most 16.",
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )

    @field_validator("schedules")
    @classmethod
    def _names_unique(cls, value: list[ScheduleSpec]) -> list[ScheduleSpec]:
        seen: set[str] = set()
        for window in value:
            if window.name in seen:
                raise ValueError(f"two windows are named {window.name!r}")
            seen.add(window.name)
        return value


SPEC_RULES: tuple[CrossFieldRule, ...] = (
    CrossFieldRule(
        cel="self.autoscaling.minReplicas <= self.autoscaling.maxReplicas",
        message="autoscaling.minReplicas must not exceed autoscaling.maxReplicas",
        field_path=".autoscaling.minReplicas",
        check=lambda s: s.autoscaling.min_replicas <= s.autoscaling.max_replicas,
    ),
    CrossFieldRule(
        cel="!has(self.autoscaling.schedules) || "
        "self.autoscaling.schedules.all(w, w.minReplicas <= self.autoscaling.maxReplicas)",
        message="autoscaling.schedules[].minReplicas must not exceed autoscaling.maxReplicas",
        field_path=".autoscaling.schedules",
        check=lambda s: all(w.min_replicas <= s.autoscaling.max_replicas for w in s.autoscaling.schedules),
    ),
    CrossFieldRule(
        cel="self.autoscaling.maxBatch.min <= self.autoscaling.maxBatch.max",
        message="autoscaling.maxBatch.min must not exceed autoscaling.maxBatch.max",
        field_path=".autoscaling.maxBatch.min",
        check=lambda s: s.autoscaling.max_batch.min <= s.autoscaling.max_batch.max,
    ),
    CrossFieldRule(
        cel="self.engine.maxNumSeqs >= self.autoscaling.maxBatch.min && "
        "self.engine.maxNumSeqs <= self.autoscaling.maxBatch.max",
        message="engine.maxNumSeqs must lie within autoscaling.maxBatch.min..max",
        field_path=".engine.maxNumSeqs",
        check=lambda s: s.autoscaling.max_batch.min <= s.engine.max_num_seqs <= s.autoscaling.max_batch.max,
    ),
    CrossFieldRule(
        cel="self.engine.maxNumBatchedTokens >= self.autoscaling.maxBatch.max",
        message="engine.maxNumBatchedTokens must be at least autoscaling.maxBatch.max "
        "(vLLM needs a token per sequence in a step)",
        field_path=".engine.maxNumBatchedTokens",
        check=lambda s: s.engine.max_num_batched_tokens >= s.autoscaling.max_batch.max,
    ),
    CrossFieldRule(
        cel="self.resources.gpus >= self.engine.tensorParallelSize",
        message="resources.gpus must be at least engine.tensorParallelSize",
        field_path=".resources.gpus",
        check=lambda s: s.resources.gpus >= s.engine.tensor_parallel_size,
    ),
    CrossFieldRule(
        cel="!has(self.engine.maxModelLen) || self.engine.maxModelLen >= 16",
        message="engine.maxModelLen must be at least 16 tokens",
        field_path=".engine.maxModelLen",
        check=lambda s: s.engine.max_model_len is None or s.engine.max_model_len >= 16,
    ),
)


class InferenceServiceSpec(ApiModel):
    """A vLLM model served on GPUs, kept inside its latency SLOs by tailguard."""

    model: ModelSpec = Field(description="The model to serve.")
    engine: EngineSpec = Field(default_factory=EngineSpec, description="vLLM engine settings.")
    resources: ResourcesSpec = Field(
        default_factory=ResourcesSpec, description="GPUs, CPU, memory and placement of one replica."
    )
    replicas: int = Field(
        default=1,
        ge=0,
        le=1000,
        description="Replicas when autoscaling.mode is Manual or DryRun; the target of the /scale "
        "subresource.",
    )
    slo: SLOSpec = Field(default_factory=SLOSpec, description="Latency objectives and goodput target.")
    autoscaling: AutoscalingSpec = Field(
        default_factory=AutoscalingSpec, description="How tailguard sizes the service."
    )

    @model_validator(mode="after")
    def _cross_field_rules(self) -> InferenceServiceSpec:
        broken = [rule for rule in SPEC_RULES if not rule.check(self)]
        if broken:
            raise ValueError("; ".join(f"spec{rule.field_path}: {rule.message}" for rule in broken))
        return self
