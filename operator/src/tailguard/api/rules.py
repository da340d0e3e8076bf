"""Rules that span several fields, stated once for both the CRD (as CEL) and pydantic.

Each rule carries its CEL expression, evaluated by the API server at ``kubectl apply``, and the same
check in Python, evaluated by ``tailguard render`` and by the operator before it acts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CrossFieldRule:
    """A validation over several fields of one object."""

    cel: str
    message: str
    field_path: str
    check: Callable[[Any], bool]

    def as_crd(self) -> dict[str, str]:
        """The ``x-kubernetes-validations`` entry for this rule."""
        return {"rule": self.cel, "message": self.message, "fieldPath": self.field_path}
