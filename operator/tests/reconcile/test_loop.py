"""The control loop against the in-memory cluster and a fake Prometheus: reads, decisions, writes, faults."""

from __future__ import annotations

import asyncio
import copy
import logging
import threading
from typing import Any

import pytest

from tailguard.contract.vllm import TTFT_BUCKETS_S
from tailguard.k8s.cluster import ConflictError, FakeCluster
from tailguard.k8s.render import RenderSettings
from tailguard.metrics.prometheus import FakePrometheus
from tailguard.metrics.promql import QueryScope, Signal, all_queries
from tailguard.metrics.results import QueryError
from tailguard.reconcile.inventory import Inventory, ServiceView
from tailguard.reconcile.loop import WRITERS, ControlLoop, ServiceRecord
from tailguard.reconcile.service import LiveChildren, reconcile
from tailguard.reconcile.status import EventNote
from tailguard.reconcile.telemetry import Telemetry
from tailguard.reconcile.timestamps import iso
from tailguard.reconcile.writes import Priority, Write
from tg_testing import manifest, run_cycle

SCOPE = QueryScope()
QUERIES = all_queries(SCOPE)
#: A reading for services reads their latency histograms at the SLO edges, with Prometheus's p99s.
READ = len(all_queries(SCOPE, {Signal.TTFT_BUCKETS: [0.5], Signal.TPOT_BUCKETS: [0.05]}))
NOW = 1_800_000_000.0
ISVC = ("tailguard.dev/v1alpha1", "InferenceService")


def _series(ns: str, svc: str, value: float, le: str | None = None) -> dict[str, Any]:
    metric = {"namespace": ns, "inference_service": svc}
    if le is not None:
        metric["le"] = le
    return {"metric": metric, "value": [NOW, str(value)]}


def load(
    ns: str, svc: str, *, rate: float, slow_share: float, running: float, waiting: float, pods: int
) -> dict[Signal, list[dict[str, Any]]]:
    """Prometheus answers for one service: ``slow_share`` of requests take 2 s to first token, the rest 0.05 s."""
    buckets = [
        _series(ns, svc, (rate if b >= 2.5 else rate * (1 - slow_share) if b >= 0.06 else 0.0), le=repr(b))
        for b in TTFT_BUCKETS_S
    ]
    buckets.append(_series(ns, svc, rate, le="+Inf"))
    return {
        Signal.TTFT_BUCKETS: buckets,
        Signal.REQUEST_RATE: [_series(ns, svc, rate)],
        Signal.PROMPT_TOKEN_RATE: [_series(ns, svc, rate * 200)],
        Signal.GENERATION_TOKEN_RATE: [_series(ns, svc, rate * 180)],
        Signal.RUNNING: [_series(ns, svc, running)],
        Signal.WAITING: [_series(ns, svc, waiting)],
        Signal.KV_CACHE_USAGE: [_series(ns, svc, 0.3)],
        Signal.PREEMPTION_RATE: [_series(ns, svc, 0.0)],
        Signal.REPORTING_PODS: [_series(ns, svc, pods)],
        Signal.LAST_SAMPLE: [_series(ns, svc, NOW - 5)],
    }


def answers(*loads: dict[Signal, list[dict[str, Any]]]) -> dict[str, Any]:
    merged: dict[str, Any] = {}
    for one in loads:
        for signal, series in one.items():
            merged.setdefault(QUERIES[signal], []).extend(series)
    return merged


def _ready_pod(name: str, svc: str = "chat") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "labels": {"tailguard.dev/inference-service": svc}},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


class Harness:
    def __init__(
        self, prometheus: FakePrometheus, *, cluster: FakeCluster | None = None, writers: int = WRITERS
    ) -> None:
        self.cluster = cluster or FakeCluster()
        self.inventory = Inventory()
        self.events: list[tuple[str, EventNote]] = []
        self.prometheus = prometheus
        self.telemetry = Telemetry()
        self.loop = ControlLoop(
            inventory=self.inventory,
            cluster=self.cluster,
            prometheus=prometheus,
            scope=SCOPE,
            telemetry=self.telemetry,
            post_event=lambda ns, name, note: self.events.append((name, note)),
            render=RenderSettings(),
            workers=writers,
        )

    def add(self, name: str = "chat", *, ready: int = 1, **spec: Any) -> None:
        body = manifest(**spec)
        body["metadata"]["name"] = name
        result = reconcile(body, self.cluster, RenderSettings(), now=NOW - 3600)
        body["status"] = result.status_patch
        deployment = self.cluster.get("apps/v1", "Deployment", "team-a", name)
        assert deployment is not None
        deployment["status"] = {
            "replicas": ready,
            "readyReplicas": ready,
            "updatedReplicas": ready,
            "observedGeneration": 1,
        }
        deployment["metadata"]["generation"] = 1
        self.inventory.put_service(body)
        self.inventory.put_deployment(deployment)
        for i in range(ready):
            self.inventory.put_pod(_ready_pod(f"{name}-{i}", name))

    def refresh(self, name: str = "chat") -> None:
        """Feed the cluster's current object back, as the watch would."""
        obj = self.cluster.get("tailguard.dev/v1alpha1", "InferenceService", "team-a", name)
        view = self.inventory.view(("team-a", name))
        assert view is not None
        body = copy.deepcopy(view.body)
        if obj is not None:
            body["status"] = {**(body.get("status") or {}), **(obj.get("status") or {})}
            body["metadata"]["annotations"] = {
                **body["metadata"].get("annotations", {}),
                **obj["metadata"].get("annotations", {}),
            }
        self.inventory.put_service(body)

    def run(self, now: float = NOW) -> Any:
        return run_cycle(self.loop, now)

    def deployment_replicas(self, name: str = "chat") -> int:
        dep = self.cluster.get("apps/v1", "Deployment", "team-a", name)
        assert dep is not None
        return int(dep["spec"]["replicas"])

    def status(self, name: str = "chat") -> dict[str, Any]:
        obj = self.cluster.get("tailguard.dev/v1alpha1", "InferenceService", "team-a", name)
        return dict((obj or {}).get("status") or {})


def _condition(status: dict[str, Any], type_: str) -> tuple[str, str]:
    cond = next(c for c in status["conditions"] if c["type"] == type_)
    return cond["status"], cond["reason"]


