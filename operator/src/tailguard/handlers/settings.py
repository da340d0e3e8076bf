"""The operator's settings, typed and complete: what ``tailguard run`` parsed from its flags and
environment, handed to the process in one object."""

from __future__ import annotations

from dataclasses import dataclass, field

from tailguard.k8s.render import RenderSettings
from tailguard.metrics.prometheus import PrometheusSettings
from tailguard.metrics.promql import QueryScope


@dataclass(frozen=True)
class OperatorSettings:
    """Everything the running operator is told from outside."""

    prometheus: PrometheusSettings
    #: Which series the loop reads: the namespaces watched (empty: every namespace) and the
    #: ``rate()`` window.
    scope: QueryScope = field(default_factory=QueryScope)
    #: How children are rendered; the spec handlers and the control loop share it.
    render: RenderSettings = field(default_factory=RenderSettings)
    #: Port of kopf's ``/healthz`` (0: none).
    liveness_port: int = 8080
    #: Port of the operator's own ``/metrics`` (0: none).
    metrics_port: int = 9090
    listen_address: str = "0.0.0.0"
    verbose: bool = False

    @property
    def namespaces(self) -> tuple[str, ...]:
        """The namespaces watched; empty means every namespace."""
        return self.scope.namespaces
