"""The control loop: every cycle, read Prometheus once for all services, then decide and act per service.

Reads come from Prometheus (one query per signal) and from the :class:`Inventory` (watch-fed), so a
cycle's cost in API calls is the writes it makes. Decisions are computed on the event loop, a slice
at a time so kopf's handlers keep running; only the blocking API writes go to worker threads, and
only for services that have something to write.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from tailguard.api import (
    API_VERSION,
    DEFAULT_VLLM_IMAGE,
    KIND,
    AutoscalingMode,
    InferenceService,
    InvalidResourceError,
    parse_inference_service,
)
from tailguard.k8s.cluster import ClusterAPI, ConflictError
from tailguard.k8s.labels import POLICY_STATE_ANNOTATION
from tailguard.metrics.prometheus import PrometheusSource
from tailguard.metrics.promql import QueryScope, all_queries
from tailguard.metrics.signals import Cycle, read_cycle, signals_for
from tailguard.policy import PolicyState
from tailguard.reconcile.autoscale import AutoscaleInput, AutoscaleResult, autoscale, record_telemetry
from tailguard.reconcile.children import sync_children
from tailguard.reconcile.inventory import Inventory, Key, ServiceView
from tailguard.reconcile.service import reconcile, write_status
from tailguard.reconcile.status import EventNote
from tailguard.reconcile.telemetry import Telemetry
from tailguard.reconcile.workload import observe_workload

log = logging.getLogger(__name__)

#: The policy's state is written to its annotation when an action is taken, and at least this often.
STATE_PERSIST_INTERVAL_S = 300.0
#: How often each service's Deployment and status are checked against its spec (level-based resync).
#: Done here rather than with a kopf timer: kopf guards timers with a finalizer, which would make
#: deleting an InferenceService hang whenever the operator is down.
RESYNC_INTERVAL_S = 30.0
#: Decisions computed between two yields to the event loop (kopf's watches share it).
DECISIONS_PER_SLICE = 25

EventSink = Callable[[str, str, EventNote], None]  # (namespace, name, note)


def iso(ts: float) -> str:
    """A Unix time as RFC 3339 (UTC, seconds)."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class CycleReport:
    """What one cycle did (for tests, logs and the benchmark)."""

    services: int = 0
    decided: int = 0
    writes: int = 0
    queries: int = 0
    query_errors: int = 0
    duration_s: float = 0.0
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Step:
    """One service's decision, computed; what remains is to write it."""

    key: Key
    view: ServiceView
    result: AutoscaleResult
    persist_state: bool

    @property
    def writes_nothing(self) -> bool:
        r = self.result
        return not (r.status_patch or r.apply or r.events or self.persist_state)