def test_queries_per_cycle_do_not_grow_with_services() -> None:
    counts = []
    for services in (1, 40):
        fake = FakePrometheus()
        harness = Harness(fake)
        for i in range(services):
            harness.add(f"svc-{i}")
        report = harness.run()
        counts.append(len(fake.queries))
        assert report.decided == services
    assert counts[0] == counts[1] == len(Signal)


def test_tail_breach_scales_up_with_an_event_and_status() -> None:
    harness = Harness(
        FakePrometheus(
            answers(load("team-a", "chat", rate=40, slow_share=0.2, running=250, waiting=60, pods=1))
        )
    )
    harness.add(autoscaling={"maxReplicas": 8})
    harness.run()
    replicas = harness.deployment_replicas()
    assert replicas > 1
    status = harness.status()
    assert status["desiredReplicas"] == replicas
    assert status["lastDecision"]["applied"] is True
    assert _condition(status, "SLOMet")[0] == "False"
    scaled = [note for _, note in harness.events if note.reason == "Scaled"]
    assert len(scaled) == 1
    assert scaled[0].message.startswith(f"scaled 1→{replicas}:")


def test_dry_run_decides_and_reports_but_leaves_the_deployment() -> None:
    harness = Harness(
        FakePrometheus(
            answers(load("team-a", "chat", rate=40, slow_share=0.2, running=250, waiting=60, pods=1))
        )
    )
    harness.add(autoscaling={"mode": "DryRun", "maxReplicas": 8})
    before = len(harness.cluster.applied)
    harness.run()
    assert len(harness.cluster.applied) == before
    assert harness.deployment_replicas() == 1
    status = harness.status()
    assert status["lastDecision"]["applied"] is False
    assert status["lastDecision"]["replicas"] > 1
    assert [note.reason for _, note in harness.events] == ["DryRunDecision"]


