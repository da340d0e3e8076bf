"""Kubernetes-style conditions: set one, keeping its transition time when nothing changed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ConditionUpdate:
    """A condition as computed now; the transition time is filled in by :func:`merge_conditions`."""

    type: str
    status: bool | None
    reason: str
    message: str

    @property
    def status_text(self) -> str:
        return {True: "True", False: "False", None: "Unknown"}[self.status]


def merge_conditions(
    current: Sequence[dict[str, Any]],
    updates: Sequence[ConditionUpdate],
    *,
    now: str,
    generation: int | None,
) -> list[dict[str, Any]]:
    """``current`` with ``updates`` applied; untouched types are kept, order is stable by type."""
    by_type = {c["type"]: dict(c) for c in current}
    for update in updates:
        old = by_type.get(update.type)
        changed = old is None or old.get("status") != update.status_text
        by_type[update.type] = {
            "type": update.type,
            "status": update.status_text,
            "reason": update.reason,
            "message": update.message,
            "lastTransitionTime": now if changed or old is None else old.get("lastTransitionTime", now),
            "observedGeneration": generation,
        }
    return [by_type[t] for t in sorted(by_type)]


def condition(conditions: Sequence[dict[str, Any]], type_: str) -> dict[str, Any] | None:
    """The condition of a type, if present."""
    return next((c for c in conditions if c.get("type") == type_), None)
