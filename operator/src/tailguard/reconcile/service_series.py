"""Every service's gauges and decision counters, held as plain values and written straight to the
exposition text.

At 500 services the per-service gauges are thousands of samples; prometheus_client formats each
one through a generic path (label validation and escaping, a sample object per value) at every
scrape, which took a tenth of the operator's CPU. Here each service's labels are escaped once and a
scrape writes one line per value. :class:`ServiceSeries` is also an ordinary collector, so a
registry holding it answers ``get_sample_value`` and prometheus_client's own exposition as before;
so is :class:`ServiceDecisions`, the decision counters, written the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import cast

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from tailguard.metrics.results import ServiceKey

SERVICE_LABELS = ("namespace", "inference_service")

#: The per-service gauges: attribute, metric name, help.
SERVICE_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("desired_replicas", "tailguard_desired_replicas", "Replicas the autoscaler wants."),
    ("ready_replicas", "tailguard_ready_replicas", "Replicas ready to serve."),
    ("starting_replicas", "tailguard_starting_replicas", "Replicas scheduled but not ready yet."),
    ("pending_replicas", "tailguard_pending_replicas", "Replicas that cannot be scheduled (no free GPU)."),
    ("max_num_seqs", "tailguard_max_num_seqs", "Max batch (--max-num-seqs) in force."),
    ("p99_ttft", "tailguard_p99_ttft_seconds", "Observed p99 time to first token."),
    ("slo_ttft", "tailguard_slo_ttft_seconds", "Declared p99 TTFT objective."),
    ("p99_tpot", "tailguard_p99_tpot_seconds", "Observed p99 time per output token."),
    ("slo_tpot", "tailguard_slo_tpot_seconds", "Declared p99 TPOT objective."),
    ("goodput", "tailguard_goodput_ratio", "Estimated fraction of requests meeting every SLO."),
    ("goodput_target", "tailguard_goodput_target_ratio", "Declared goodput target."),
)

#: A value as prometheus_client writes it (Go's float format: "+Inf", "NaN", "1e+06").
_go_float = cast(Callable[[float], str], floatToGoString)


def _label_value(value: str) -> str:
    """A label value as the text formats write it (backslash, quote and newline escaped)."""
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _label_text(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    """A sample's labels as the text formats write them: ``{name="value",...}``, values escaped."""
    return (
        "{"
        + ",".join(f'{name}="{_label_value(value)}"' for name, value in zip(names, values, strict=True))
        + "}"
    )


class ServiceSeries:
    """The gauges of :data:`SERVICE_GAUGES` for every service, by service key.

    Written from the control loop's thread and read from the metrics server's: a service's values
    are replaced as a whole, never changed in place, and a scrape works on a snapshot.
    """

    def __init__(self) -> None:
        #: Each service's label text (escaped once) and its values.
        self._series: dict[ServiceKey, tuple[str, Mapping[str, float]]] = {}

    def set(self, key: ServiceKey, values: Mapping[str, float]) -> None:
        """Replace one service's values (attribute → value; an attribute left out has no series)."""
        held = self._series.get(key)
        labels = _label_text(SERVICE_LABELS, key) if held is None else held[0]
        self._series[key] = (labels, dict(values))

    def forget(self, key: ServiceKey) -> None:
        """Drop a service's series."""
        self._series.pop(key, None)

    def describe(self) -> Iterable[Metric]:
        """The families without samples: the registry checks their names against its others'."""
        return [GaugeMetricFamily(name, text) for _, name, text in SERVICE_GAUGES]

    def collect(self) -> Iterable[Metric]:
        """The families with every service's samples, for prometheus_client's own exposition."""
        snapshot = list(self._series.items())
        for attribute, name, text in SERVICE_GAUGES:
            family = GaugeMetricFamily(name, text, labels=SERVICE_LABELS)
            for key, (_, values) in snapshot:
                value = values.get(attribute)
                if value is not None:
                    family.add_metric(list(key), value)
            yield family

    def render(self) -> bytes:
        """The families as exposition text: the same lines in the Prometheus text format and in
        OpenMetrics (a gauge's sample line is written alike in both)."""
        snapshot = list(self._series.values())
        lines: list[str] = []
        for attribute, name, text in SERVICE_GAUGES:
            lines.append(f"# HELP {name} {text}\n# TYPE {name} gauge\n")
            for labels, values in snapshot:
                value = values.get(attribute)
                if value is not None:
                    lines.append(f"{name}{labels} {_go_float(value)}\n")
        return "".join(lines).encode()


