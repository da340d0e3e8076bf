"""The size the Deployment runs at: replicas and max batch, from the spec and the recorded intent."""

from __future__ import annotations

from typing import NamedTuple

from tailguard.api import AutoscalingMode, InferenceService


class RunningSize(NamedTuple):
    """Replicas and max batch (``--max-num-seqs``) of the Deployment."""

    replicas: int
    max_batch: int


def spec_size(isvc: InferenceService) -> RunningSize:
    """The size the spec declares: ``spec.replicas`` and ``spec.engine.maxNumSeqs``."""
    return RunningSize(isvc.spec.replicas, isvc.spec.engine.max_num_seqs)


def running_size(isvc: InferenceService) -> RunningSize:
    """The size to run now.

    In mode Auto, the autoscaler's last applied choice (recorded in status), within the spec's bounds;
    max batch stays the spec's when tuning is off. In the other modes, the spec's size.
    """
    spec, status = isvc.spec, isvc.status
    if spec.autoscaling.mode is not AutoscalingMode.AUTO:
        return spec_size(isvc)
    low, high = spec.autoscaling.min_replicas, spec.autoscaling.max_replicas
    replicas = status.desired_replicas if status.desired_replicas is not None else spec.replicas
    bounds = spec.autoscaling.max_batch
    if not bounds.enabled:
        return RunningSize(min(max(replicas, low), high), spec.engine.max_num_seqs)
    batch = status.max_num_seqs if status.max_num_seqs is not None else spec.engine.max_num_seqs
    return RunningSize(min(max(replicas, low), high), min(max(batch, bounds.min), bounds.max))
