"""The control loop: every cycle, read Prometheus once for all services, then decide per service.

Reads come from Prometheus (one query per signal) and from the :class:`Inventory` (watch-fed), so a
cycle's cost in API calls is the writes it makes. Decisions are computed on the event loop, a slice
at a time so kopf's handlers keep running. What they have to write is queued to the background
writers of :mod:`tailguard.reconcile.writes` (blocking API calls, in threads): a cycle does not wait
for the API server, so its length does not grow with the writes, and a service whose last write has
not landed is not decided again until it has (its record would be stale).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tailguard.api import (
    API_VERSION,
    KIND,
    AutoscalingMode,
    InferenceService,
    InvalidResourceError,
    parse_inference_service,
)
from tailguard.k8s.cluster import ClusterAPI, ConflictError, Manifest
from tailguard.k8s.labels import POLICY_STATE_ANNOTATION
from tailguard.k8s.render import RenderSettings
from tailguard.metrics.figures import MetricsReading, SloEdges, figures_for, read_metrics
from tailguard.metrics.prometheus import PrometheusSource
from tailguard.metrics.promql import QueryScope
from tailguard.metrics.results import ServiceKey
from tailguard.policy import PolicyConfig, PolicyState
from tailguard.reconcile.adapt import policy_config, slo_seconds
from tailguard.reconcile.autoscale import AutoscaleInput, AutoscaleResult, autoscale
from tailguard.reconcile.children import foreign_replica_writers, sync_deployment
from tailguard.reconcile.inventory import Inventory, ServiceView
from tailguard.reconcile.service import LiveChildren, reconcile, resync_finds_the_same, write_status
from tailguard.reconcile.status import EventNote
from tailguard.reconcile.telemetry import Telemetry
from tailguard.reconcile.timestamps import Clock, in_turn
from tailguard.reconcile.workload import Workload, observe_workload
from tailguard.reconcile.writes import Priority, Write, WriteQueue

log = logging.getLogger(__name__)

#: The policy's state is written to its annotation when an action is taken, and at least this often.
STATE_PERSIST_INTERVAL_S = 300.0
#: How often each service's Deployment and status are checked against its spec (level-based resync).
#: Done here rather than with a kopf timer: kopf guards timers with a finalizer, which would make
#: deleting an InferenceService hang whenever the operator is down.
RESYNC_INTERVAL_S = 30.0
#: Decisions computed between two yields to the event loop (kopf's watches share it).
DECISIONS_PER_SLICE = 25
#: Services written for at once. On a busy machine a round trip is mostly waiting for the API server
#: (and etcd) to be scheduled, not CPU, so several in flight go through faster than one at a time;
#: the bound keeps the loop from flooding the API server that kopf's handlers share.
WRITERS = 32
#: At shutdown: how long status writes still queued may take to land, and then acting writes
#: (Deployments, Events) and those already in flight. Queued refreshes are dropped at once.
SHUTDOWN_GRACE_S = 5.0
ACTING_SHUTDOWN_GRACE_S = 20.0
#: After a failed Prometheus reading, the next is tried no sooner than this; the due services wait.
READ_RETRY_S = 5.0
#: Readings failing for this long are reported: every due service then holds its size and says
#: why (condition, Event). A shorter outage only delays decisions: at 2,000 services one reading
#: that timed out turned into a condition and an Event for each of them, twice (down, then up).
READ_FAILURE_GRACE_S = 30.0

EventSink = Callable[[str, str, EventNote], None]  # (namespace, name, note)


@dataclass
class CycleReport:
    """What one cycle did (for tests, logs and the benchmark).

    The cycle returns once its writes are queued; ``writes`` and ``errors`` keep counting as they
    land (``ControlLoop.flush`` waits for that).
    """

    services: int = 0
    #: Services left alone because their spec handler has not reconciled them yet.
    unreconciled: int = 0
    decided: int = 0
    #: Due services not decided because their previous write had not landed (due again next tick).
    deferred: int = 0
    #: Services with a write queued by this cycle (a decision's or a resync's).
    queued: int = 0
    #: Of those, how many replaced a write still queued for the same service.
    coalesced: int = 0
    #: Writes queued and not started when the cycle ended (this cycle's and earlier ones').
    backlog: int = 0
    writes: int = 0
    queries: int = 0
    query_errors: int = 0
    duration_s: float = 0.0
    errors: list[str] = field(default_factory=list)


def first_reconcile_done(body: Manifest) -> bool:
    """Whether the spec handler has reconciled this service at least once (its status carries the
    generation it reconciled; the handler writes it with the first children)."""
    status = body.get("status")
    return isinstance(status, dict) and status.get("observedGeneration") is not None


@dataclass
class ServiceRecord:
    """What the loop remembers about one service between cycles."""

    #: When its Deployment and status were last resynced.
    resynced_at: float
    #: When it was last decided for (None: never).
    decided_at: float | None = None
    #: The policy's state after the last decision (None: read it from the annotation).
    state: PolicyState | None = None
    #: When the state was last written to its annotation.
    persisted_at: float = -math.inf
    #: The body the spec was last parsed from (bodies are replaced, never mutated, so identity says
    #: whether the parse is current) and the result (None: invalid).
    parsed_from: Manifest | None = None
    isvc: InferenceService | None = None
    #: The body a status write conflicted on: no decision until the watch delivers a newer one
    #: (deciding again from the same copy would only conflict again).
    conflicted_on: Manifest | None = None
    #: Its decision was put off (its previous write had not landed): when it is decided, the
    #: reading of the tick it was due at serves, if there was one.
    deferred: bool = False
    #: ``(body, decided_at, next grid point)`` of the last "not due" (see :meth:`surely_not_due`).
    quiet: tuple[Manifest, float, float] | None = None
    #: The copy of the service a resync found nothing to do for, no rollout under way: while the
    #: inventory holds this very copy and its Deployment and pods do not change (a change of them
    #: is resynced at the next tick regardless), another resync would find the same.
    resynced_quiet: Manifest | None = None
    #: The copy of the service the last tick found nothing due for, and until when nothing will be
    #: (see :meth:`rest`): the ticks before skip it at a glance.
    idle_on: Manifest | None = None
    idle_until: float = -math.inf
    #: The policy's view of the spec, with the parse it was built from (rebuilt for a new parse).
    config_of: tuple[InferenceService, PolicyConfig] | None = None
    #: The workload and the other writers of its replicas, with the Deployment and pods they were
    #: read from (objects are replaced, never mutated: the same objects say the same).
    children_of: tuple[Manifest | None, tuple[Manifest, ...], Workload, list[str]] | None = None

    def config_for(self, isvc: InferenceService, scope: QueryScope) -> PolicyConfig:
        """The policy's view of ``isvc`` (one parse of the spec), built once per parse."""
        held = self.config_of
        if held is None or held[0] is not isvc:
            config = policy_config(
                isvc, rate_window_s=scope.rate_window_s, burst_window_s=scope.burst_window_s
            )
            held = self.config_of = (isvc, config)
        return held[1]

    def children(self, view: ServiceView) -> tuple[Workload, list[str]]:
        """The workload of ``view``'s Deployment and pods and the field managers other than
        tailguard that own its replicas, read once per version of them."""
        pods = tuple(view.pods.values())
        held = self.children_of
        if (
            held is None
            or held[0] is not view.deployment
            or len(held[1]) != len(pods)
            or any(a is not b for a, b in zip(held[1], pods, strict=True))
        ):
            workload = observe_workload(view.deployment, pods)
            held = self.children_of = (
                view.deployment,
                pods,
                workload,
                foreign_replica_writers(view.deployment),
            )
        return held[2], held[3]

    def spec(self, body: Manifest) -> InferenceService | None:
        """The parsed spec of ``body`` (None when invalid), parsed once per version of the body."""
        if body is not self.parsed_from:
            prior = (self.parsed_from, self.isvc) if self.parsed_from is not None and self.isvc else None
            try:
                self.isvc = parse_inference_service(body, prior=prior)
            except InvalidResourceError:
                self.isvc = None  # the spec handler reports InvalidSpec; nothing to decide on
            self.parsed_from = body
        return self.isvc

    def due(self, body: Manifest, now: float) -> bool:
        """Whether a decision is due for ``body``: autoscaled (Auto or DryRun), never decided (and not
        the copy a write just conflicted on), or a multiple of its interval (in Unix time) passed
        since the last decision.

        Decisions fall on one grid, so every service with the same interval is due in the same tick
        and one Prometheus reading serves them all (rather than one reading per tick for the few
        services whose own interval ends in it).
        """
        isvc = self.spec(body)
        if isvc is None or isvc.spec.autoscaling.mode is AutoscalingMode.MANUAL:
            return False
        if self.decided_at is None:
            if body is self.conflicted_on:
                return False
            self.conflicted_on = None
            return True
        interval_s = isvc.spec.autoscaling.interval_seconds
        next_at = (math.floor(self.decided_at / interval_s) + 1) * interval_s
        if now < next_at:
            # Asked again every tick until then: remember the answer for this body and decision.
            self.quiet = (body, self.decided_at, next_at)
            return False
        return True

    def rest(self, body: Manifest) -> None:
        """Nothing is due for ``body`` now: remember until when nothing will be — the next grid
        point :meth:`due` found for it (never, when it is not autoscaled), the next periodic
        resync. A new copy of the service, or a change of its children, ends the rest at once."""
        isvc = self.spec(body)
        if isvc is None or isvc.spec.autoscaling.mode is AutoscalingMode.MANUAL or self.decided_at is None:
            decision_at = math.inf  # not autoscaled, or waiting for a copy newer than a conflict's
        else:
            known = self._next_decision_known(body)
            decision_at = known if known is not None else -math.inf  # (not expected) look every tick
        self.idle_on = body
        self.idle_until = min(decision_at, self.resynced_at + RESYNC_INTERVAL_S)

    def surely_not_due(self, body: Manifest, now: float) -> bool:
        """Whether :meth:`due` said no for this very body and decision, and its next grid point is
        still ahead: checked for every service at every tick, so without parsing anything."""
        known = self._next_decision_known(body)
        return known is not None and now < known

    def _next_decision_known(self, body: Manifest) -> float | None:
        """The next grid point :meth:`due` found for this very body and decision (None: none)."""
        quiet = self.quiet
        return quiet[2] if quiet is not None and quiet[0] is body and quiet[1] == self.decided_at else None