class ControlLoop:
    """Decides and acts for every InferenceService on its own cadence."""

    def __init__(
        self,
        *,
        inventory: Inventory,
        cluster: ClusterAPI,
        prometheus: PrometheusSource,
        scope: QueryScope,
        telemetry: Telemetry,
        post_event: EventSink,
        clock: Callable[[], float] = time.time,
        tick_s: float = 1.0,
        workers: int = 16,
        default_image: str = DEFAULT_VLLM_IMAGE,
    ) -> None:
        self.inventory = inventory
        self.cluster = cluster
        self.prometheus = prometheus
        self.scope = scope
        self.telemetry = telemetry
        self.post_event = post_event
        self.clock = clock
        self.tick_s = tick_s
        #: The vLLM image of a spec that names none; the spec handlers must use the same.
        self.default_image = default_image
        self._workers = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tailguard-step")
        self._last_run: dict[Key, float] = {}
        self._states: dict[Key, PolicyState] = {}
        #: The last parsed spec of each service, with the body it was parsed from (bodies are
        #: replaced, never mutated, so identity says whether it is still current).
        self._parsed: dict[Key, tuple[Any, InferenceService | None]] = {}
        self._persisted_at: dict[Key, float] = {}
        self._resynced_at: dict[Key, float] = {}

    def _due(self, key: Key, interval_s: float, now: float) -> bool:
        last = self._last_run.get(key)
        return last is None or now - last >= interval_s - 1e-6

    async def run_once(self, now: float | None = None) -> CycleReport:
        """One tick: resync what is due for it, and if any service is due for a decision, read
        Prometheus once and decide for each due service. Independent steps run side by side."""
        started = time.perf_counter()
        now = self.clock() if now is None else now
        report = CycleReport()
        due: list[Key] = []
        resync: list[Key] = []
        keys = self.inventory.keys()
        # Pods or a Deployment that changed are reflected in status at the next tick, not the next
        # periodic resync; a service deciding this tick keeps its mark for the next one.
        changed = self.inventory.take_changed()
        self.telemetry.services.set(len(keys))
        for key in keys:
            view = self.inventory.view(key)
            if view is None:
                continue
            autoscaling = (view.body.get("spec") or {}).get("autoscaling") or {}
            if autoscaling.get("mode", "Auto") != "Off" and self._due(
                key, float(autoscaling.get("intervalSeconds", 15)), now
            ):
                due.append(key)
            elif key in changed or now - self._resynced_at.setdefault(key, now) >= RESYNC_INTERVAL_S:
                resync.append(key)  # not in the same tick as a decision: both write status
                changed.discard(key)
        self.inventory.mark_changed(changed & set(keys))
        self._forget_gone(set(keys))
        report.services = len(keys)
        if not due and not resync:
            return report
        cycle: Cycle | None = None
        if due:
            cycle = await read_cycle(self.prometheus, self.scope, at=now)
            report.queries = len(all_queries(self.scope))
            report.query_errors = len(cycle.errors)
            for signal in all_queries(self.scope):
                self.telemetry.queries.labels(signal.value).inc()
            for signal in cycle.errors:
                self.telemetry.query_errors.labels(signal.value).inc()
        read_done = time.perf_counter()
        running = asyncio.get_running_loop()

        async def guarded(key: Key, work: Callable[[], int]) -> None:
            try:
                written = await running.run_in_executor(self._workers, work)
                report.writes += written  # not `+= await`: that reads the total before awaiting
            except Exception as exc:  # one service's failure must not stop the others
                log.exception("control step for %s/%s failed", *key)
                report.errors.append(f"{key[0]}/{key[1]}: {type(exc).__name__}: {exc}")

        writes: list[tuple[Key, Callable[[], int]]] = []
        for index, key in enumerate(due):
            self._last_run[key] = now
            if cycle is None:
                continue
            if index and index % DECISIONS_PER_SLICE == 0:
                await asyncio.sleep(0)
            try:
                step = self._decide(key, cycle, now)
            except Exception as exc:  # one service's failure must not stop the others
                log.exception("decision for %s/%s failed", *key)
                report.errors.append(f"{key[0]}/{key[1]}: {type(exc).__name__}: {exc}")
                continue
            report.decided += 1
            if step is None:
                continue
            if step.writes_nothing:
                self._states[key] = step.result.state
            else:
                writes.append((key, functools.partial(self._write, step, now)))
        writes.extend((key, functools.partial(self._resync, key, now)) for key in resync)
        await asyncio.gather(*(guarded(key, work) for key, work in writes))
        finished = time.perf_counter()
        report.duration_s = finished - started
        if due:
            self.telemetry.loop_duration.observe(report.duration_s)
            self.telemetry.loop_phase.labels("read").observe(read_done - started)
            self.telemetry.loop_phase.labels("act").observe(finished - read_done)
        if report.duration_s > 5.0:
            log.warning(
                "slow cycle: %.1f s (Prometheus %.1f s) for %d decisions and %d resyncs, %d writes",
                report.duration_s, read_done - started, len(due), len(resync), report.writes,
            )  # fmt: skip
        return report

    def _forget_gone(self, present: set[Key]) -> None:
        for gone in (set(self._last_run) | set(self._resynced_at)) - present:
            self._last_run.pop(gone, None)
            self._states.pop(gone, None)
            self._parsed.pop(gone, None)
            self._persisted_at.pop(gone, None)
            self._resynced_at.pop(gone, None)
            self.telemetry.forget(*gone)

    def _resync(self, key: Key, now: float) -> int:
        """Revert drift of the Deployment and refresh the workload status, from the inventory."""
        self._resynced_at[key] = now
        view = self.inventory.view(key)
        if view is None:
            return 0
        result = reconcile(
            view.body,
            self.cluster,
            now=iso(now),
            view=(view.deployment, list(view.pods.values())),
            default_image=self.default_image,
        )
        try:
            write_status(self.cluster, view.body, result)
        except ConflictError:
            return 0  # changed meanwhile; the next resync works from the fresh copy
        for note in result.events:
            self.post_event(key[0], key[1], note)
        return int(bool(result.status_patch)) + len(result.events)

    def _spec(self, key: Key, view: ServiceView) -> InferenceService | None:
        """The parsed spec of ``view`` (None when invalid), parsed once per version of the body."""
        cached = self._parsed.get(key)
        if cached is not None and cached[0] is view.body:
            return cached[1]
        try:
            isvc: InferenceService | None = parse_inference_service(view.body)
        except InvalidResourceError:
            isvc = None  # the spec handler reports InvalidSpec; nothing to decide on
        self._parsed[key] = (view.body, isvc)
        return isvc

    def _decide(self, key: Key, cycle: Cycle, now: float) -> _Step | None:
        """Compute one service's decision and what it needs written; no I/O."""
        view = self.inventory.view(key)
        if view is None:  # deleted while the cycle ran
            return None
        isvc = self._spec(key, view)
        if isvc is None or isvc.spec.autoscaling.mode is AutoscalingMode.OFF:
            return None
        slo = isvc.spec.slo
        signals = signals_for(
            cycle,
            key,
            ttft_slo_s=slo.ttft_p99_ms / 1000.0,
            tpot_slo_s=slo.tpot_p99_ms / 1000.0 if slo.tpot_p99_ms is not None else None,
        )
        workload = observe_workload(view.deployment, list(view.pods.values()))
        state = self._states.get(key)
        if state is None:
            stored = isvc.metadata.annotations.get(POLICY_STATE_ANNOTATION)
            state = PolicyState.from_json(stored) if stored else None
        result = autoscale(
            AutoscaleInput(
                isvc=isvc,
                workload=workload,
                signals=signals,
                deployment=view.deployment,
                state=state,
                now=now,
                now_iso=iso(now),
                metrics_ok=cycle.ok,
                rate_window_s=self.scope.rate_window_s,
            )
        )
        record_telemetry(self.telemetry, key, isvc, workload, signals, result)
        persist = (
            result.persist_state or now - self._persisted_at.get(key, -math.inf) >= STATE_PERSIST_INTERVAL_S
        )
        return _Step(key=key, view=view, result=result, persist_state=persist)

    def _write(self, step: _Step, now: float) -> int:
        """Write one decision: status (conditional on the version decided from), state, Deployment, Events."""
        key, view, result = step.key, step.view, step.result
        writes = 0
        namespace, name = key
        if result.status_patch:
            try:
                self.cluster.patch_status(
                    API_VERSION,
                    KIND,
                    namespace,
                    name,
                    result.status_patch,
                    resource_version=(view.body.get("metadata") or {}).get("resourceVersion"),
                )
            except ConflictError:
                # Changed since the watch delivered it: decide again at the next tick from the
                # fresh copy, with the state as it was before this step.
                self._last_run.pop(key, None)
                return 0
            writes += 1
        self._states[key] = result.state
        if step.persist_state:
            self._persisted_at[key] = now
            self.cluster.patch_metadata(
                API_VERSION,
                KIND,
                namespace,
                name,
                {"annotations": {POLICY_STATE_ANNOTATION: result.state_json}},
            )
            writes += 1
        if result.apply:
            status = dict(view.body.get("status") or {})
            status.update(result.status_patch)
            updated = parse_inference_service({**view.body, "status": status})
            outcome = sync_children(updated, self.cluster, default_image=self.default_image)
            writes += len(outcome.created) + len(outcome.updated)
        for note in result.events:
            self.post_event(namespace, name, note)
        return writes

    async def run_forever(self, stop: asyncio.Event) -> None:
        """Tick until ``stop`` is set; a failing cycle is logged and the next one runs."""
        while not stop.is_set():
            try:
                report = await self.run_once()
                if report.errors:
                    log.warning("cycle finished with %d errors", len(report.errors))
            except Exception:
                log.exception("control cycle failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=self.tick_s)
