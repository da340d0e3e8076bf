"""Shared helpers for the unit tests (on pytest's pythonpath)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tailguard import policy
from tailguard.metrics.figures import ServiceFigures
from tailguard.reconcile.loop import ControlLoop, CycleReport
from tailguard.reconcile.telemetry import Telemetry
from tailguard.reconcile.workload import Workload

REPO = Path(__file__).resolve().parents[2]


def manifest(**spec: Any) -> dict[str, Any]:
    """A minimal valid InferenceService manifest with ``spec`` overrides."""
    return {
        "apiVersion": "tailguard.dev/v1alpha1",
        "kind": "InferenceService",
        "metadata": {"name": "chat", "namespace": "team-a", "uid": "uid-1", "generation": 1},
        "spec": {"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}, **spec},
    }


def run_cycle(loop: ControlLoop, now: float) -> CycleReport:
    """One control cycle, then every write it queued, landed (the report counts them)."""

    async def cycle() -> CycleReport:
        report = await loop.run_once(now)
        await loop.flush()
        return report

    return asyncio.run(cycle())


@pytest.fixture
def repo() -> Path:
    return REPO


def record_step(
    telemetry: Telemetry,
    key: tuple[str, str],
    *,
    replicas: int,
    ready: int,
    p99_ttft_s: float | None,
    goodput: float | None = None,
    tpot_slo_s: float | None = None,
    applied: bool = False,
) -> None:
    """One steady decision of ``replicas`` exported for ``key``, as the control loop exports it."""
    telemetry.record_step(
        key,
        decision=policy.Decision(replicas, 64, True, policy.Reason.STEADY, "steady"),
        applied=applied,
        workload=Workload(replicas=replicas, ready=ready),
        figures=ServiceFigures(p99_ttft_s=p99_ttft_s, goodput=goodput),
        config=policy.PolicyConfig(tpot_slo_s=tpot_slo_s),
    )