#: The decision counter's name (without ``_total``) and help.
DECISIONS = "tailguard_decisions"
DECISIONS_HELP = "Autoscaling decisions, by reason code and whether they changed anything."
DECISION_LABELS = (*SERVICE_LABELS, "reason", "action")


class _Count:
    """One decision series: its label text (escaped once), its count, and when it was created."""

    __slots__ = ("created", "labels", "value")

    def __init__(self, labels: str, created: float) -> None:
        self.labels = labels
        self.value = 0.0
        self.created = created


class ServiceDecisions:
    """``tailguard_decisions_total{namespace,inference_service,reason,action}`` for every service.

    Counted from the control loop's thread and read from the metrics server's: a scrape works on
    a snapshot, and a count only grows.
    """

    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._counts: dict[ServiceKey, dict[tuple[str, str], _Count]] = {}

    def inc(self, key: ServiceKey, reason: str, action: str) -> None:
        """Count one decision of service ``key``."""
        counts = self._counts.get(key)
        if counts is None:
            counts = self._counts[key] = {}
        count = counts.get((reason, action))
        if count is None:
            labels = _label_text(DECISION_LABELS, (*key, reason, action))
            count = counts[reason, action] = _Count(labels, self._clock())
        count.value += 1.0

    def forget(self, key: ServiceKey) -> None:
        """Drop a service's counters."""
        self._counts.pop(key, None)

    def _snapshot(self) -> list[tuple[ServiceKey, tuple[str, str], _Count]]:
        return [
            (key, labels, count)
            for key, counts in list(self._counts.items())
            for labels, count in list(counts.items())
        ]

    def describe(self) -> Iterable[Metric]:
        """The family without samples."""
        return [CounterMetricFamily(DECISIONS, DECISIONS_HELP)]

    def collect(self) -> Iterable[Metric]:
        """The family with every service's samples, for prometheus_client's own exposition."""
        family = CounterMetricFamily(DECISIONS, DECISIONS_HELP, labels=DECISION_LABELS)
        for key, (reason, action), count in self._snapshot():
            family.add_metric([*key, reason, action], count.value, created=count.created)
        yield family

    def render(self, *, openmetrics: bool) -> bytes:
        """The family as exposition text, as prometheus_client writes a counter in either format:
        ``_total`` and ``_created`` as two families in the Prometheus text format, one in OpenMetrics."""
        snapshot = self._snapshot()
        total, created = f"{DECISIONS}_total", f"{DECISIONS}_created"
        if openmetrics:
            lines = [f"# HELP {DECISIONS} {DECISIONS_HELP}\n# TYPE {DECISIONS} counter\n"]
            for _, _, count in snapshot:
                lines.append(f"{total}{count.labels} {_go_float(count.value)}\n")
                lines.append(f"{created}{count.labels} {_go_float(count.created)}\n")
            return "".join(lines).encode()
        lines = [f"# HELP {total} {DECISIONS_HELP}\n# TYPE {total} counter\n"]
        lines.extend(f"{total}{count.labels} {_go_float(count.value)}\n" for _, _, count in snapshot)
        lines.append(f"# HELP {created} {DECISIONS_HELP}\n# TYPE {created} gauge\n")
        lines.extend(f"{created}{count.labels} {_go_float(count.created)}\n" for _, _, count in snapshot)
        return "".join(lines).encode()
