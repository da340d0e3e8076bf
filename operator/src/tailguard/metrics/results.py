"""Prometheus query results parsed into numbers per service, with odd values handled on purpose."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ServiceKey = tuple[str, str]  # (namespace, inference service name)


class QueryError(Exception):
    """Prometheus could not answer a query (unreachable, timeout, bad response, error status)."""


def parse_sample_value(raw: Any) -> float:
    """A sample value as Prometheus sends it (a string, possibly ``NaN`` or ``+Inf``) as a float."""
    try:
        return float(raw)
    except (TypeError, ValueError):
        return math.nan


@dataclass
class SeriesByService:
    """One signal's values: for each service, a value (or, for histograms, buckets by ``le``)."""

    values: dict[ServiceKey, float] = field(default_factory=dict)
    buckets: dict[ServiceKey, list[tuple[float, float]]] = field(default_factory=dict)
    duplicates: int = 0


def group_vector(
    result: Sequence[Mapping[str, Any]], *, namespace_label: str, service_label: str
) -> SeriesByService:
    """Group an instant-vector result by (namespace, service).

    Series without the grouping labels are dropped. A histogram's series (with ``le``) become bucket
    lists. A second series for the same service and bucket is counted as a duplicate and ignored,
    so one misconfigured scrape cannot double a service's rate.

    This runs over every series of every reading (tens of thousands a cycle), so it is written for
    speed: each distinct ``le`` text is parsed once, and duplicates are found per service.
    """
    grouped = SeriesByService()
    values = grouped.values
    # Per service, the bucket values by ``le`` text, in the order they came.
    by_le: dict[ServiceKey, dict[str, float]] = {}
    duplicates = 0
    for series in result:
        labels = series.get("metric") or {}
        namespace, service = labels.get(namespace_label), labels.get(service_label)
        if not namespace or not service:
            continue
        key: ServiceKey = (namespace, service)
        le = labels.get("le")
        if le is None:
            if key in values:
                duplicates += 1
                continue
            values[key] = parse_sample_value((series.get("value") or (math.nan, "NaN"))[1])
            continue
        buckets = by_le.get(key)
        if buckets is None:
            buckets = by_le[key] = {}
        elif le in buckets:
            duplicates += 1
            continue
        buckets[le] = parse_sample_value((series.get("value") or (math.nan, "NaN"))[1])
    grouped.duplicates = duplicates
    bounds: dict[str, float] = {}
    for key, buckets in by_le.items():
        bucket_list = []
        for le, value in buckets.items():
            bound = bounds.get(le)
            if bound is None:
                bound = bounds[le] = parse_sample_value(le)
            bucket_list.append((bound, value))
        bucket_list.sort()
        grouped.buckets[key] = bucket_list
    return grouped