@dataclass(frozen=True)
class PendingWrites:
    """One service's decision, computed; what remains is to write it."""

    key: ServiceKey
    view: ServiceView
    isvc: InferenceService
    result: AutoscaleResult
    persist_state: bool

    @property
    def empty(self) -> bool:
        """Nothing to write or post."""
        r = self.result
        return not (r.status_patch or r.apply or r.events or self.persist_state)

    @property
    def priority(self) -> Priority:
        """Acting first (a Deployment to change, Events to post), then news in status and the
        policy state after an action or at the first decision, then the periodic refreshes."""
        r = self.result
        if r.apply or r.events:
            return Priority.ACT
        if (r.status_patch and r.news) or r.persist_state:
            return Priority.STATUS
        return Priority.REFRESH


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
        render: RenderSettings,
        clock: Clock = time.time,
        tick_s: float = 1.0,
        workers: int = WRITERS,
    ) -> None:
        self.inventory = inventory
        self.cluster = cluster
        self.prometheus = prometheus
        self.scope = scope
        self.telemetry = telemetry
        self.post_event = post_event
        #: How children are rendered; the spec handlers render with the same settings.
        self.render = render
        self.clock = clock
        self.tick_s = tick_s
        self.writes: WriteQueue[PendingWrites] = WriteQueue(telemetry, writers=workers)
        self._records: dict[ServiceKey, ServiceRecord] = {}
        #: The object as a writer thread's last write to it left it, with the copy the write was
        #: computed from, until its landing is handled on the event loop and the inventory takes it.
        self._echoes: dict[ServiceKey, tuple[Manifest, Manifest]] = {}
        #: The last Prometheus reading (reused only for decisions put off from its tick).
        self._reading: MetricsReading | None = None
        #: Since when readings have failed, and when the last one failed (None: the last succeeded).
        self._failing_since: float | None = None
        self._failed_at: float = -math.inf

    async def run_once(self, now: float | None = None) -> CycleReport:
        """One tick: resync what is due for it, and if any service is due for a decision, read
        Prometheus once and decide for each due service. Returns once the writes are queued."""
        started = time.perf_counter()
        now = self.clock() if now is None else now
        report = CycleReport()
        due: list[ServiceKey] = []
        resync: list[ServiceKey] = []
        keys = self.inventory.keys()
        # Pods or a Deployment that changed are reflected in status at the next tick, not the next
        # periodic resync; a service deciding this tick, or still writing, keeps its mark.
        changed = self.inventory.take_changed()
        self.telemetry.services.set(len(keys))
        for key in keys:
            body = self.inventory.body(key)
            if body is None:
                continue
            record = self._records.get(key)
            resting = record is not None and record.idle_on is body and now < record.idle_until
            if resting and key not in changed:
                continue  # the same copy, the same children, and nothing due before idle_until
            if not first_reconcile_done(body):
                # Its spec handler has not run yet: there is nothing to act on, and a status
                # written now would race the handler's own writes (at 2,000 new services, three of
                # four such writes were refused as conflicts and retried).
                report.unreconciled += 1
                continue
            if record is None:
                record = self._records[key] = ServiceRecord(resynced_at=now)
            if not record.surely_not_due(body, now) and record.due(body, now):
                if self._must_wait(key):
                    record.deferred = True
                    report.deferred += 1
                else:
                    due.append(key)
            elif key in changed or now - record.resynced_at >= RESYNC_INTERVAL_S:
                if key not in changed and body is record.resynced_quiet:
                    record.resynced_at = now  # the same copy, the same children: nothing to find
                    record.rest(body)
                    continue
                if self.writes.busy(key):
                    continue  # its write lands first; resynced at a later tick
                resync.append(key)  # not in the same tick as a decision: both write status
                changed.discard(key)
            else:
                record.rest(body)
        self.inventory.mark_changed(changed & set(keys))
        self._forget_gone(set(keys))
        report.services = len(keys)
        if not due and not resync:
            self._finish(report)
            return report
        metrics: MetricsReading | None = None
        if due:
            metrics = self._reading_for(due, now)
            if metrics is None:
                metrics = await self._read(report, now, due)
            if metrics is None:  # not read, or failed for less than the grace: decided later
                for key in due:
                    self._records[key].deferred = True
                report.deferred += len(due)
                due = []
        read_done = time.perf_counter()
        for key in resync:
            if not self.writes.busy(key):  # a write for it may have been queued while reading
                self._queue(report, key, Priority.STATUS, functools.partial(self._resync, key, now))
        for index, key in enumerate(due):
            if metrics is None:
                continue
            if index and index % DECISIONS_PER_SLICE == 0:
                await asyncio.sleep(0)  # writers may have started queued writes meanwhile
            record = self._records[key]
            if self._must_wait(key):
                record.deferred = True
                report.deferred += 1
                continue
            record.decided_at = now
            record.deferred = False
            queued = self.writes.queued(key)
            prior = queued.source if queued is not None else None
            try:
                pending = self._decide(key, metrics, now, prior)
            except Exception as exc:  # one service's failure must not stop the others
                log.exception("decision for %s/%s failed", *key)
                report.errors.append(f"{key[0]}/{key[1]}: {type(exc).__name__}: {exc}")
                continue
            report.decided += 1
            if pending is None:
                continue
            if pending.empty:
                # Nothing to write, not even what was queued from the same copy: it is all said.
                self.writes.cancel(key)
                self._records[key].state = pending.result.state
                continue
            priority = pending.priority
            self._queue(
                report,
                key,
                priority,
                functools.partial(self._write, pending, now),
                source=pending if priority is not Priority.ACT else None,
            )
        finished = time.perf_counter()
        report.duration_s = finished - started
        if due:
            self.telemetry.loop_duration.observe(report.duration_s)
            self.telemetry.loop_phase.labels("read").observe(read_done - started)
            self.telemetry.loop_phase.labels("decide").observe(finished - read_done)
        self._finish(report)
        if report.duration_s > 5.0:
            log.warning(
                "slow cycle: %.1f s (Prometheus %.1f s) for %d decisions and %d resyncs; %d writes queued",
                report.duration_s, read_done - started, len(due), len(resync), report.backlog,
            )  # fmt: skip
        return report

    async def _read(self, report: CycleReport, now: float, due: list[ServiceKey]) -> MetricsReading | None:
        """A new reading for ``due`` services; ``None`` while readings fail for less than
        ``READ_FAILURE_GRACE_S`` (the services wait for the next, tried after ``READ_RETRY_S``)."""
        since = self._failing_since
        if since is not None and now - self._failed_at < READ_RETRY_S and now - since < READ_FAILURE_GRACE_S:
            return None
        metrics = await read_metrics(self.prometheus, self.scope, at=now, slos=self._slos(due))
        report.queries = len(metrics.queried)
        report.query_errors = len(metrics.errors)
        for signal in metrics.queried:
            self.telemetry.queries.labels(signal.value).inc()
        for signal in metrics.errors:
            self.telemetry.query_errors.labels(signal.value).inc()
        if not metrics.errors:
            self._failing_since = None
            self._reading = metrics
            return metrics
        self._reading = None
        self._failed_at = now
        if self._failing_since is None:
            self._failing_since = now
        failing_s = now - self._failing_since
        said = "; ".join(f"{s.value}: {e}" for s, e in sorted(metrics.errors.items()))
        # Said once per reading, not per service.
        if failing_s < READ_FAILURE_GRACE_S:
            log.warning(
                "%d of %d Prometheus queries failed; %d due services wait for the next reading "
                "(in %.0f s; reported if readings still fail after %.0f s): %s",
                len(metrics.errors), report.queries, len(due), READ_RETRY_S, READ_FAILURE_GRACE_S, said,
            )  # fmt: skip
            return None
        log.warning(
            "%d of %d Prometheus queries failed, readings for %.0f s; %d services hold their size: %s",
            len(metrics.errors), report.queries, failing_s, len(due), said,
        )  # fmt: skip
        return metrics

    def _slos(self, due: list[ServiceKey]) -> dict[ServiceKey, SloEdges]:
        """The SLOs of the services to decide for: the only latency buckets a reading needs."""
        out: dict[ServiceKey, SloEdges] = {}
        for key in due:
            view = self.inventory.view(key)
            record = self._records.get(key)
            isvc = record.spec(view.body) if view is not None and record is not None else None
            if isvc is not None:
                out[key] = slo_seconds(isvc)
        return out

    def _reading_for(self, due: list[ServiceKey], now: float) -> MetricsReading | None:
        """The last reading, when every due service is one put off from an earlier tick and that
        reading is younger than their interval (it is the reading of the tick they were due at):
        a write that lands a second late must not cost a new reading of every service. None: a
        new reading is needed."""
        reading = self._reading
        if reading is None:
            return None
        records = [self._records[key] for key in due]
        if not all(r.deferred and r.isvc is not None for r in records):
            return None
        if not all(reading.covers(slo_seconds(r.isvc)) for r in records if r.isvc is not None):
            return None  # put off before it was due: its SLO's buckets may not have been read
        shortest = min(r.isvc.spec.autoscaling.interval_seconds for r in records if r.isvc is not None)
        return reading if now - reading.at < shortest else None

    async def flush(self) -> None:
        """Wait until every write queued so far has landed."""
        await self.writes.flush()

    def _must_wait(self, key: ServiceKey) -> bool:
        """Whether ``key`` cannot be decided now: its write is in flight, or queued and not to be
        replaced (an acting write, or a resync's)."""
        if self.writes.in_flight(key):
            return True
        queued = self.writes.queued(key)
        return queued is not None and queued.source is None

    def _queue(
        self,
        report: CycleReport,
        key: ServiceKey,
        priority: Priority,
        work: Callable[[], int],
        *,
        source: PendingWrites | None = None,
    ) -> None:
        landed = functools.partial(self._landed, report, key)
        report.queued += 1
        if self.writes.submit(Write(key, priority, work, landed, source)):
            report.coalesced += 1

    def _keep_echo(self, key: ServiceKey, echo: Manifest | None, base: Manifest) -> None:
        """Keep the object as a write (in a writer thread) left it, and the copy ``base`` the write
        was computed from; the inventory takes it when the landing is handled on the event loop."""
        if echo is not None:
            self._echoes[key] = (echo, base)

    def _landed(self, report: CycleReport, key: ServiceKey, outcome: int | Exception) -> None:
        """Account for one service's write in the report of the cycle that queued it, and keep the
        object as the write left it (even if a later write of the same job failed)."""
        kept = self._echoes.pop(key, None)
        if kept is not None:
            echo, base = kept
            self.inventory.put_written(echo)
            record = self._records.get(key)
            if (
                record is not None
                and record.resynced_quiet is base
                and self.inventory.body(key) is echo
                and resync_finds_the_same(base, echo)
            ):
                # Only the autoscaler's own fields changed: the resync would find nothing again.
                record.resynced_quiet = echo
        if isinstance(outcome, Exception):
            if _gone(outcome):
                # Deleted (or its namespace terminating) meanwhile: nothing to do.
                log.debug("write for %s/%s: the service is gone (%s)", *key, outcome)
                return
            log.error("write for %s/%s failed", *key, exc_info=outcome)
            report.errors.append(f"{key[0]}/{key[1]}: {type(outcome).__name__}: {outcome}")
            return
        report.writes += outcome
        self.telemetry.writes.inc(outcome)

    def _finish(self, report: CycleReport) -> None:
        report.backlog = self.writes.depth
        if report.deferred:
            self.telemetry.decisions_deferred.inc(report.deferred)

    def _forget_gone(self, present: set[ServiceKey]) -> None:
        for gone in set(self._records) - present:
            del self._records[gone]
            self.telemetry.forget(*gone)

    def _resync(self, key: ServiceKey, now: float) -> int:
        """Revert drift of the Deployment and refresh the workload status, from the inventory."""
        record = self._records.get(key)
        if record is not None:
            record.resynced_at = now
        view = self.inventory.view(key)
        if view is None:
            return 0
        live = LiveChildren(view.deployment, list(view.pods.values()))
        # The spec as parsed for this very body when its decisions were due (None: invalid, and
        # reconcile parses it again to report why).
        parsed = record.spec(view.body) if record is not None else None
        result = reconcile(view.body, self.cluster, self.render, now=now, live=live, parsed=parsed)
        if record is not None:
            quiet = not (result.status_patch or result.events) and not (
                result.workload is None or result.workload.rollout_in_progress
            )
            record.resynced_quiet = view.body if quiet else None
        try:
            echo = write_status(self.cluster, view.body, result)
        except ConflictError:
            # Changed meanwhile: the next resync computes the status again from the fresh copy,
            # but the writes made here stay made, and their events are posted.
            for note in result.action_events:
                self.post_event(key[0], key[1], note)
            return len(result.action_events)
        self._keep_echo(key, echo, view.body)
        for note in result.events:
            self.post_event(key[0], key[1], note)
        return int(bool(result.status_patch)) + len(result.events)

    def _decide(
        self, key: ServiceKey, metrics: MetricsReading, now: float, prior: PendingWrites | None = None
    ) -> PendingWrites | None:
        """Compute one service's decision and what it needs written; no I/O. ``prior``: the decision
        whose writes are still queued for it, which this one replaces (its state is the one to go on
        from, and its policy state is written if it was to be)."""
        view = self.inventory.view(key)
        record = self._records.get(key)
        if view is None or record is None:  # deleted while the cycle ran
            return None
        isvc = record.spec(view.body)
        if isvc is None or isvc.spec.autoscaling.mode is AutoscalingMode.MANUAL:
            return None
        config = record.config_for(isvc, self.scope)
        figures = figures_for(metrics, key, ttft_slo_s=config.ttft_slo_s, tpot_slo_s=config.tpot_slo_s)
        workload, writers = record.children(view)
        state = prior.result.state if prior is not None else record.state
        if state is None:
            stored = isvc.metadata.annotations.get(POLICY_STATE_ANNOTATION)
            state = PolicyState.from_json(stored) if stored else None
        result = autoscale(
            AutoscaleInput(
                isvc=isvc,
                workload=workload,
                figures=figures,
                config=config,
                writers=writers,
                state=state,
                now=now,
                metrics_ok=metrics.ok,
                conditions=list((view.body.get("status") or {}).get("conditions") or []),
            )
        )
        self.telemetry.record_step(
            key,
            decision=result.decision,
            applied=result.apply,
            workload=workload,
            figures=figures,
            config=result.config,
        )
        interval_s = float(isvc.spec.autoscaling.interval_seconds)
        since_persisted = now - record.persisted_at
        persist = (
            result.persist_state
            or (prior is not None and prior.persist_state)
            or since_persisted >= STATE_PERSIST_INTERVAL_S + interval_s
            or (
                since_persisted >= STATE_PERSIST_INTERVAL_S / 2
                and in_turn(key, now, interval_s, STATE_PERSIST_INTERVAL_S)
            )
        )
        return PendingWrites(key=key, view=view, isvc=isvc, result=result, persist_state=persist)

    def _write(self, pending: PendingWrites, now: float) -> int:
        """Write one decision: status (conditional on the version decided from), state, Deployment, Events."""
        key, view, result = pending.key, pending.view, pending.result
        record = self._records.get(key)
        writes = 0
        namespace, name = key
        if result.status_patch:
            try:
                echo = self.cluster.patch_status(
                    API_VERSION,
                    KIND,
                    namespace,
                    name,
                    result.status_patch,
                    resource_version=(view.body.get("metadata") or {}).get("resourceVersion"),
                )
            except ConflictError:
                # Changed since the watch delivered it: decide again from the fresh copy once the
                # watch delivers it, with the state as it was before this step.
                if record is not None:
                    record.decided_at = None
                    record.conflicted_on = view.body
                return 0
            writes += 1
            self._keep_echo(key, echo, view.body)
        if record is not None:
            record.state = result.state
        if pending.persist_state:
            if record is not None:
                record.persisted_at = now
            state_echo = self.cluster.patch_metadata(
                API_VERSION,
                KIND,
                namespace,
                name,
                {"annotations": {POLICY_STATE_ANNOTATION: result.state_json}},
            )
            writes += 1
            self._keep_echo(key, state_echo, view.body)
        if result.apply:
            # Straight from the decision: the size is not read back from a status being written.
            outcome = sync_deployment(pending.isvc, self.cluster, result.size, self.render, view.deployment)
            writes += outcome.writes
        for note in result.events:
            self.post_event(namespace, name, note)
        return writes

    async def run_forever(self, stop: asyncio.Event) -> None:
        """Tick until ``stop`` is set; a failing cycle is logged and the next one runs. Then the
        writes still queued are given a moment to land, acting writes first (see
        :meth:`WriteQueue.close`)."""
        try:
            while not stop.is_set():
                try:
                    report = await self.run_once()
                    if report.errors:
                        log.warning("cycle finished with %d errors", len(report.errors))
                except Exception:
                    log.exception("control cycle failed")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout=self.tick_s)
        finally:
            await self.writes.close(SHUTDOWN_GRACE_S, ACTING_SHUTDOWN_GRACE_S)


def _gone(exc: BaseException) -> bool:
    """The API server answered that the object is gone (404), or that its namespace is being
    deleted (403 with that reason): a race with a deletion, not a failure."""
    status = getattr(exc, "status", None)
    if status == 404:
        return True
    return status == 403 and "being terminated" in str(getattr(exc, "body", "") or exc)
