"""The InferenceService API (``tailguard.dev/v1alpha1``): pydantic models, the source of the CRD."""

from tailguard.api.resource import (
    API_VERSION,
    GROUP,
    KIND,
    PLURAL,
    VERSION,
    FieldError,
    InferenceService,
    InvalidResourceError,
    ObjectMeta,
    parse_inference_service,
)
from tailguard.api.spec import (
    DEFAULT_VLLM_IMAGE,
    AutoscalingMode,
    AutoscalingSpec,
    EngineSpec,
    InferenceServiceSpec,
    MaxBatchSpec,
    ModelCache,
    ModelSpec,
    ResourcesSpec,
    SLOSpec,
)
from tailguard.api.status import InferenceServiceStatus, LastDecision, ObservedMetrics
from tailguard.api.types import Condition, ConditionStatus, EnvVar, SecretKeyRef, Toleration

__all__ = [
    "API_VERSION",
    "DEFAULT_VLLM_IMAGE",
    "GROUP",
    "KIND",
    "PLURAL",
    "VERSION",
    "AutoscalingMode",
    "AutoscalingSpec",
    "Condition",
    "ConditionStatus",
    "EngineSpec",
    "EnvVar",
    "FieldError",
    "InferenceService",
    "InferenceServiceSpec",
    "InferenceServiceStatus",
    "InvalidResourceError",
    "LastDecision",
    "MaxBatchSpec",
    "ModelCache",
    "ModelSpec",
    "ObjectMeta",
    "ObservedMetrics",
    "ResourcesSpec",
    "SLOSpec",
    "SecretKeyRef",
    "Toleration",
    "parse_inference_service",
]
