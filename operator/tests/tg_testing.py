"""Shared helpers for the unit tests (on pytest's pythonpath)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tailguard.reconcile.loop import ControlLoop, CycleReport

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
