"""The operator as the chart runs its image: UID 65532 with no passwd entry, HOME=/, a read-only
root filesystem and only /tmp writable. Regression guard for a start-up crash (kopf derived its
identity from ``getpass.getuser()``, which raises for a UID without a passwd entry)."""

from __future__ import annotations

import copy
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from lib.kube import Kube
from lib.operator import CHART_UID, Identity, OperatorProcess, restricted_unavailable
from lib.wait import wait_for

pytestmark = pytest.mark.integration

ISVC = ("tailguard.dev/v1alpha1", "InferenceService")


@pytest.fixture(scope="module")
def restricted_operator(
    crd: dict[str, Any], operator_identity: Identity, tmp_path_factory: pytest.TempPathFactory
) -> Any:
    why = restricted_unavailable()
    if why is not None:
        pytest.skip(f"cannot drop to UID {CHART_UID} on a read-only root here: {why}")
    log = tmp_path_factory.mktemp("restricted") / "operator.log"
    op = OperatorProcess(operator_identity, log, restricted=True, env={"POD_NAME": "tailguard-operator-0"})
    op.start()
    yield op
    op.stop()


def test_operator_reconciles_as_an_unknown_uid_on_a_read_only_root(
    restricted_operator: OperatorProcess,
    kube: Kube,
    namespace: str,
    examples: dict[str, dict[str, Any]],
) -> None:
    op = restricted_operator
    # The sandbox is what it claims: inside its namespace the process is the chart's UID.
    assert op.proc is not None
    uid_map = Path(f"/proc/{op.proc.pid}/uid_map").read_text().split()
    assert uid_map[0] == str(CHART_UID), uid_map

    manifest = copy.deepcopy(examples["qwen-8b-dryrun"])
    name = manifest["metadata"]["name"]
    kube.kubectl("apply", "-f", "-", input=json.dumps(manifest), namespace=namespace)
    deployment = wait_for(
        "the operator to create the Deployment",
        lambda: kube.get("apps/v1", "Deployment", name, namespace),
        timeout=60,
        details=op.log_tail,
    )
    assert deployment["metadata"]["ownerReferences"][0]["name"] == name
    observed = wait_for(
        "the operator to write the status",
        lambda: (kube.get(*ISVC, name, namespace) or {}).get("status", {}).get("observedGeneration"),
        timeout=60,
        details=op.log_tail,
    )
    assert observed >= 1
    with urllib.request.urlopen(op.metrics_url, timeout=5) as resp:
        assert b"tailguard_" in resp.read()
    op.assert_running()
    log = op.log_text()
    assert "Traceback" not in log, op.log_tail()
    assert "Read-only file system" not in log, op.log_tail()
    for obj in kube.list(*ISVC, namespace):
        kube.delete(*ISVC, obj["metadata"]["name"], namespace)
    wait_for("the operator to release its finalizer", lambda: not kube.list(*ISVC, namespace), timeout=30)
