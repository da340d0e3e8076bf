"""The start-up horizon measured from the service's own pods: creation to Ready, the median."""

from __future__ import annotations

from typing import Any

import pytest

from tailguard.reconcile.workload import observe_workload, startup_seconds


def _pod(name: str, created: str, ready_at: str | None, *, ready: bool = True) -> dict[str, Any]:
    conditions = []
    if ready_at is not None:
        conditions.append(
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": ready_at}
        )
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "status": {"phase": "Running", "conditions": conditions},
    }


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(_pod("a", "2026-11-24T10:00:00Z", "2026-11-24T10:01:30Z"), 90.0, id="ready after 90 s"),
        pytest.param(_pod("b", "2026-11-24T10:00:00Z", None), None, id="no Ready condition"),
        pytest.param(
            _pod("c", "2026-11-24T10:00:00Z", "2026-11-24T10:05:00Z", ready=False), None, id="not ready"
        ),
        pytest.param(_pod("d", "garbage", "2026-11-24T10:05:00Z"), None, id="unreadable creation time"),
        pytest.param(
            _pod("e", "2026-11-24T10:05:00Z", "2026-11-24T10:00:00Z"), None, id="ready before created"
        ),
    ],
)
def test_startup_of_one_pod(pod: dict[str, Any], expected: float | None) -> None:
    assert startup_seconds(pod) == expected


def test_the_workload_reports_the_median_of_its_ready_pods() -> None:
    deployment = {"metadata": {"generation": 1}, "spec": {"replicas": 3}, "status": {"observedGeneration": 1}}
    pods = [
        _pod("a", "2026-11-24T10:00:00Z", "2026-11-24T10:01:00Z"),
        _pod("b", "2026-11-24T10:00:00Z", "2026-11-24T10:02:00Z"),
        _pod("c", "2026-11-24T10:00:00Z", "2026-11-24T10:10:00Z"),
        _pod("d", "2026-11-24T10:00:00Z", None),
    ]
    assert observe_workload(deployment, pods).startup_s == 120.0
    assert observe_workload(deployment, pods[3:]).startup_s is None
