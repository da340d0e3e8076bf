"""The stalled-rollout repair: acts on the exact signature only, and writes the controller's own mark."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from tailguard.k8s.cluster import FakeCluster
from tailguard.k8s.labels import selector_labels
from tailguard.reconcile.rollout_repair import (
    DESIRED_REPLICAS,
    looks_stalled,
    repair_stalled_rollout,
    stale_marks,
)

NAME, NS, UID = "llama", "serving", "dep-uid"


def _deployment(
    replicas: int = 2, ready: int = 2, updated: int = 0, generation: int = 5, observed: int = 5
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": NAME, "namespace": NS, "uid": UID, "generation": generation},
        "spec": {"replicas": replicas},
        "status": {
            "observedGeneration": observed,
            "replicas": ready,
            "readyReplicas": ready,
            "updatedReplicas": updated,
        },
    }


def _replica_set(name: str, replicas: int, mark: str | None, owner: str = UID) -> dict[str, Any]:
    annotations = {} if mark is None else {DESIRED_REPLICAS: mark}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": dict(selector_labels(NAME)),
            "annotations": annotations,
            "ownerReferences": [{"kind": "Deployment", "name": NAME, "uid": owner}],
        },
        "spec": {"replicas": replicas},
    }


@dataclass(frozen=True)
class Case:
    id: str
    deployment: dict[str, Any]
    replica_sets: list[dict[str, Any]]
    repaired: list[str]


CASES = [
    Case(
        "one active set of the old template at the wanted count, marked for the old count: repaired",
        _deployment(),
        [_replica_set("llama-old", 0, "3"), _replica_set("llama-mid", 2, "3")],
        ["llama-mid"],
    ),
    Case("the mark already right: nothing", _deployment(), [_replica_set("llama-mid", 2, "2")], []),
    Case(
        "a rollout under way (two sets with pods): nothing",
        _deployment(),
        [_replica_set("llama-old", 1, "3"), _replica_set("llama-new", 1, "3")],
        [],
    ),
    Case(
        "the controller has not seen the latest spec yet: nothing",
        _deployment(generation=6, observed=5),
        [_replica_set("llama-mid", 2, "3")],
        [],
    ),
    Case(
        "every pod already runs the current template: nothing",
        _deployment(updated=2),
        [_replica_set("llama-mid", 2, "3")],
        [],
    ),
    Case(
        "pods not all ready (a rollout moving): nothing",
        _deployment(ready=1),
        [_replica_set("llama-mid", 2, "3")],
        [],
    ),
    Case(
        "a set another Deployment owns: nothing",
        _deployment(),
        [_replica_set("llama-mid", 2, "3", owner="other")],
        [],
    ),
    Case("a set without the mark: nothing", _deployment(), [_replica_set("llama-mid", 2, None)], []),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_only_the_stall_signature_is_repaired(case: Case) -> None:
    api = FakeCluster()
    for rs in case.replica_sets:
        api.add(rs)
    marks = repair_stalled_rollout(api, case.deployment, NAME)
    assert [m.name for m in marks] == case.repaired, marks
    for rs in case.replica_sets:
        name = rs["metadata"]["name"]
        live = api.get("apps/v1", "ReplicaSet", NS, name)
        assert live is not None
        mark = live["metadata"]["annotations"].get(DESIRED_REPLICAS)
        expected = "2" if name in case.repaired else rs["metadata"]["annotations"].get(DESIRED_REPLICAS)
        assert mark == expected, (name, mark, expected)


def test_the_mark_written_is_the_deployments_replica_count() -> None:
    marks = stale_marks(_deployment(replicas=4, ready=4), [_replica_set("llama-mid", 4, "6")])
    assert [(m.name, m.marked, m.wanted) for m in marks] == [("llama-mid", "6", 4)]


@pytest.mark.parametrize(
    ("deployment", "stalled"),
    [
        (_deployment(), True),
        (_deployment(replicas=0, ready=0), False),
        (_deployment(updated=2), False),
        ({"metadata": {}, "spec": {}}, False),
    ],
    ids=["stalled", "scaled to zero", "up to date", "no status yet"],
)
def test_looks_stalled_reads_the_deployment_alone(deployment: dict[str, Any], stalled: bool) -> None:
    assert looks_stalled(deployment) is stalled
