"""Generate the CustomResourceDefinition from the pydantic models.

The models are the one source of truth: this turns their JSON Schema into a structural OpenAPI v3
schema (``$ref`` inlined, ``Optional`` unwrapped, bounds in OpenAPI 3.0 form), adds the cross-field
CEL rules, the subresources and the printer columns.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

from tailguard.api.resource import (
    GROUP,
    KIND,
    MAX_NAME_LENGTH,
    PLURAL,
    SHORT_NAMES,
    SINGULAR,
    VERSION,
)
from tailguard.api.spec import SPEC_RULES, InferenceServiceSpec
from tailguard.api.status import InferenceServiceStatus

JsonSchema = dict[str, Any]

_KEPT_KEYS = {
    "type",
    "description",
    "default",
    "enum",
    "minimum",
    "maximum",
    "minLength",
    "maxLength",
    "pattern",
    "items",
    "properties",
    "required",
    "format",
    "minItems",
    "maxItems",
}


def _resolve(node: Any, defs: dict[str, JsonSchema]) -> Any:
    if isinstance(node, dict):
        if "$ref" in node:
            target = defs[node["$ref"].split("/")[-1]]
            merged = {**copy.deepcopy(target), **{k: v for k, v in node.items() if k != "$ref"}}
            return _resolve(merged, defs)
        return {k: _resolve(v, defs) for k, v in node.items()}
    if isinstance(node, list):
        return [_resolve(v, defs) for v in node]
    return node


def _structural(node: JsonSchema) -> JsonSchema:
    """Rewrite one resolved JSON Schema node into what a CRD accepts."""
    node = dict(node)
    for union in ("anyOf", "oneOf"):
        if union in node:
            branches = [b for b in node.pop(union) if b.get("type") != "null"]
            if len(branches) != 1:
                raise ValueError(f"cannot express a union of {len(branches)} types in a CRD schema")
            node = {**branches[0], **node}
    if "allOf" in node:
        (only,) = node.pop("allOf")
        node = {**only, **node}
    out: JsonSchema = {}
    for key, value in node.items():
        if key == "exclusiveMinimum":
            out["minimum"] = value
            out["exclusiveMinimum"] = True
        elif key == "exclusiveMaximum":
            out["maximum"] = value
            out["exclusiveMaximum"] = True
        elif key.startswith("x-kubernetes-"):
            out[key] = value
        elif key == "properties":
            required = set(node.get("required", ()))
            out["properties"] = {
                name: _property(sub, required=name in required) for name, sub in value.items()
            }
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = _structural(value)
        elif key in _KEPT_KEYS:
            out[key] = value
    if out.get("x-kubernetes-preserve-unknown-fields"):
        out.pop("additionalProperties", None)
        out.setdefault("type", "object")
    if out.get("default") is None:
        out.pop("default", None)
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    return out


def _property(node: JsonSchema, *, required: bool) -> JsonSchema:
    """A property's schema; an optional sub-object that is not nullable defaults to ``{}``.

    Without that default the API server would not apply the defaults nested inside it, and CEL
    rules reading them would find no such key.
    """
    nullable = any(b.get("type") == "null" for b in node.get("anyOf", ()))
    out = _structural(node)
    if out.get("type") == "object" and "properties" in out and not (required or nullable):
        out.setdefault("default", {})
    return out


def model_schema(model: type[BaseModel]) -> JsonSchema:
    """The structural OpenAPI v3 schema of one pydantic model, as a CRD needs it."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs = raw.pop("$defs", {})
    return _structural(_resolve(raw, defs))


def _spec_schema() -> JsonSchema:
    schema = model_schema(InferenceServiceSpec)
    schema["x-kubernetes-validations"] = [rule.as_crd() for rule in SPEC_RULES]
    return schema


PRINTER_COLUMNS: list[dict[str, Any]] = [
    {"name": "Mode", "type": "string", "jsonPath": ".spec.autoscaling.mode"},
    {"name": "Ready", "type": "string", "jsonPath": ".status.ready", "description": "ready/desired"},
    {"name": "Max-Batch", "type": "integer", "jsonPath": ".status.maxNumSeqs"},
    {"name": "P99-TTFT-ms", "type": "number", "jsonPath": ".status.observed.p99TtftMs"},
    {"name": "SLO-ms", "type": "number", "jsonPath": ".spec.slo.ttftP99Ms"},
    {"name": "Goodput", "type": "number", "jsonPath": ".status.observed.goodput"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {"name": "Image", "type": "string", "jsonPath": ".status.image", "priority": 1},
    {
        "name": "Reason",
        "type": "string",
        "jsonPath": ".status.lastDecision.message",
        "priority": 1,
    },
]


def build_crd() -> dict[str, Any]:
    """The complete ``CustomResourceDefinition`` for InferenceService."""
    root: JsonSchema = {
        "type": "object",
        "description": "A vLLM model served on GPUs and kept inside its latency SLOs by tailguard.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": _spec_schema(),
            "status": model_schema(InferenceServiceStatus),
        },
        "x-kubernetes-validations": [
            {
                "rule": f"size(self.metadata.name) <= {MAX_NAME_LENGTH}",
                "message": f"metadata.name must be at most {MAX_NAME_LENGTH} characters "
                "(it names the Deployment and labels its pods)",
            }
        ],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/part-of": "tailguard"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["tailguard"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.labelSelector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }
