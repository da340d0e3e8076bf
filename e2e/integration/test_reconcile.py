"""The operator (``tailguard run`` as its own ServiceAccount) reconciling against the real cluster.

Pods run on kwok's fake GPU nodes: scheduled by the real scheduler against ``nvidia.com/gpu``
capacity, marked Running and Ready by kwok, so replica counts, Pending pods and garbage collection
behave as on a GPU cluster, without any GPU or image.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from lib.kube import Kube, condition, owner_uids
from lib.operator import OperatorProcess
from lib.testbed import Testbed
from lib.wait import stays, wait_for

pytestmark = pytest.mark.integration

ISVC = ("tailguard.dev/v1alpha1", "InferenceService")
DEPLOYMENT = ("apps/v1", "Deployment")
SERVICE = ("v1", "Service")
SERVICE_LABEL = "tailguard.dev/inference-service"
GPU = "nvidia.com/gpu"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
#: The operator refreshes a service's status on its resync (about every 30 s for pod-only changes).
STATUS_TIMEOUT = 90


def _prepare_dependencies(kube: Kube, namespace: str, manifest: dict[str, Any]) -> None:
    """What an example expects to exist: its hub-token Secret and, for a model cache, a bound PVC."""
    model = manifest["spec"]["model"]
    if ref := model.get("tokenSecretRef"):
        kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": ref["name"]},
                "stringData": {ref.get("key", "token"): "hf_dummy"},
            },
            namespace,
        )
    if cache := model.get("cache"):
        pv = f"{namespace}-{cache['claimName']}"
        kube.apply(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": pv},
                "spec": {
                    "capacity": {"storage": "500Gi"},
                    "accessModes": ["ReadOnlyMany"],
                    "storageClassName": "",
                    "persistentVolumeReclaimPolicy": "Delete",
                    "hostPath": {"path": "/tmp/model-cache"},
                    "claimRef": {"namespace": namespace, "name": cache["claimName"]},
                },
            }
        )
        kube.apply(
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": cache["claimName"]},
                "spec": {
                    "accessModes": ["ReadOnlyMany"],
                    "storageClassName": "",
                    "volumeName": pv,
                    "resources": {"requests": {"storage": "500Gi"}},
                },
            },
            namespace,
        )


def _create(kube: Kube, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    manifest = copy.deepcopy(manifest)
    _prepare_dependencies(kube, namespace, manifest)
    kube.kubectl("apply", "-f", "-", input=json.dumps(manifest), namespace=namespace)
    obj = kube.get(*ISVC, manifest["metadata"]["name"], namespace)
    assert obj is not None
    return obj


def _isvc(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    obj = kube.get(*ISVC, name, namespace)
    assert obj is not None, f"InferenceService {namespace}/{name} disappeared"
    return obj


def _status(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return _isvc(kube, namespace, name).get("status") or {}


def _pods(kube: Kube, namespace: str, name: str) -> list[dict[str, Any]]:
    return kube.list("v1", "Pod", namespace, labels={SERVICE_LABEL: name})


def _running_ready(pod: dict[str, Any]) -> bool:
    ready = condition(pod, "Ready")
    return (
        (pod.get("status") or {}).get("phase") == "Running"
        and ready is not None
        and ready["status"] == "True"
    )


def _wait_children(kube: Kube, namespace: str, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    def both() -> tuple[dict[str, Any], dict[str, Any]] | None:
        dep = kube.get(*DEPLOYMENT, name, namespace)
        svc = kube.get(*SERVICE, name, namespace)
        return (dep, svc) if dep and svc else None

    return wait_for(
        f"Deployment and Service {namespace}/{name} created by the operator",
        both,
        timeout=30,
        details=lambda: kube.describe_namespace(namespace),
    )


def _manual(manifest: dict[str, Any], replicas: int, **resources: Any) -> dict[str, Any]:
    """The manifest in mode Manual with a fixed replica count (no metrics needed to size it)."""
    m = copy.deepcopy(manifest)
    m["spec"]["replicas"] = replicas
    m["spec"].setdefault("autoscaling", {})["mode"] = "Manual"
    m["spec"].setdefault("resources", {}).update(resources)
    return m


def _expected_replicas(manifest: dict[str, Any]) -> int:
    spec = manifest["spec"]
    autoscaling = spec.get("autoscaling") or {}
    if autoscaling.get("mode", "Auto") == "Auto":
        return int(autoscaling.get("minReplicas", 1))
    return int(spec.get("replicas", 1))


@pytest.mark.parametrize("example", ["llama-8b-chat", "llama-70b", "qwen-8b-dryrun"])
def test_example_gets_a_deployment_and_service_it_owns(
    kube: Kube, namespace: str, operator: OperatorProcess, examples: dict[str, dict[str, Any]], example: str
) -> None:
    manifest = examples[example]
    isvc = _create(kube, namespace, manifest)
    dep, svc = _wait_children(kube, namespace, example)

    for child in (dep, svc):
        refs = child["metadata"].get("ownerReferences") or []
        assert len(refs) == 1, refs
        ref = refs[0]
        assert (ref["apiVersion"], ref["kind"], ref["name"]) == (*ISVC, example)
        assert ref["uid"] == isvc["metadata"]["uid"]
        assert ref.get("controller") is True
        assert ref.get("blockOwnerDeletion") is True
        assert child["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "tailguard"

    spec = manifest["spec"]
    assert dep["spec"]["replicas"] == _expected_replicas(manifest)
    pod_spec = dep["spec"]["template"]["spec"]
    (container,) = [c for c in pod_spec["containers"] if c["name"] == "vllm"]
    gpus = str(spec.get("resources", {}).get("gpus", 1))
    assert container["resources"]["limits"][GPU] == gpus
    assert container["resources"]["requests"][GPU] == gpus
    assert spec["model"]["name"] in container["args"]
    tp = str(spec.get("engine", {}).get("tensorParallelSize", 1))
    assert container["args"][container["args"].index("--tensor-parallel-size") + 1] == tp
    if node_selector := spec.get("resources", {}).get("nodeSelector"):
        assert pod_spec["nodeSelector"] == node_selector

    selector = svc["spec"]["selector"]
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items(), "the Service must select the Deployment's pods"
    assert dep["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert [p["port"] for p in svc["spec"]["ports"]] == [8000]


def test_pods_land_on_fake_gpu_nodes_and_status_follows(
    kube: Kube,
    namespace: str,
    operator: OperatorProcess,
    examples: dict[str, dict[str, Any]],
    testbed: Testbed,
) -> None:
    name = "llama-8b-chat"
    _create(kube, namespace, _manual(examples[name], 3))

    def ready_pods() -> list[dict[str, Any]] | None:
        pods = [p for p in _pods(kube, namespace, name) if _running_ready(p)]
        return pods if len(pods) == 3 else None

    pods = wait_for(
        "3 vLLM pods Running and Ready",
        ready_pods,
        timeout=60,
        details=lambda: kube.describe_namespace(namespace),
    )
    gpu_nodes = set(testbed.gpu_node_names())
    assert {p["spec"]["nodeName"] for p in pods} <= gpu_nodes

    def status_caught_up() -> dict[str, Any] | None:
        status = _status(kube, namespace, name)
        ready = condition({"status": status}, "Ready")
        ok = status.get("readyReplicas") == 3 and ready is not None and ready["status"] == "True"
        return status if ok else None

    status = wait_for(
        "status.readyReplicas == 3 and Ready=True",
        status_caught_up,
        timeout=STATUS_TIMEOUT,
        details=lambda: json.dumps(_status(kube, namespace, name), indent=2),
    )
    assert status["ready"] == "3/3"
    assert status["replicas"] == 3
    # The example names no image: the operator's default, reported in status, is what the pods run.
    assert {p["spec"]["containers"][0]["image"] for p in pods} == {status["image"]}
    assert status.get("pendingReplicas", 0) == 0


def test_more_gpus_than_the_cluster_has_leaves_pods_pending_and_says_so(
    kube: Kube,
    namespace: str,
    operator: OperatorProcess,
    examples: dict[str, dict[str, Any]],
    testbed: Testbed,
) -> None:
    name = "llama-8b-chat"
    capacity = testbed.gpus_by_node()
    per_node = max(capacity.values())
    nodes = sum(1 for g in capacity.values() if g >= per_node)
    replicas = nodes + 1  # a whole (largest) node's GPUs each: the last replica fits nowhere
    m = _manual(examples[name], replicas, gpus=per_node)
    m["spec"]["engine"] = {**m["spec"].get("engine", {}), "tensorParallelSize": 1}
    _create(kube, namespace, m)

    def reports_unschedulable() -> dict[str, Any] | None:
        status = _status(kube, namespace, name)
        ready = condition({"status": status}, "Ready")
        if (
            ready
            and ready["status"] == "False"
            and ready["reason"] == "Unschedulable"
            # exactly the one that fits nowhere (pods kwok has not started yet count until it does)
            and status.get("pendingReplicas") == 1
        ):
            return status
        return None

    status = wait_for(
        f"Ready=False reason=Unschedulable with {replicas} replicas of {per_node} GPUs on {nodes} nodes",
        reports_unschedulable,
        timeout=STATUS_TIMEOUT,
        details=lambda: (
            json.dumps(_status(kube, namespace, name), indent=2) + "\n" + kube.describe_namespace(namespace)
        ),
    )
    assert status["pendingReplicas"] == 1
    assert status["readyReplicas"] <= nodes
    message = condition({"status": status}, "Ready")["message"]  # type: ignore[index]
    assert GPU in message, f"the condition should name the missing resource: {message!r}"
    pending = wait_for(
        "one pod Pending (the others started)",
        lambda: (
            found
            if len(
                found := [p for p in _pods(kube, namespace, name) if p["status"].get("phase") == "Pending"]
            )
            == 1
            else None
        ),
        timeout=STATUS_TIMEOUT,
        details=lambda: kube.describe_namespace(namespace),
    )
    scheduled = condition(pending[0], "PodScheduled")
    assert scheduled is not None
    assert scheduled["reason"] == "Unschedulable"


def test_kubectl_scale_in_mode_off_resizes_the_deployment(
    kube: Kube, namespace: str, operator: OperatorProcess, examples: dict[str, dict[str, Any]]
) -> None:
    name = "llama-8b-chat"
    _create(kube, namespace, _manual(examples[name], 1))
    _wait_children(kube, namespace, name)
    kube.kubectl("scale", f"inferenceservice/{name}", "--replicas=2", namespace=namespace)
    wait_for(
        "the Deployment to follow kubectl scale to 2 replicas",
        lambda: (kube.get(*DEPLOYMENT, name, namespace) or {}).get("spec", {}).get("replicas") == 2,
        timeout=30,
        details=lambda: kube.describe_namespace(namespace),
    )
    wait_for(
        "status.readyReplicas == 2",
        lambda: _status(kube, namespace, name).get("readyReplicas") == 2,
        timeout=STATUS_TIMEOUT,
        details=lambda: json.dumps(_status(kube, namespace, name), indent=2),
    )
    scale = kube.kubectl_json("get", f"inferenceservice/{name}", "--subresource=scale", namespace=namespace)
    assert scale["spec"]["replicas"] == 2
    assert scale["status"]["replicas"] == 2
    assert scale["status"]["selector"] == f"{SERVICE_LABEL}={name}"


def _template_seqs(obj: dict[str, Any]) -> str | None:
    """The ``--max-num-seqs`` of a Deployment's template or of a pod."""
    spec = obj.get("spec") or {}
    pod_spec = (spec.get("template") or {}).get("spec") or spec
    args = [str(a) for a in (pod_spec.get("containers") or [{}])[0].get("args") or []]
    return args[args.index("--max-num-seqs") + 1] if "--max-num-seqs" in args else None


def _running_at_max_batch_64(
    kube: Kube, namespace: str, examples: dict[str, dict[str, Any]], replicas: int
) -> str:
    """The 8B example in mode Manual at ``replicas`` and max batch 64, once every pod is Ready;
    returns its name."""
    name = "llama-8b-chat"
    manifest = _manual(examples[name], replicas)
    manifest["spec"].setdefault("engine", {})["maxNumSeqs"] = 64
    _create(kube, namespace, manifest)
    wait_for(
        f"{replicas} pods Running and Ready",
        lambda: len([p for p in _pods(kube, namespace, name) if _running_ready(p)]) == replicas,
        timeout=60,
        details=lambda: kube.describe_namespace(namespace),
    )
    return name


def test_a_spec_changed_mid_rollout_converges_to_the_last_spec(
    kube: Kube, namespace: str, operator: OperatorProcess, examples: dict[str, dict[str, Any]]
) -> None:
    name = _running_at_max_batch_64(kube, namespace, examples, 3)
    # Phase: a change that rolls every pod, then, while that rollout runs, two more.
    kube.patch(*ISVC, name, {"spec": {"engine": {"maxNumSeqs": 32}}}, namespace)
    wait_for(
        "the rollout to 32 to start",
        lambda: _template_seqs(kube.get(*DEPLOYMENT, name, namespace) or {}) == "32",
        timeout=30,
    )
    kube.patch(*ISVC, name, {"spec": {"engine": {"maxNumSeqs": 48}, "replicas": 2}}, namespace)

    def converged() -> bool:
        dep = kube.get(*DEPLOYMENT, name, namespace) or {}
        st = dep.get("status") or {}
        pods = _pods(kube, namespace, name)
        return (
            _template_seqs(dep) == "48"
            and (dep.get("spec") or {}).get("replicas") == 2
            and st.get("updatedReplicas") == st.get("readyReplicas") == st.get("replicas") == 2
            and len(pods) == 2
            and all(_running_ready(p) and _template_seqs(p) == "48" for p in pods)
        )

    wait_for(
        "the Deployment and every pod to carry the last spec (2 replicas, max batch 48)",
        converged,
        timeout=120,
        details=lambda: kube.describe_namespace(namespace) + "\n" + _replica_set_marks(kube, namespace, name),
    )
    wait_for(
        "status to report the last spec",
        lambda: (
            (st := _status(kube, namespace, name)).get("maxNumSeqs") == 48 and st.get("readyReplicas") == 2
        ),
        timeout=STATUS_TIMEOUT,
        details=lambda: json.dumps(_status(kube, namespace, name), indent=2),
    )
    # Settled: nothing keeps rolling (the Deployment's generation stays put).
    generation = (kube.get(*DEPLOYMENT, name, namespace) or {})["metadata"]["generation"]
    stays(
        "the Deployment's generation to stay put",
        lambda: (kube.get(*DEPLOYMENT, name, namespace) or {})["metadata"]["generation"] == generation,
        duration=10,
    )


def test_a_single_replica_serves_through_its_rollout(
    kube: Kube, namespace: str, operator: OperatorProcess, examples: dict[str, dict[str, Any]]
) -> None:
    """One replica alone rolls with a surge pod: the old pod serves until its successor is Ready.
    The new template's pod takes 3 s to be Ready (kwok's per-pod delay); replaced in place, the
    service would have no Ready pod for those 3 s (on a GPU, for the whole model load)."""
    name = _running_at_max_batch_64(kube, namespace, examples, 1)
    dep = kube.get(*DEPLOYMENT, name, namespace) or {}
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    delay = {"pod-ready.stage.kwok.x-k8s.io/delay": "3s"}
    kube.patch(*DEPLOYMENT, name, {"spec": {"template": {"metadata": {"annotations": delay}}}}, namespace)
    ready_counts: list[int] = []
    pod_counts: list[int] = []

    def rolled_out() -> bool:
        pods = _pods(kube, namespace, name)
        live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        ready_counts.append(sum(1 for p in live if _running_ready(p)))
        pod_counts.append(len(live))
        return (
            len(live) == 1
            and _running_ready(live[0])
            and (live[0]["metadata"].get("annotations") or {}).get(next(iter(delay))) == "3s"
        )

    wait_for(
        "the rollout to the new template to finish",
        rolled_out,
        timeout=60,
        interval=0.1,
        details=lambda: kube.describe_namespace(namespace),
    )
    assert min(ready_counts) == 1, ready_counts
    assert max(pod_counts) == 2, "the successor started beside the old pod"


