"""What the operator needs from a vLLM ``/metrics`` page, checked against a real one.

The list of needs is not written out by hand: it is read off the operator's own PromQL
(:func:`tailguard.metrics.promql.all_queries`) and its contract module, so a new query or a renamed
metric is checked the day it lands. Every problem names the metric it is about.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from tailguard.contract.vllm import (
    E2E_BUCKETS_S,
    ENGINE_LABEL,
    MODEL_NAME_LABEL,
    SERVICE_LABEL,
    TPOT_BUCKETS_S,
    TTFT_BUCKETS_S,
    VllmMetric,
)
from tailguard.metrics.promql import QueryScope, Signal, all_queries

_NAME = re.compile(r"vllm:[A-Za-z0-9_:]+")
_NAME_REGEX = re.compile(r'__name__=~"([^"]*)"')

#: The bucket bounds the contract module promises, per histogram family.
EXPECTED_BUCKETS: dict[str, tuple[float, ...]] = {
    VllmMetric.TTFT.value: TTFT_BUCKETS_S,
    VllmMetric.TPOT.value: TPOT_BUCKETS_S,
    VllmMetric.INTER_TOKEN_LATENCY.value: TPOT_BUCKETS_S,
    VllmMetric.E2E_LATENCY.value: E2E_BUCKETS_S,
    VllmMetric.QUEUE_TIME.value: E2E_BUCKETS_S,
    VllmMetric.PREFILL_TIME.value: E2E_BUCKETS_S,
}


@dataclass(frozen=True)
class Need:
    """A series the operator reads: one of ``names`` must exist (more than one only for aliases)."""

    signal: str
    names: tuple[str, ...]


def needs_of_queries(scope: QueryScope | None = None) -> list[Need]:
    """Every series name the operator's queries select, one :class:`Need` per name or alias group."""
    out: list[Need] = []
    for signal, promql in all_queries(scope or QueryScope()).items():
        alternatives = [tuple(a.split("|")) for a in _NAME_REGEX.findall(promql)]
        plain = _NAME.findall(_NAME_REGEX.sub("", promql))
        out += [Need(str(signal), (name,)) for name in dict.fromkeys(plain)]
        out += [Need(str(signal), group) for group in alternatives]
    return out


def needs_of_contract() -> list[Need]:
    """Every family the contract module names (the legacy KV gauge only as the alias it is)."""
    out = []
    for metric in VllmMetric:
        if metric is VllmMetric.KV_CACHE_USAGE_LEGACY:
            continue
        names = (
            (metric.value, VllmMetric.KV_CACHE_USAGE_LEGACY.value)
            if metric is VllmMetric.KV_CACHE_USAGE
            else (metric.value,)
        )
        if metric.value in EXPECTED_BUCKETS:
            names = tuple(n + "_bucket" for n in names)
        out.append(Need("contract", names))
    return out


@dataclass
class Exposition:
    """A ``/metrics`` page as sample name → list of (labels, value)."""

    samples: dict[str, list[tuple[dict[str, str], float]]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)

    @classmethod
    def parse(cls, text: str) -> Exposition:
        samples: dict[str, list[tuple[dict[str, str], float]]] = defaultdict(list)
        types: dict[str, str] = {}
        for family in text_string_to_metric_families(text):
            types[family.name] = family.type
            for s in family.samples:
                samples[s.name].append((dict(s.labels), float(s.value)))
        return cls(dict(samples), types)

    def names(self) -> set[str]:
        return set(self.samples)

    def total(self, name: str, **match: str) -> float:
        """Sum of a sample name's values over series whose labels include ``match``."""
        return sum(
            v for labels, v in self.samples.get(name, []) if all(labels.get(k) == x for k, x in match.items())
        )

    def bucket_bounds(self, family: str) -> list[float]:
        return sorted({float(labels["le"]) for labels, _ in self.samples.get(family + "_bucket", [])})


def check(page: Exposition, needs: list[Need], *, model_name: str) -> list[str]:
    """Problems with ``page`` for these needs; empty when the contract holds."""
    problems: list[str] = []
    for need in needs:
        present = [n for n in need.names if n in page.samples]
        if not present:
            near = sorted(n for n in page.names() if n.split(":")[-1][:12] in " ".join(need.names))[:5]
            problems.append(
                f"{' or '.join(need.names)} (read for {need.signal}) is missing from /metrics"
                + (f"; similar names there: {near}" if near else "")
            )
            continue
        for name in present:
            problems += _check_series(page, name, model_name=model_name)
    return list(dict.fromkeys(problems))


def _check_series(page: Exposition, name: str, *, model_name: str) -> list[str]:
    problems = []
    series = page.samples[name]
    for labels, _ in series:
        missing = [label for label in (MODEL_NAME_LABEL, ENGINE_LABEL) if label not in labels]
        if missing:
            problems.append(f"{name}{labels} lacks the label(s) {missing}")
            break
        if labels[MODEL_NAME_LABEL] != model_name:
            problems.append(
                f"{name} has {MODEL_NAME_LABEL}={labels[MODEL_NAME_LABEL]!r}, not the served name {model_name!r}"
            )
            break
        clash = [label for label in ("namespace", SERVICE_LABEL) if label in labels]
        if clash:
            problems.append(f"{name} already carries {clash}, which tailguard's scrape configuration sets")
            break
    if name.endswith("_bucket"):
        family = name.removesuffix("_bucket")
        expected = EXPECTED_BUCKETS.get(family)
        got = page.bucket_bounds(family)
        if expected is not None and got != [*expected, math.inf]:
            extra = sorted(set(got) - {*expected, math.inf})
            gone = sorted({*expected, math.inf} - set(got))
            problems.append(
                f"{family} buckets differ from the contract: not exposed {gone}, unexpected {extra}"
            )
        for suffix in ("_count", "_sum"):
            if family + suffix not in page.samples:
                problems.append(f"{family}{suffix} is missing (a histogram without it cannot be rated)")
    return problems


def signal_names() -> dict[str, str]:
    """Signal → query text, for messages."""
    return {str(s): q for s, q in all_queries(QueryScope()).items()}


__all__ = [
    "EXPECTED_BUCKETS",
    "Exposition",
    "Need",
    "Signal",
    "check",
    "needs_of_contract",
    "needs_of_queries",
]
