"""The InferenceService resource as a whole, and parsing it with errors that name the field."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tailguard.api.spec import InferenceServiceSpec
from tailguard.api.status import InferenceServiceStatus

GROUP: Final = "tailguard.dev"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "InferenceService"
PLURAL: Final = "inferenceservices"
SINGULAR: Final = "inferenceservice"
SHORT_NAMES: Final = ("tgis",)
#: Longest resource name: it becomes a label value (63 characters at most) and the Deployment name.
MAX_NAME_LENGTH: Final = 52


class ObjectMeta(BaseModel):
    """The parts of metadata tailguard reads; everything else is kept as given."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    name: str = Field(min_length=1, max_length=MAX_NAME_LENGTH, pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
    namespace: str = "default"
    uid: str | None = None
    generation: int | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)


class InferenceService(BaseModel):
    """One InferenceService object: metadata, spec and status."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    api_version: str = Field(default=API_VERSION, alias="apiVersion", pattern=rf"^{GROUP}/{VERSION}$")
    kind: str = Field(default=KIND, pattern=rf"^{KIND}$")
    metadata: ObjectMeta
    spec: InferenceServiceSpec
    status: InferenceServiceStatus = Field(default_factory=InferenceServiceStatus)

    @property
    def served_name(self) -> str:
        """The model name clients use and vLLM reports in metrics."""
        return self.spec.model.served_name or self.metadata.name


@dataclass(frozen=True)
class FieldError:
    """One validation error, with the field path as kubectl shows it (``spec.slo.ttftP99Ms``)."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class InvalidResourceError(ValueError):
    """A manifest that does not describe a valid InferenceService."""

    def __init__(self, errors: list[FieldError]) -> None:
        self.errors = errors
        super().__init__("; ".join(str(e) for e in errors))


def _path(location: tuple[int | str, ...]) -> str:
    path = ""
    for part in location:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path


def parse_inference_service(
    obj: Mapping[str, Any], *, prior: tuple[Mapping[str, Any], InferenceService] | None = None
) -> InferenceService:
    """Validate a manifest (a dict as read from YAML or the API server).

    ``prior``: an earlier version of the same object and its parse. When the spec is the same
    (the operator's own status write coming back through the watch, about once a minute per
    service), only the metadata and the status are validated anew: the spec's validation is most
    of a parse, and gives the same answer.

    Raises :class:`InvalidResourceError` listing every problem with its field path.
    """
    try:
        if prior is not None and _same_spec(prior[0], obj):
            return prior[1].model_copy(
                update={
                    "metadata": ObjectMeta.model_validate(obj.get("metadata")),
                    "status": InferenceServiceStatus.model_validate(obj.get("status") or {}),
                }
            )
        return InferenceService.model_validate(dict(obj))
    except ValidationError as exc:
        if prior is not None:
            return parse_inference_service(obj)  # the errors named as a whole parse names them

        errors: list[FieldError] = []
        for err in exc.errors():
            location = tuple(p for p in err["loc"] if p != "__root__")
            message = str(err["msg"]).removeprefix("Value error, ")
            if err["type"] == "value_error" and message.startswith("spec."):
                # Cross-field rules name their fields themselves.
                errors.extend(FieldError("", m) for m in message.split("; "))
            else:
                errors.append(FieldError(_path(location), message))
        raise InvalidResourceError(errors) from None


def _same_spec(before: Mapping[str, Any], after: Mapping[str, Any]) -> bool:
    return (
        before.get("spec") == after.get("spec")
        and before.get("apiVersion") == after.get("apiVersion")
        and before.get("kind") == after.get("kind")
    )