def _replica_set_marks(kube: Kube, namespace: str, name: str) -> str:
    """Each ReplicaSet's replicas and desired-replicas mark, for failure messages."""
    rows = [
        f"{rs['metadata']['name']}: replicas {rs['spec'].get('replicas')}, marked "
        f"{(rs['metadata'].get('annotations') or {}).get(DESIRED_REPLICAS)}, max batch {_template_seqs(rs)}"
        for rs in kube.list("apps/v1", "ReplicaSet", namespace, labels={SERVICE_LABEL: name})
    ]
    return "ReplicaSets:\n  " + "\n  ".join(rows)


def test_a_rollout_the_deployment_controller_stalls_is_repaired(
    kube: Kube, namespace: str, operator: OperatorProcess, examples: dict[str, dict[str, Any]]
) -> None:
    """Kubernetes' Deployment controller takes a ReplicaSet marked for another replica count than
    its Deployment for a scaling event and only scales: with one ReplicaSet already at the count,
    nothing rewrites the mark and a new template never rolls out. The mark is set by hand here
    (what a replica count and a template changed mid-rollout can leave behind); tailguard must
    rewrite it, say so, and let the rollout finish."""
    name = _running_at_max_batch_64(kube, namespace, examples, 2)
    (only,) = [
        rs
        for rs in kube.list("apps/v1", "ReplicaSet", namespace, labels={SERVICE_LABEL: name})
        if rs["spec"].get("replicas")
    ]
    kube.patch(
        "apps/v1",
        "ReplicaSet",
        only["metadata"]["name"],
        {"metadata": {"annotations": {DESIRED_REPLICAS: "3"}}},
        namespace,
    )
    kube.patch(*ISVC, name, {"spec": {"engine": {"maxNumSeqs": 32}}}, namespace)

    def rolled_out() -> bool:
        dep = kube.get(*DEPLOYMENT, name, namespace) or {}
        pods = _pods(kube, namespace, name)
        return (
            (dep.get("status") or {}).get("updatedReplicas") == 2
            and len(pods) == 2
            and all(_running_ready(p) and _template_seqs(p) == "32" for p in pods)
        )

    wait_for(
        "the rollout to max batch 32 to finish",
        rolled_out,
        timeout=90,
        details=lambda: kube.describe_namespace(namespace) + "\n" + _replica_set_marks(kube, namespace, name),
    )
    # The Event is posted after the repair's write, and the rollout it frees may finish first.
    stalled = wait_for(
        "a RolloutStalled Event",
        lambda: [e for e in kube.list("v1", "Event", namespace) if e.get("reason") == "RolloutStalled"],
        timeout=30,
        details=lambda: str([e.get("reason") for e in kube.list("v1", "Event", namespace)]),
    )
    assert only["metadata"]["name"] in stalled[0]["message"], stalled[0]["message"]


