"""The running size: the spec's in Manual and DryRun, the recorded intent within bounds in Auto."""

from __future__ import annotations

from typing import Any

import pytest

from tailguard.api import parse_inference_service
from tailguard.reconcile.sizing import RunningSize, running_size
from tg_testing import manifest


@pytest.mark.parametrize(
    ("autoscaling", "status", "expected"),
    [
        pytest.param(
            {"mode": "Manual"}, {"desiredReplicas": 5, "maxNumSeqs": 64}, (1, 256), id="manual-uses-spec"
        ),
        pytest.param(
            {"mode": "DryRun"}, {"desiredReplicas": 5, "maxNumSeqs": 64}, (1, 256), id="dryrun-uses-spec"
        ),
        pytest.param({"mode": "Auto"}, {}, (1, 256), id="auto-starts-from-spec"),
        pytest.param(
            {"mode": "Auto"}, {"desiredReplicas": 3, "maxNumSeqs": 64}, (3, 64), id="auto-uses-last-decision"
        ),
        pytest.param({"mode": "Auto"}, {"desiredReplicas": 99}, (4, 256), id="auto-clamped-to-max"),
        pytest.param(
            {"mode": "Auto", "maxBatch": {"enabled": False}},
            {"desiredReplicas": 2, "maxNumSeqs": 64},
            (2, 256),
            id="auto-without-batch-tuning-keeps-the-spec-batch",
        ),
    ],
)
def test_running_size_by_mode(
    autoscaling: dict[str, Any], status: dict[str, Any], expected: tuple[int, int]
) -> None:
    obj = manifest(autoscaling=autoscaling)
    obj["status"] = status
    assert running_size(parse_inference_service(obj)) == RunningSize(*expected)
