"""The API reference (``docs/api.md``), generated from the models and the CRD built from them.

Every model reachable from the spec and the status gets a table of its fields: wire name, type,
default, validation and description. ``make api-docs`` writes the file; a test fails when it is stale.
"""

from __future__ import annotations

import enum
import json
import sys
import types
import typing
from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from tailguard.api.crd import PRINTER_COLUMNS, build_crd, model_schema
from tailguard.api.resource import API_VERSION, KIND, MAX_NAME_LENGTH, SHORT_NAMES, ObjectMeta
from tailguard.api.spec import SPEC_RULES, InferenceServiceSpec
from tailguard.api.status import InferenceServiceStatus

_SCALARS = {int: "integer", float: "number", str: "string", bool: "boolean"}


def _unwrap_optional(annotation: Any) -> tuple[Any, bool]:
    """``X | None`` → (X, True); anything else → (annotation, False)."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return annotation, False


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _anchor(model: type[BaseModel]) -> str:
    return f"[{model.__name__}](#{model.__name__.lower()})"


def _type_name(annotation: Any) -> str:
    annotation, _ = _unwrap_optional(annotation)
    origin = typing.get_origin(annotation)
    if origin is list:
        (item,) = typing.get_args(annotation)
        return "[]" + _type_name(item)
    if origin is dict:
        _, value = typing.get_args(annotation)
        return "object" if value is Any else f"map[string]{_type_name(value)}"
    if _is_model(annotation):
        return _anchor(annotation)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "string"
    if annotation in _SCALARS:
        return _SCALARS[annotation]
    return "object"


def _nested_models(annotation: Any) -> Iterator[type[BaseModel]]:
    annotation, _ = _unwrap_optional(annotation)
    if _is_model(annotation):
        yield annotation
    for arg in typing.get_args(annotation):
        yield from _nested_models(arg)


def reachable_models(*roots: type[BaseModel]) -> list[type[BaseModel]]:
    """Every model reachable from ``roots``, depth first in field order, each once."""
    seen: list[type[BaseModel]] = []

    def visit(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.append(model)
        for info in model.model_fields.values():
            for nested in _nested_models(info.annotation):
                visit(nested)

    for root in roots:
        visit(root)
    return seen


def _code(value: Any) -> str:
    text = value if isinstance(value, str) and value else json.dumps(value)
    return f"`{text}`"


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _validation(schema: dict[str, Any]) -> str:
    """Bounds, lengths, pattern and allowed values of one property, as a short phrase."""
    parts: list[str] = []
    if "enum" in schema:
        parts.append("one of " + ", ".join(_code(v) for v in schema["enum"]))
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None:
        parts.append(f"{'>' if schema.get('exclusiveMinimum') else '≥'} {_number(low)}")
    if high is not None:
        parts.append(f"{'<' if schema.get('exclusiveMaximum') else '≤'} {_number(high)}")
    if "minLength" in schema:
        parts.append(f"length ≥ {schema['minLength']}")
    if "maxLength" in schema:
        parts.append(f"length ≤ {schema['maxLength']}")
    if "pattern" in schema:
        parts.append(f"matches `{schema['pattern']}`")
    return ", ".join(parts)


def _default(info: FieldInfo, schema: dict[str, Any], annotation: Any) -> str:
    if info.is_required():
        return "required"
    inner, _ = _unwrap_optional(annotation)
    if _is_model(inner) and info.default is None:
        return ""
    if _is_model(inner):
        return "`{}`, with the defaults of its fields" if schema.get("default") == {} else ""
    if "default" in schema:
        return _code(schema["default"])
    if info.default_factory is not None:
        return _code(info.default_factory())  # type: ignore[call-arg]
    return ""


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _model_section(model: type[BaseModel], *, written_by_user: bool) -> list[str]:
    """A model's heading, docstring and field table; status tables leave out defaults and validation."""
    schema = model_schema(model).get("properties", {})
    lines = [f"### {model.__name__}", "", (model.__doc__ or "").strip(), ""]
    if written_by_user:
        lines += ["| Field | Type | Default | Validation | Description |", "| --- | --- | --- | --- | --- |"]
    else:
        lines += ["| Field | Type | Description |", "| --- | --- | --- |"]
    for name, info in model.model_fields.items():
        wire = info.alias or name
        prop = schema.get(wire, {})
        row = [f"`{wire}`", _type_name(info.annotation)]
        if written_by_user:
            row += [_default(info, prop, info.annotation), _validation(prop)]
        row.append(info.description or "")
        lines.append("| " + " | ".join(_cell(c) for c in row) + " |")
    lines.append("")
    return lines


def render_reference() -> str:
    """The whole API reference, as Markdown."""
    crd = build_crd()
    version = crd["spec"]["versions"][0]
    name_pattern = ObjectMeta.model_json_schema()["properties"]["name"]["pattern"]
    scale = version["subresources"]["scale"]
    lines = [
        "# InferenceService API reference",
        "",
        "<!-- Generated from operator/src/tailguard/api by `make api-docs`; do not edit. -->",
        "",
        f"`apiVersion: {API_VERSION}`, `kind: {KIND}`, namespaced, short name "
        + ", ".join(f"`{s}`" for s in SHORT_NAMES)
        + ". The CRD is generated from the same models (`make crds`), so what this page says is what "
        "the API server enforces at `kubectl apply`.",
        "",
        f"- `metadata.name`: at most {MAX_NAME_LENGTH} characters (checked at apply) and a DNS label that "
        f"starts with a letter, `{name_pattern}` (checked by the operator, which otherwise reports "
        "`InvalidSpec`): the Deployment and Service tailguard creates take this name and its pods carry "
        "it as a label.",
        f"- `/status` subresource: the operator writes `status`; `/scale` reads `{scale['specReplicasPath']}`"
        f" and `{scale['statusReplicasPath']}` with selector `{scale['labelSelectorPath']}`, so "
        "`kubectl scale`, an HPA or KEDA can drive `spec.replicas` when `autoscaling.mode` is `Manual` or "
        "`DryRun`.",
        "",
        "## Rules across fields",
        "",
        "Checked by the API server (CEL) and again by the operator before it acts; a violation is refused at "
        "`kubectl apply` with the message below.",
        "",
        "| Field | Rule | Message |",
        "| --- | --- | --- |",
    ]
    for rule in SPEC_RULES:
        lines.append(f"| `spec{rule.field_path}` | `{_cell(rule.cel)}` | {_cell(rule.message)} |")
    lines += [
        "",
        "## kubectl get columns",
        "",
        "| Column | From | Shown |",
        "| --- | --- | --- |",
    ]
    for column in PRINTER_COLUMNS:
        shown = "with `-o wide`" if column.get("priority", 0) > 0 else "always"
        lines.append(f"| {column['name']} | `{column['jsonPath']}` | {shown} |")
    lines += ["", "## Spec", ""]
    spec_models = reachable_models(InferenceServiceSpec)
    for model in spec_models:
        lines += _model_section(model, written_by_user=True)
    lines += [
        "## Status",
        "",
        "Written by the operator only. Absent figures were not measured; they are never zero by default.",
        "",
    ]
    for model in reachable_models(InferenceServiceStatus):
        if model not in spec_models:
            lines += _model_section(model, written_by_user=False)
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> int:
    """Print the reference (``python -m tailguard.api.reference > docs/api.md``)."""
    sys.stdout.write(render_reference())
    return 0


if __name__ == "__main__":
    sys.exit(main())