def test_deleting_the_service_garbage_collects_its_children(
    kube: Kube, namespace: str, operator: OperatorProcess, examples: dict[str, dict[str, Any]]
) -> None:
    name = "llama-8b-chat"
    _create(kube, namespace, _manual(examples[name], 2))
    _wait_children(kube, namespace, name)
    wait_for("2 pods", lambda: len(_pods(kube, namespace, name)) == 2, timeout=30)
    kube.kubectl("delete", f"inferenceservice/{name}", "--wait=true", namespace=namespace, timeout=60)

    def all_gone() -> bool:
        return not (
            kube.get(*DEPLOYMENT, name, namespace)
            or kube.get(*SERVICE, name, namespace)
            or kube.list("apps/v1", "ReplicaSet", namespace, labels={SERVICE_LABEL: name})
            or _pods(kube, namespace, name)
        )

    wait_for(
        "Deployment, Service, ReplicaSets and pods garbage-collected",
        all_gone,
        timeout=60,
        details=lambda: kube.describe_namespace(namespace),
    )


@pytest.mark.parametrize("how", ["graceful", "crash"])
def test_restarted_operator_duplicates_nothing(
    kube: Kube, namespace: str, operator: OperatorProcess, examples: dict[str, dict[str, Any]], how: str
) -> None:
    name = "llama-8b-chat"
    _create(kube, namespace, _manual(examples[name], 2))
    _wait_children(kube, namespace, name)
    wait_for(
        "the Deployment's 2 replicas ready before the restart",
        lambda: (
            ((kube.get(*DEPLOYMENT, name, namespace) or {}).get("status") or {}).get("readyReplicas") == 2
        ),
        timeout=60,
    )

    def snapshot() -> dict[str, Any]:
        return {
            "deployments": sorted(
                (d["metadata"]["name"], d["metadata"]["uid"])
                for d in kube.list(*DEPLOYMENT, namespace, labels={SERVICE_LABEL: name})
            ),
            "services": sorted(
                (s["metadata"]["name"], s["metadata"]["uid"])
                for s in kube.list(*SERVICE, namespace, labels={SERVICE_LABEL: name})
            ),
            "replicasets": sorted(
                r["metadata"]["name"]
                for r in kube.list("apps/v1", "ReplicaSet", namespace, labels={SERVICE_LABEL: name})
            ),
            "pods": sorted(p["metadata"]["name"] for p in _pods(kube, namespace, name)),
        }

    before = snapshot()
    assert len(before["deployments"]) == 1
    assert len(before["services"]) == 1
    generation = (kube.get(*DEPLOYMENT, name, namespace) or {})["metadata"]["generation"]

    if how == "graceful":
        operator.stop()
    else:
        operator.kill()
    operator.start()
    # The restarted operator resumes every InferenceService (kopf's on.resume) and resyncs them.
    stays(
        "the same single Deployment, Service, ReplicaSet and pods",
        lambda: snapshot() == before,
        duration=10,
        details=lambda: f"before: {before}\nnow:    {snapshot()}",
    )
    dep = kube.get(*DEPLOYMENT, name, namespace)
    assert dep is not None
    assert dep["metadata"]["generation"] == generation, (
        "the restart changed the Deployment's spec (a rollout)"
    )
    assert owner_uids(dep) == {_isvc(kube, namespace, name)["metadata"]["uid"]}
    wait_for(
        "status.readyReplicas == 2 after the restart",
        lambda: _status(kube, namespace, name).get("readyReplicas") == 2,
        timeout=STATUS_TIMEOUT,
        details=lambda: json.dumps(_status(kube, namespace, name), indent=2),
    )
