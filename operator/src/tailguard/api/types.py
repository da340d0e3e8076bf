"""Small shared API types: references, tolerations, environment variables, conditions."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class ApiModel(BaseModel):
    """Base of every API model: camelCase on the wire, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
    )


class SecretKeyRef(ApiModel):
    """A key inside a Secret in the InferenceService's namespace."""

    name: str = Field(min_length=1, max_length=253, description="Name of the Secret.")
    key: str = Field(default="token", min_length=1, description="Key inside the Secret.")


class TolerationOperator(StrEnum):
    EXISTS = "Exists"
    EQUAL = "Equal"


class TaintEffect(StrEnum):
    NO_SCHEDULE = "NoSchedule"
    PREFER_NO_SCHEDULE = "PreferNoSchedule"
    NO_EXECUTE = "NoExecute"


class Toleration(ApiModel):
    """A pod toleration, as in a Pod spec."""

    key: str | None = Field(default=None, description="Taint key the toleration applies to.")
    operator: TolerationOperator | None = Field(default=None, description="Exists or Equal.")
    value: str | None = Field(default=None, description="Taint value matched with operator Equal.")
    effect: TaintEffect | None = Field(default=None, description="Taint effect to match; empty matches all.")
    toleration_seconds: int | None = Field(
        default=None, description="How long a NoExecute taint is tolerated before eviction."
    )


class EnvVar(ApiModel):
    """An environment variable of the vLLM container."""

    name: str = Field(min_length=1, description="Variable name.")
    value: str | None = Field(default=None, description="Literal value.")
    value_from: dict[str, Any] | None = Field(
        default=None,
        description="Source of the value (secretKeyRef, configMapKeyRef, fieldRef), as in a Pod spec.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Condition(ApiModel):
    """A condition in the Kubernetes style (``type``, ``status``, ``reason``, ``message``)."""

    type: str = Field(description="Condition type, e.g. Ready or SLOMet.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: str = Field(default="", description="One CamelCase word for machines.")
    message: str = Field(default="", description="A sentence for people, with the numbers.")
    last_transition_time: str | None = Field(
        default=None, description="When the status last changed (RFC 3339)."
    )
    observed_generation: int | None = Field(
        default=None, description="The .metadata.generation the condition was computed from."
    )