def test_prometheus_down_holds_and_reports_then_recovers(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakePrometheus({q: QueryError("Prometheus unreachable: ConnectError") for q in QUERIES.values()})
    harness = Harness(fake)
    harness.add(autoscaling={"maxReplicas": 8})
    with caplog.at_level(logging.WARNING, logger="tailguard.reconcile.loop"):
        first = harness.run()
        # The first failed reading only delays the decision: nothing is reported yet.
        assert (first.decided, first.deferred) == (0, 1)
        assert harness.events == []
        queries = len(fake.queries)
        assert harness.run(NOW + 2).queries == 0, "the next reading waits a few seconds"
        assert len(fake.queries) == queries
        harness.run(NOW + 31)  # still failing after the grace: every due service holds and says so
    said = [r.getMessage() for r in caplog.records if "Prometheus queries failed" in r.getMessage()]
    # One line per failed reading, naming the failed signals, however many services wait.
    assert len(said) == 2, said
    assert said[0].startswith(f"{READ} of {READ} Prometheus queries failed; 1 due services wait")
    assert said[1].startswith(f"{READ} of {READ} Prometheus queries failed, readings for 31 s")
    assert "ttft_buckets: Prometheus unreachable: ConnectError" in said[1]
    assert harness.deployment_replicas() == 1
    status = harness.status()
    assert _condition(status, "MetricsAvailable") == ("False", "PrometheusUnavailable")
    assert any(note.type == "Warning" for _, note in harness.events)
    harness.refresh()
    fake.answers = answers(load("team-a", "chat", rate=2, slow_share=0.0, running=3, waiting=0, pods=1))
    harness.run(NOW + 45)
    assert _condition(harness.status(), "MetricsAvailable") == ("True", "MetricsFresh")


def test_a_reading_reads_the_latency_buckets_at_the_slos_of_the_services_due() -> None:
    fake = FakePrometheus(
        answers(
            load("team-a", "chat", rate=2, slow_share=0.0, running=3, waiting=0, pods=1),
            load("team-a", "code", rate=2, slow_share=0.0, running=3, waiting=0, pods=1),
        )
    )
    harness = Harness(fake)
    harness.add("chat", slo={"ttftP99Ms": 500})
    harness.add("code", slo={"ttftP99Ms": 1000})
    report = harness.run(NOW)
    assert report.decided == 2
    assert QUERIES[Signal.TTFT_BUCKETS] not in fake.queries, "no histogram read in full"
    narrowed = all_queries(SCOPE, {Signal.TTFT_BUCKETS: [0.5, 1.0], Signal.TPOT_BUCKETS: []})
    assert narrowed[Signal.TTFT_BUCKETS] in fake.queries
    assert narrowed[Signal.TTFT_P99] in fake.queries
    assert _condition(harness.status("code"), "MetricsAvailable") == ("True", "MetricsFresh")


def test_one_failed_reading_delays_the_decision_and_reports_nothing() -> None:
    failing = {q: QueryError("Prometheus did not answer within 10 s") for q in QUERIES.values()}
    fake = FakePrometheus(dict(failing))
    harness = Harness(fake)
    harness.add(autoscaling={"maxReplicas": 8})
    assert harness.run(NOW).decided == 0
    fake.answers = answers(load("team-a", "chat", rate=40, slow_share=0.2, running=250, waiting=60, pods=1))
    report = harness.run(NOW + 5)  # the retry answers: decided now, from this reading
    assert (report.decided, report.queries) == (1, READ)
    assert harness.deployment_replicas() > 1
    assert _condition(harness.status(), "MetricsAvailable") == ("True", "MetricsFresh")
    assert [note.type for _, note in harness.events] == ["Normal"]


def test_another_writer_is_reported_not_fought() -> None:
    harness = Harness(
        FakePrometheus(
            answers(load("team-a", "chat", rate=40, slow_share=0.2, running=250, waiting=60, pods=1))
        )
    )
    harness.add(autoscaling={"maxReplicas": 8})
    deployment = harness.cluster.get("apps/v1", "Deployment", "team-a", "chat")
    assert deployment is not None
    deployment["metadata"]["managedFields"] = [
        {
            "manager": "kube-controller-manager",
            "operation": "Update",
            "subresource": "scale",
            "fieldsV1": {"f:spec": {"f:replicas": {}}},
        }
    ]
    harness.inventory.put_deployment(deployment)
    harness.run()
    assert harness.deployment_replicas() == 1
    assert _condition(harness.status(), "ScalingLimited") == ("True", "AnotherWriter")
    assert any(note.reason == "AnotherWriter" for _, note in harness.events)


def test_idle_service_is_not_in_trouble() -> None:
    harness = Harness(
        FakePrometheus(answers(load("team-a", "chat", rate=0, slow_share=0.0, running=0, waiting=0, pods=1)))
    )
    harness.add()
    harness.run()
    assert _condition(harness.status(), "SLOMet") == ("True", "NoTraffic")
    assert harness.deployment_replicas() == 1


def test_service_deleted_mid_cycle_is_skipped_quietly() -> None:
    class Deleting(FakePrometheus):
        async def query(self, promql: str, *, at: float | None = None) -> Any:
            harness.inventory.drop_service(("team-a", "chat"))
            return await super().query(promql, at=at)

    harness = Harness(Deleting())
    harness.add()
    report = harness.run()
    assert report.errors == []
    assert report.writes == 0


@pytest.mark.parametrize("interval", [15, 30])
def test_each_service_runs_on_its_own_cadence(interval: int) -> None:
    fake = FakePrometheus()
    harness = Harness(fake)
    harness.add(autoscaling={"intervalSeconds": interval})
    decided = sum(harness.run(NOW + t).decided for t in range(0, 60, 5))
    assert decided == 60 // interval


def _harness_with_a_stale_copy() -> tuple[Harness, dict[str, Any]]:
    """An overloaded service whose copy in the inventory is older than the object in the cluster."""
    harness = Harness(
        FakePrometheus(
            answers(load("team-a", "chat", rate=40, slow_share=0.2, running=250, waiting=60, pods=1))
        )
    )
    harness.add(autoscaling={"maxReplicas": 8})
    harness.cluster.patch_status(
        "tailguard.dev/v1alpha1", "InferenceService", "team-a", "chat", {"ready": "0/1"}
    )
    view = harness.inventory.view(("team-a", "chat"))
    assert view is not None
    view.body["metadata"]["resourceVersion"] = "0"  # older than the object now in the cluster
    harness.inventory.put_service(view.body)
    return harness, view.body


def test_status_computed_from_a_stale_copy_is_not_written() -> None:
    harness, _ = _harness_with_a_stale_copy()
    report = harness.run()
    assert report.writes == 0
    assert harness.deployment_replicas() == 1, "no action without its recorded intent"
    assert harness.events == []


def test_restart_resumes_from_recorded_intent_without_repeating_the_action() -> None:
    prometheus = FakePrometheus(
        answers(load("team-a", "chat", rate=40, slow_share=0.2, running=250, waiting=60, pods=1))
    )
    harness = Harness(prometheus)
    harness.add(autoscaling={"maxReplicas": 8})
    harness.run()
    scaled_to = harness.deployment_replicas()
    assert scaled_to > 1
    harness.refresh()
    state = harness.status()
    # A new operator process: fresh loop, same cluster and annotations, replicas still starting.
    restarted = Harness(prometheus)
    restarted.cluster = harness.cluster
    restarted.loop.cluster = harness.cluster
    view = harness.inventory.view(("team-a", "chat"))
    assert view is not None
    restarted.inventory.put_service(view.body)
    deployment = harness.cluster.get("apps/v1", "Deployment", "team-a", "chat")
    assert deployment is not None
    deployment["status"] = {
        "replicas": scaled_to,
        "readyReplicas": 1,
        "updatedReplicas": scaled_to,
        "observedGeneration": 1,
    }
    restarted.inventory.put_deployment(deployment)
    restarted.inventory.put_pod(_ready_pod("chat-0"))
    for i in range(1, scaled_to):
        pod = _ready_pod(f"chat-{i}")
        pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        restarted.inventory.put_pod(pod)
    restarted.run(NOW + 15)
    assert restarted.deployment_replicas() == scaled_to, "starting replicas count as capacity on the way"
    assert [n for _, n in restarted.events if n.reason == "Scaled"] == []
    assert state["desiredReplicas"] == scaled_to


def test_resync_reverts_a_hand_edit_from_the_inventory_without_reads() -> None:
    harness = Harness(FakePrometheus())
    harness.add(autoscaling={"mode": "Manual"})
    deployment = harness.cluster.get("apps/v1", "Deployment", "team-a", "chat")
    assert deployment is not None
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "someone/else:latest"
    harness.cluster.add(deployment)
    harness.inventory.put_deployment(deployment)
    harness.run(NOW)  # the edit was seen by the watch: resynced at once
    reverted = harness.cluster.get("apps/v1", "Deployment", "team-a", "chat")
    assert reverted is not None
    harness.inventory.put_deployment(reverted)  # the watch delivers the reverted object
    harness.run(NOW + 31)
    live = harness.cluster.get("apps/v1", "Deployment", "team-a", "chat")
    assert live is not None
    assert live["spec"]["template"]["spec"]["containers"][0]["image"].startswith("vllm/vllm-openai:")
    assert [note.reason for _, note in harness.events] == ["Updated"]


def test_resync_parses_a_spec_once_per_version_of_the_body(monkeypatch: pytest.MonkeyPatch) -> None:
    from tailguard.reconcile import loop, service

    parsed: list[str] = []
    real = service.parse_inference_service

    def counting(body: Any, **kwargs: Any) -> Any:
        parsed.append(body["metadata"]["name"])
        return real(body, **kwargs)

    monkeypatch.setattr(service, "parse_inference_service", counting)
    monkeypatch.setattr(loop, "parse_inference_service", counting)
    harness = Harness(FakePrometheus())
    harness.add(autoscaling={"mode": "Manual"})
    parsed.clear()
    for tick in range(3):  # the first tick sees the service; then two periodic resyncs
        harness.run(NOW + 31 * tick)
    assert parsed == ["chat"], "one parse for one body, however many resyncs"
    assert harness.cluster.status_patches, "the resyncs still wrote the workload status"
    body = copy.deepcopy(harness.inventory.view(("team-a", "chat")).body)  # type: ignore[union-attr]
    harness.inventory.put_service(body)  # a new version from the watch
    harness.run(NOW + 100)
    assert parsed == ["chat", "chat"]


def count_resyncs(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The times of the loop's resyncs from now on (each a call of ``reconcile``), as they happen."""
    from tailguard.reconcile import loop

    resynced: list[float] = []
    real = loop.reconcile

    def counting(*args: Any, **kwargs: Any) -> Any:
        resynced.append(kwargs["now"])
        return real(*args, **kwargs)

    monkeypatch.setattr(loop, "reconcile", counting)
    return resynced


def test_a_periodic_resync_of_the_copy_a_quiet_resync_saw_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    resynced = count_resyncs(monkeypatch)
    harness = Harness(FakePrometheus())
    harness.add(autoscaling={"mode": "Manual"})
    for tick in range(3):  # seen, then periodic resyncs: the status written comes back by the watch
        harness.run(NOW + 31 * tick)
        harness.refresh()
    harness.run(NOW + 31 * 3)  # the copy with that status: nothing to write
    quiet_since = len(resynced)
    writes = len(harness.cluster.status_patches)
    for tick in range(4, 7):
        harness.run(NOW + 31 * tick)
    assert len(resynced) == quiet_since, "the same copy and children: nothing resynced"
    assert len(harness.cluster.status_patches) == writes
    harness.inventory.put_pod(_ready_pod("chat-0"))  # a child changed: resynced at the next tick
    harness.run(NOW + 31 * 7)
    assert len(resynced) == quiet_since + 1
    body = copy.deepcopy(harness.inventory.view(("team-a", "chat")).body)  # type: ignore[union-attr]
    harness.inventory.put_service(body)  # a new copy from the watch: resynced at its turn
    harness.run(NOW + 31 * 8)
    assert len(resynced) == quiet_since + 2


def test_the_autoscalers_own_status_writes_do_not_bring_the_resync_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resynced = count_resyncs(monkeypatch)
    harness = Harness(
        FakePrometheus(answers(load("team-a", "chat", rate=5, slow_share=0.0, running=4, waiting=0, pods=1)))
    )
    harness.add()
    key = ("team-a", "chat")
    view = harness.inventory.view(key)
    assert view is not None
    harness.cluster.add(view.body)  # the API server's copy: a write answers with the whole object
    for t in range(0, 120):  # the first decisions, their writes and the resyncs they bring
        harness.run(NOW + t)
    quiet_since, writes = len(resynced), len(harness.cluster.status_patches)
    for t in range(120, 600):
        harness.run(NOW + t)
    refreshed = harness.cluster.status_patches[writes:]
    assert len(refreshed) >= 7, "the status is still refreshed at least once a minute"
    assert all(set(patch) <= {"lastDecision", "observed", "conditions"} for _, _, patch in refreshed)
    assert len(resynced) == quiet_since, "each write left a copy the resync had already seen the like of"
    # The claim itself: a resync of the copy the writes left finds nothing to do.
    view = harness.inventory.view(key)
    assert view is not None
    found = reconcile(
        view.body, harness.cluster, RenderSettings(), now=NOW + 600,
        live=LiveChildren(view.deployment, list(view.pods.values())),
    )  # fmt: skip
    assert (found.status_patch, found.events) == ({}, [])
    harness.inventory.put_pod(_ready_pod("chat-1"))  # a child changed: resynced after the decision
    harness.run(NOW + 600)  # a decision's tick: the resync waits for the next
    harness.run(NOW + 601)
    assert len(resynced) == quiet_since + 1


def test_a_copy_that_differs_in_what_the_resync_reads_is_resynced() -> None:
    from tailguard.reconcile.service import resync_finds_the_same

    base = manifest()
    base["metadata"].update(resourceVersion="7", generation=2, annotations={"team": "a"})
    base["status"] = {"readyReplicas": 1, "conditions": [{"type": "Ready", "status": "True"}]}

    def changed(change: Any) -> dict[str, Any]:
        after = copy.deepcopy(base)
        change(after)
        return after

    same = [
        lambda b: b["metadata"].update(resourceVersion="8", managedFields=[{"manager": "tailguard"}]),
        lambda b: b["metadata"]["annotations"].update({"tailguard.dev/policy-state": "{}"}),
        lambda b: b["status"].update(lastDecision={"replicas": 2}, observed={"goodput": 1.0}),
        lambda b: b["status"]["conditions"].append({"type": "SLOMet", "status": "True"}),
    ]
    other = [
        lambda b: b["spec"].update(replicas=3),
        lambda b: b["metadata"].update(generation=3),
        lambda b: b["metadata"]["annotations"].update({"team": "b"}),
        lambda b: b["metadata"].update(labels={"tier": "gold"}),
        lambda b: b["status"].update(desiredReplicas=4),
        lambda b: b["status"].update(maxNumSeqs=128),
        lambda b: b["status"]["conditions"][0].update(status="False"),
    ]
    assert [resync_finds_the_same(base, changed(c)) for c in same] == [True] * len(same)
    assert [resync_finds_the_same(base, changed(c)) for c in other] == [False] * len(other)


def test_a_resting_service_is_passed_over_until_its_grid_point_or_a_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tailguard.reconcile import loop

    looked: list[float] = []
    real = loop.ServiceRecord.surely_not_due

    def counting(self: Any, body: Any, now: float) -> bool:
        looked.append(now)
        return bool(real(self, body, now))

    monkeypatch.setattr(loop.ServiceRecord, "surely_not_due", counting)
    harness = Harness(
        FakePrometheus(answers(load("team-a", "chat", rate=5, slow_share=0.0, running=4, waiting=0, pods=1)))
    )
    harness.add()
    assert harness.run(NOW).decided == 1
    harness.refresh()  # the decision's status comes back: a new copy
    harness.run(NOW + 1)  # looked at: its children, new before the decision, are resynced
    harness.refresh()
    harness.run(NOW + 2)  # looked at once more, a new copy again: nothing due, so it rests
    looked.clear()
    reports = [harness.run(NOW + t) for t in range(3, 15)]
    assert looked == [], "resting: the ticks pass it over without a look"
    assert [r.decided for r in reports] == [0] * 12
    assert harness.run(NOW + 15).decided == 1, "its grid point ends the rest"
    harness.refresh()
    harness.run(NOW + 16)
    looked.clear()
    resynced = count_resyncs(monkeypatch)
    harness.run(NOW + 17)
    assert (looked, resynced) == ([], [])
    harness.inventory.put_pod(_ready_pod("chat-1"))  # a child changed: resynced at the next tick
    harness.run(NOW + 18)
    assert (looked, resynced) == ([NOW + 18], [NOW + 18])


def test_a_service_is_left_to_its_spec_handler_until_its_first_reconcile() -> None:
    harness = Harness(
        FakePrometheus(
            answers(load("team-a", "chat", rate=40, slow_share=0.2, running=250, waiting=60, pods=1))
        )
    )
    harness.add(autoscaling={"maxReplicas": 8})
    view = harness.inventory.view(("team-a", "chat"))
    assert view is not None
    reconciled = copy.deepcopy(view.body)
    fresh = copy.deepcopy(view.body)
    del fresh["status"]  # as created: the handler has not written its first status yet
    harness.inventory.put_service(fresh)
    statuses_before = len(harness.cluster.status_patches)
    for tick in (NOW, NOW + 15, NOW + 31):  # a decision's tick and a resync's
        report = harness.run(tick)
        assert (report.unreconciled, report.decided, report.queued) == (1, 0, 0), tick
    assert len(harness.cluster.status_patches) == statuses_before
    assert harness.events == []
    assert harness.deployment_replicas() == 1

    harness.inventory.put_service(reconciled)  # the handler's status arrives through the watch
    report = harness.run(NOW + 45)
    assert (report.unreconciled, report.decided) == (0, 1)
    assert harness.deployment_replicas() > 1


def test_an_invalid_spec_is_still_reported_by_the_resync() -> None:
    harness = Harness(FakePrometheus())
    harness.add(autoscaling={"mode": "Manual"})
    view = harness.inventory.view(("team-a", "chat"))
    assert view is not None
    body = copy.deepcopy(view.body)
    body["spec"]["autoscaling"]["minReplicas"] = -5
    harness.inventory.put_service(body)
    harness.cluster.add(body)
    harness.run(NOW + 31)
    assert _condition(harness.status(), "InvalidSpec") == ("True", "ValidationFailed")


def test_steady_cycles_write_nothing() -> None:
    loads = [
        load("team-a", f"svc-{i}", rate=2, slow_share=0.0, running=3, waiting=0, pods=1) for i in range(5)
    ]
    harness = Harness(FakePrometheus(answers(*loads)))
    for i in range(5):
        harness.add(f"svc-{i}")
    first = harness.run(NOW)
    assert first.writes >= 5
    for i in range(5):
        harness.refresh(f"svc-{i}")
    # Same figures 15 s later: nothing changed that a reader needs, so nothing is written.
    assert harness.run(NOW + 15).writes == 0


def test_a_pod_change_reaches_status_at_the_next_tick() -> None:
    harness = Harness(FakePrometheus())
    harness.add(autoscaling={"mode": "Manual"}, ready=0)
    harness.run(NOW)
    harness.inventory.put_pod(_ready_pod("chat-0"))
    deployment = harness.cluster.get("apps/v1", "Deployment", "team-a", "chat")
    assert deployment is not None
    deployment["status"] = {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1, "observedGeneration": 1}
    harness.inventory.put_deployment(deployment)
    harness.run(NOW + 1)
    assert harness.status()["readyReplicas"] == 1


def test_the_specs_scale_down_window_reaches_the_policy() -> None:
    from tailguard.api import parse_inference_service
    from tailguard.reconcile.adapt import policy_config
    from tg_testing import manifest

    config = policy_config(
        parse_inference_service(manifest(autoscaling={"scaleDownStabilizationSeconds": 30})),
        rate_window_s=120.0,
        burst_window_s=30.0,
    )
    assert config.scale_down_stabilization_s == 30


def test_the_policy_reasons_over_the_window_the_rates_are_read_over(monkeypatch: pytest.MonkeyPatch) -> None:
    from tailguard import policy

    seen: list[tuple[float, float]] = []
    decide = policy.decide

    def spy(config: policy.PolicyConfig, *args: Any) -> Any:
        seen.append((config.rate_window_s, config.burst_window_s))
        return decide(config, *args)

    monkeypatch.setattr(policy, "decide", spy)
    harness = Harness(FakePrometheus())
    harness.loop.scope = QueryScope(rate_window="10s", burst_window="4s")
    harness.add()
    harness.run()
    assert seen == [(10.0, 4.0)]


def test_the_decision_message_follows_a_material_move_of_the_load() -> None:
    fake = FakePrometheus(
        answers(load("team-a", "chat", rate=2, slow_share=0.0, running=3, waiting=0, pods=1))
    )
    harness = Harness(fake)
    harness.add(autoscaling={"maxReplicas": 8})
    harness.run(NOW)
    harness.refresh()
    assert "load 2.0 req/s" in harness.status()["lastDecision"]["message"]
    fake.answers = answers(load("team-a", "chat", rate=2.1, slow_share=0.0, running=3, waiting=0, pods=1))
    assert harness.run(NOW + 15).writes == 0, "a wobble of the load is not news"
    harness.refresh()
    fake.answers = answers(load("team-a", "chat", rate=10, slow_share=0.0, running=14, waiting=0, pods=1))
    assert harness.run(NOW + 30).writes == 1
    assert "load 10.0 req/s" in harness.status()["lastDecision"]["message"]


def test_services_with_the_same_interval_share_one_reading() -> None:
    fake = FakePrometheus()
    harness = Harness(fake)
    harness.add("early")
    assert harness.run(NOW + 1).decided == 1
    harness.add("late")
    assert harness.run(NOW + 6).decided == 1, "a new service decides at once"
    assert harness.run(NOW + 11).decided == 0
    reads_before = len(fake.queries)
    assert harness.run(NOW + 16).decided == 2, "both are on the 15 s grid from now on"
    assert len(fake.queries) - reads_before == len(Signal), "one reading for both"
    assert [harness.run(NOW + t).decided for t in (21, 26, 31)] == [0, 0, 2]


def _harness_whose_cluster_holds_the_service(fake: FakePrometheus) -> tuple[Harness, dict[str, Any]]:
    """A service at version 1, held whole by the API server as the watch showed it."""
    harness = Harness(fake)
    harness.add(autoscaling={"maxReplicas": 8})
    view = harness.inventory.view(("team-a", "chat"))
    assert view is not None
    body = copy.deepcopy(view.body)
    body["metadata"]["resourceVersion"] = "1"
    harness.cluster.add(body)
    harness.inventory.put_service(body)
    return harness, body


def test_the_next_decision_starts_from_what_the_last_write_left_not_from_a_lagging_watch() -> None:
    fake = FakePrometheus(
        answers(load("team-a", "chat", rate=2, slow_share=0.0, running=3, waiting=0, pods=1))
    )
    harness, body = _harness_whose_cluster_holds_the_service(fake)
    first = harness.run(NOW)
    assert first.writes > 0
    live = harness.cluster.get("tailguard.dev/v1alpha1", "InferenceService", "team-a", "chat")
    assert live is not None
    assert live["metadata"]["resourceVersion"] != "1"
    # No watch event has arrived; the inventory holds the object as the writes left it.
    view = harness.inventory.view(("team-a", "chat"))
    assert view is not None
    assert view.body["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]
    assert view.body["status"] == live["status"]
    # The load moves: the next decision's status write lands instead of conflicting.
    fake.answers = answers(load("team-a", "chat", rate=40, slow_share=0.2, running=250, waiting=60, pods=1))
    statuses = len(harness.cluster.status_patches)
    second = harness.run(NOW + 15)
    assert (second.decided, second.errors) == (1, [])
    assert len(harness.cluster.status_patches) > statuses, "written, not refused as a conflict"
    assert harness.deployment_replicas() > 1
    # The watch then delivers the first write's older version: it does not replace the newer one.
    stale = copy.deepcopy(body)
    stale["metadata"]["resourceVersion"] = "2"
    harness.inventory.put_service(stale)
    view = harness.inventory.view(("team-a", "chat"))
    assert view is not None
    assert view.body["metadata"]["resourceVersion"] != "2"


def test_a_spec_change_the_watch_delivers_before_a_writes_answer_is_handled_stands() -> None:
    fake = FakePrometheus(
        answers(load("team-a", "chat", rate=40, slow_share=0.2, running=250, waiting=60, pods=1))
    )
    harness, _ = _harness_whose_cluster_holds_the_service(fake)
    user_changes: list[int] = []

    def then_the_user_changes_the_spec(write: Any) -> Any:
        def landed_then_watched(*args: Any, **kwargs: Any) -> Any:
            answer = write(*args, **kwargs)
            # The watch delivers the write, then the user's change of the spec, both before the
            # loop handles the write's answer (on the event loop, after this thread returns).
            harness.inventory.put_service(copy.deepcopy(answer))
            live = harness.cluster.objects[("tailguard.dev/v1alpha1", "InferenceService", "team-a", "chat")]
            user_changes.append(len(user_changes) + 5)
            live["spec"]["autoscaling"]["maxReplicas"] = user_changes[-1]
            live["metadata"]["resourceVersion"] = str(int(live["metadata"]["resourceVersion"]) + 1)
            harness.inventory.put_service(copy.deepcopy(live))
            return answer

        return landed_then_watched

    harness.cluster.patch_status = then_the_user_changes_the_spec(harness.cluster.patch_status)  # type: ignore[method-assign]
    harness.cluster.patch_metadata = then_the_user_changes_the_spec(harness.cluster.patch_metadata)  # type: ignore[method-assign]
    assert harness.run(NOW).writes > 0
    assert user_changes, "something was written"
    live = harness.cluster.get("tailguard.dev/v1alpha1", "InferenceService", "team-a", "chat")
    view = harness.inventory.view(("team-a", "chat"))
    assert live is not None
    assert view is not None
    assert view.body["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]
    assert view.body["spec"]["autoscaling"]["maxReplicas"] == user_changes[-1], "not undone by an answer"


def test_after_a_conflict_the_next_decision_waits_for_the_fresh_copy() -> None:
    harness, stale = _harness_with_a_stale_copy()
    assert harness.run(NOW).writes == 0, "the stale copy's write conflicts"
    assert harness.run(NOW + 1).decided == 0, "the same stale copy would only conflict again"
    fresh = harness.cluster.get("tailguard.dev/v1alpha1", "InferenceService", "team-a", "chat")
    assert fresh is not None
    body = copy.deepcopy(stale)
    body["metadata"]["resourceVersion"] = fresh["metadata"]["resourceVersion"]
    harness.inventory.put_service(body)  # the watch delivers the object as it now is
    report = harness.run(NOW + 2)
    assert (report.decided, report.writes > 0) == (1, True)
    assert harness.deployment_replicas() > 1


class _ApiAnswerError(Exception):
    def __init__(self, status: int, body: str = "") -> None:
        super().__init__(f"({status}) {body}")
        self.status = status
        self.body = body


@pytest.mark.parametrize(
    ("exc", "gone"),
    [
        pytest.param(_ApiAnswerError(404, "not found"), True, id="deleted meanwhile"),
        pytest.param(
            _ApiAnswerError(
                403, "unable to create new content in namespace x because it is being terminated"
            ),
            True,
            id="namespace terminating",
        ),
        pytest.param(_ApiAnswerError(403, "cannot patch resource"), False, id="RBAC refusal"),
        pytest.param(_ApiAnswerError(500, "boom"), False, id="server error"),
        pytest.param(ValueError("bug"), False, id="a bug"),
    ],
)
def test_a_race_with_a_deletion_is_no_failure(exc: Exception, gone: bool) -> None:
    from tailguard.reconcile.loop import _gone

    assert _gone(exc) is gone


class GatedCluster(FakeCluster):
    """An API server that answers writes only once the test opens the gate (open at first)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.gate.set()
        #: Set when a write has reached the cluster (and waits at the gate if it is closed).
        self.reached = threading.Event()

    def close(self) -> None:
        """Writes from now on wait for the gate; ``reached`` tells when the first one arrives."""
        self.reached.clear()
        self.gate.clear()

    def _wait(self) -> None:
        self.reached.set()
        assert self.gate.wait(10), "the gate was never opened"

    def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        self._wait()
        return super().apply(manifest)

    def patch_status(self, *args: Any, **kwargs: Any) -> None:
        self._wait()
        super().patch_status(*args, **kwargs)

    def patch_metadata(self, *args: Any, **kwargs: Any) -> None:
        self._wait()
        super().patch_metadata(*args, **kwargs)


def _hot(svc: str = "chat", at: float = NOW) -> dict[Signal, list[dict[str, Any]]]:
    return _sampled(load("team-a", svc, rate=40, slow_share=0.2, running=250, waiting=60, pods=1), at)


def _quiet(svc: str = "chat", at: float = NOW) -> dict[Signal, list[dict[str, Any]]]:
    return _sampled(load("team-a", svc, rate=2, slow_share=0.0, running=3, waiting=0, pods=1), at)


def _sampled(answers: dict[Signal, list[dict[str, Any]]], at: float) -> dict[Signal, list[dict[str, Any]]]:
    """The same answers, with the newest sample 5 s before ``at`` (fresh at ``at``)."""
    return {
        **answers,
        Signal.LAST_SAMPLE: [{**s, "value": [at, str(at - 5)]} for s in answers[Signal.LAST_SAMPLE]],
    }


async def _reached(cluster: GatedCluster) -> None:
    assert await asyncio.to_thread(cluster.reached.wait, 5), "no write reached the cluster"


def _sample(harness: Harness, name: str, **labels: str) -> float:
    value = harness.telemetry.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


class _Blocker:
    """A write (for a service of its own unless told) that holds a writer until released."""

    def __init__(self, harness: Harness, name: str = "blocker") -> None:
        self.release = threading.Event()
        self.started = threading.Event()
        harness.loop.writes.submit(Write(("team-a", name), Priority.ACT, self._run, lambda outcome: None))

    def _run(self) -> int:
        self.started.set()
        assert self.release.wait(10), "the blocker was never released"
        return 0

    async def running(self) -> None:
        assert await asyncio.to_thread(self.started.wait, 5), "the blocker never started"


async def test_the_cycle_returns_before_its_writes_land() -> None:
    cluster = GatedCluster()
    harness = Harness(FakePrometheus(answers(_hot())), cluster=cluster)
    harness.add(autoscaling={"maxReplicas": 8})
    cluster.close()  # the API server is slow from now on
    report = await asyncio.wait_for(harness.loop.run_once(NOW), timeout=5)
    assert (report.decided, report.queued, report.writes) == (1, 1, 0)
    await _reached(cluster)
    assert _sample(harness, "tailguard_writes_in_flight") == 1
    assert harness.deployment_replicas() == 1
    assert "lastDecision" not in harness.status()
    cluster.gate.set()
    await harness.loop.flush()
    assert report.writes >= 3, "status, policy state and Deployment, counted as they landed"
    assert harness.deployment_replicas() > 1
    assert [note.reason for _, note in harness.events] == ["Scaled"]
    assert _sample(harness, "tailguard_writes_in_flight") == 0
    assert _sample(harness, "tailguard_write_latency_seconds_count", priority="act") == 1


async def test_a_service_whose_write_has_not_landed_is_not_decided_again() -> None:
    from tailguard import policy

    decided: list[float] = []
    decide = policy.decide

    def counting(config: policy.PolicyConfig, state: Any, obs: Any, now: float) -> Any:
        decided.append(now)
        return decide(config, state, obs, now)

    cluster = GatedCluster()
    harness = Harness(FakePrometheus(answers(_hot())), cluster=cluster)
    harness.add(autoscaling={"maxReplicas": 8})
    cluster.close()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(policy, "decide", counting)
        await harness.loop.run_once(NOW)
        await _reached(cluster)
        later = await harness.loop.run_once(NOW + 15)
        assert (later.decided, later.deferred) == (0, 1), "its record is stale until the write lands"
        assert _sample(harness, "tailguard_decisions_deferred_total") == 1
        cluster.gate.set()
        await harness.loop.flush()
        harness.refresh()
        again = await harness.loop.run_once(NOW + 16)
        await harness.loop.flush()
    assert again.decided == 1, "due again at the next tick once the write landed"
    assert decided == [NOW, NOW + 16]
    assert len([n for _, n in harness.events if n.reason == "Scaled"]) == 1


async def test_acting_writes_go_before_periodic_refreshes() -> None:
    fake = FakePrometheus(answers(_quiet("quiet"), _quiet("hot")))
    harness = Harness(fake, writers=1)
    harness.add("quiet", autoscaling={"maxReplicas": 8})
    harness.add("hot", autoscaling={"maxReplicas": 8})
    await harness.loop.run_once(NOW)
    await harness.loop.flush()
    harness.refresh("quiet")
    harness.refresh("hot")
    harness.cluster.status_patches.clear()
    fake.answers = answers(_quiet("quiet", NOW + 90), _hot("hot", NOW + 90))
    blocker = _Blocker(harness)
    await blocker.running()
    # A minute and a half on, the quiet service's figures are due their refresh; the hot one scales.
    report = await harness.loop.run_once(NOW + 90)
    assert report.queued == 2
    quiet, hot = (
        harness.loop.writes.queued(("team-a", "quiet")),
        harness.loop.writes.queued(("team-a", "hot")),
    )
    assert quiet is not None
    assert hot is not None
    assert (quiet.priority, hot.priority) == (Priority.REFRESH, Priority.ACT)
    assert _sample(harness, "tailguard_write_queue_depth", priority="refresh") == 1
    blocker.release.set()
    await harness.loop.flush()
    assert [name for _, name, _ in harness.cluster.status_patches] == ["hot", "quiet"]
    assert harness.deployment_replicas("hot") > 1


async def test_a_refresh_still_queued_is_replaced_by_the_next_decision() -> None:
    fake = FakePrometheus(answers(_quiet()))
    harness = Harness(fake, writers=1)
    harness.add(autoscaling={"maxReplicas": 8})
    await harness.loop.run_once(NOW)
    await harness.loop.flush()
    harness.refresh()
    harness.cluster.status_patches.clear()
    blocker = _Blocker(harness)
    await blocker.running()
    fake.answers = answers(_quiet(at=NOW + 90))
    first = await harness.loop.run_once(NOW + 90)
    assert (first.decided, first.queued, first.backlog) == (1, 1, 1)
    queued = harness.loop.writes.queued(("team-a", "chat"))
    assert queued is not None
    assert queued.priority is Priority.REFRESH
    fake.answers = answers(_quiet(at=NOW + 105))
    second = await harness.loop.run_once(NOW + 105)
    assert (second.decided, second.coalesced, second.backlog) == (1, 1, 1), "one write queued per service"
    blocker.release.set()
    await harness.loop.flush()
    assert len(harness.cluster.status_patches) == 1, "the replaced refresh is never written"
    assert harness.status()["lastDecision"]["time"] == iso(NOW + 105), "the latest wins"
    assert (first.writes, second.writes) == (0, 1)
    assert _sample(harness, "tailguard_writes_coalesced_total") == 1


async def test_shutdown_lands_the_acting_writes_still_queued() -> None:
    fake = FakePrometheus(answers(_hot("a"), _hot("b")))
    cluster = GatedCluster()
    harness = Harness(fake, cluster=cluster, writers=1)
    harness.add("a", autoscaling={"maxReplicas": 8})
    harness.add("b", autoscaling={"maxReplicas": 8})
    harness.loop.clock = lambda: NOW
    cluster.close()
    stop = asyncio.Event()
    running = asyncio.ensure_future(harness.loop.run_forever(stop))
    await _reached(cluster)  # one service's write is in flight, the other's queued behind it
    assert harness.loop.writes.depth == 1
    stop.set()
    asyncio.get_running_loop().call_later(0.2, cluster.gate.set)  # the API server answers late
    await asyncio.wait_for(running, timeout=10)
    assert min(harness.deployment_replicas("a"), harness.deployment_replicas("b")) > 1
    assert sorted(name for name, n in harness.events if n.reason == "Scaled") == ["a", "b"]


def test_a_resync_whose_status_write_conflicts_still_posts_the_events_of_its_writes() -> None:
    harness = Harness(FakePrometheus())
    harness.add(autoscaling={"mode": "Manual"})
    deployment = harness.cluster.get("apps/v1", "Deployment", "team-a", "chat")
    assert deployment is not None
    deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "someone/else:latest"
    harness.cluster.add(deployment)
    harness.inventory.put_deployment(deployment)  # the watch saw the hand edit: resynced at once
    # Status was written meanwhile by someone else: the inventory's copy is older than the object.
    harness.cluster.patch_status(ISVC[0], ISVC[1], "team-a", "chat", {"ready": "0/1"})
    harness.cluster.status_patches.clear()
    view = harness.inventory.view(("team-a", "chat"))
    assert view is not None
    body = copy.deepcopy(view.body)
    body["metadata"]["resourceVersion"] = "0"
    body["status"]["readyReplicas"] = 7  # a figure the resync's status patch corrects
    harness.inventory.put_service(body)
    conflicts: list[str] = []
    patch_status = harness.cluster.patch_status

    def watched(*args: Any, **kwargs: Any) -> None:
        try:
            patch_status(*args, **kwargs)
        except ConflictError as exc:
            conflicts.append(str(exc))
            raise

    harness.cluster.patch_status = watched  # type: ignore[method-assign]
    report = harness.run(NOW + 1)
    assert len(conflicts) == 1, "the resync reached its status write, and it conflicted"
    assert harness.cluster.status_patches == []
    live = harness.cluster.get("apps/v1", "Deployment", "team-a", "chat")
    assert live is not None
    assert live["spec"]["template"]["spec"]["containers"][0]["image"].startswith("vllm/vllm-openai:")
    assert [note.reason for _, note in harness.events] == ["Updated"], "the revert is still told"
    assert report.writes == 1


async def test_a_decision_put_off_by_a_second_uses_the_reading_of_its_tick() -> None:
    fake = FakePrometheus(answers(_quiet("a"), _quiet("b")))
    harness = Harness(fake)
    harness.add("a")
    harness.add("b")
    await harness.loop.run_once(NOW)
    await harness.loop.flush()
    writing = _Blocker(harness, "a")  # a's write has not landed when its next decision is due
    await writing.running()
    fake.answers = answers(_quiet("a", NOW + 15), _quiet("b", NOW + 15))
    due = await harness.loop.run_once(NOW + 15)
    assert (due.decided, due.deferred, due.queries) == (1, 1, len(Signal))
    writing.release.set()
    await harness.loop.flush()
    late = await harness.loop.run_once(NOW + 16)
    await harness.loop.flush()
    assert (late.decided, late.queries) == (1, 0), "decided on the reading of NOW + 15, not a new one"
    assert len(fake.queries) == 2 * len(Signal)


def test_a_record_reads_its_children_once_per_version_of_them() -> None:
    """The workload and the other replica writers are read again for a new Deployment object and
    for a new, added or removed pod, and not for the same objects."""
    deployment: dict[str, Any] = {
        "metadata": {"name": "d"},
        "spec": {"replicas": 2},
        "status": {"readyReplicas": 1},
    }
    ready = {"metadata": {"name": "p1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    starting = {"metadata": {"name": "p2"}, "status": {"phase": "Running"}}
    record = ServiceRecord(resynced_at=0.0)
    workload, writers = record.children(ServiceView(body={}, deployment=deployment, pods={"p1": ready}))
    assert (workload.ready, workload.starting, writers) == (1, 0, [])
    again, _ = record.children(ServiceView(body={}, deployment=deployment, pods={"p1": ready}))
    assert again is workload, "the same objects: the same reading"
    more, _ = record.children(ServiceView(body={}, deployment=deployment, pods={"p1": ready, "p2": starting}))
    assert more.starting == 1, "a pod added"
    scaled = copy.deepcopy(deployment)
    scaled["status"]["readyReplicas"] = 2
    scaled["metadata"]["managedFields"] = [{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:replicas": {}}}}]
    workload, writers = record.children(
        ServiceView(body={}, deployment=scaled, pods={"p1": ready, "p2": starting})
    )
    assert (workload.ready, writers) == (2, ["kubectl"]), "a new Deployment object"
    fewer, _ = record.children(ServiceView(body={}, deployment=scaled, pods={"p2": starting}))
    assert fewer is not workload, "a pod removed"
