"""The status tailguard writes for one InferenceService: workload figures, observed metrics, and
when a message has drifted far enough from the figures it quotes to be rewritten."""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from tailguard.api import InferenceService
from tailguard.k8s.labels import selector_string
from tailguard.metrics.figures import ServiceFigures
from tailguard.reconcile.conditions import (
    merge_conditions,
    ready_condition,
    spec_invalid_condition,
    spec_valid_condition,
)
from tailguard.reconcile.sizing import RunningSize
from tailguard.reconcile.timestamps import iso
from tailguard.reconcile.workload import Workload

#: A figure quoted in a message moves materially when it changes by at least this share of the
#: larger reading (half: by a factor of two; smaller moves wait for the once-a-minute refresh)...
MATERIAL_SHARE = 0.5
#: ...and by more than this much (so that 0.1 → 0.2 req/s, or 12.3 → 12.9 ms, is not news).
MATERIAL_ABSOLUTE = 0.5

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
#: A parenthesised aside (what bounds the capacity, a forecast): detail the refresh carries.
_ASIDE = re.compile(r"\([^()]*\)")


@dataclass(frozen=True)
class EventNote:
    """A Kubernetes Event to post about the InferenceService."""

    type: str  # Normal or Warning
    reason: str
    message: str


#: The status fields :func:`workload_status` writes, and the condition types it sets.
WORKLOAD_STATUS_FIELDS = frozenset(
    {
        "observedGeneration", "replicas", "readyReplicas", "pendingReplicas", "desiredReplicas",
        "ready", "labelSelector", "maxNumSeqs", "image", "conditions",
    }
)  # fmt: skip
WORKLOAD_CONDITIONS = frozenset({"Ready", "InvalidSpec"})


def workload_status(
    isvc: InferenceService, workload: Workload, size: RunningSize, *, now: float
) -> dict[str, Any]:
    """The status fields tailguard owns, as a camelCase dict ready to merge-patch."""
    updates = (ready_condition(workload, size.replicas), spec_valid_condition())
    current = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in isvc.status.conditions]
    return {
        "observedGeneration": isvc.metadata.generation,
        "replicas": workload.replicas,
        "readyReplicas": workload.ready,
        "pendingReplicas": workload.pending,
        "desiredReplicas": size.replicas,
        "ready": f"{workload.ready}/{size.replicas}",
        "labelSelector": selector_string(isvc.metadata.name),
        "maxNumSeqs": size.max_batch,
        "image": workload.image,
        "conditions": merge_conditions(current, updates, now=now, generation=isvc.metadata.generation),
    }


def invalid_spec_status(
    current_conditions: list[dict[str, Any]], message: str, *, now: float, generation: int | None
) -> dict[str, Any]:
    """Status for a spec the operator cannot act on: nothing is applied, the condition says why."""
    update = spec_invalid_condition(message)
    return {"conditions": merge_conditions(current_conditions, [update], now=now, generation=generation)}


def changed_fields(current: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """The part of ``patch`` that differs from ``current`` (empty when a write would change nothing)."""
    return {k: v for k, v in patch.items() if current.get(k) != v}


def _round(value: float | None, digits: int) -> float | None:
    return round(value, digits) if value is not None else None


def observed_status(figures: ServiceFigures, *, now: float) -> dict[str, Any]:
    """The ``status.observed`` block, rounded so that noise does not cause writes."""
    return {
        "time": iso(now),
        "p99TtftMs": _round(figures.p99_ttft_s * 1000.0, 1) if figures.p99_ttft_s is not None else None,
        "p99TpotMs": _round(figures.p99_tpot_s * 1000.0, 1) if figures.p99_tpot_s is not None else None,
        "goodput": _round(figures.goodput, 4),
        "requestRate": _round(figures.request_rate, 3),
        "running": _round(figures.running, 1),
        "waiting": _round(figures.waiting, 1),
        "kvCacheUsage": _round(figures.kv_cache_usage, 3),
        "preemptionRate": _round(figures.preemption_rate, 3),
    }


def _words_and_figures(message: str) -> tuple[str, tuple[float, ...]]:
    """A message without its asides, its figures blanked out, and the figures."""
    plain = _ASIDE.sub("()", message)
    return _NUMBER.sub("#", plain), tuple(float(f) for f in _NUMBER.findall(plain))


#: The same for a message a status holds: compared with a new one at every decision until it is
#: rewritten (a minute or more), so split once. Sized for a few messages per service at thousands
#: of services; a message evicted is only split again.
_held_words_and_figures = lru_cache(maxsize=16384)(_words_and_figures)


def figures_moved(old: str | None, new: str) -> bool:
    """Whether ``new`` says something ``old`` does not: other words, or a figure that moved
    materially (by at least :data:`MATERIAL_SHARE` of the larger reading and more than
    :data:`MATERIAL_ABSOLUTE`). Parenthesised asides do not count: what bounds the capacity or a
    forecast is detail, and the refresh a minute later carries it.

    A message such as "load 2.6 req/s" is worth rewriting when the load is 10 req/s, not when it
    is 2.7: rewriting it at every wobble would write status every cycle. At a light load a p99
    from a handful of requests wobbles by half from one window to the next, and the capacity's
    aside ("prefill 5% of engine time") comes and goes with it.
    """
    if old is None:
        return True
    if old == new:
        return False
    old_words, old_figures = _held_words_and_figures(old)
    new_words, new_figures = _words_and_figures(new)
    if old_words != new_words:
        return True
    for a, b in zip(old_figures, new_figures, strict=True):
        change = abs(a - b)
        if change > MATERIAL_ABSOLUTE and change >= MATERIAL_SHARE * max(abs(a), abs(b)):
            return True
    return False


def conditions_moved(current: list[dict[str, Any]], merged: list[dict[str, Any]]) -> bool:
    """Whether ``merged`` changes a condition's status, reason or generation, adds or drops one, or
    moves a figure in a message materially (see :func:`figures_moved`)."""
    before = {c.get("type"): c for c in current}
    if len(before) != len(merged):
        return True
    for new in merged:
        old = before.get(new["type"])
        if old is None or any(old.get(k) != new[k] for k in ("status", "reason", "observedGeneration")):
            return True
        if figures_moved(old.get("message"), new["message"]):
            return True
    return False
