"""A rollout restarts every pod in turn: the fleet keeps one replica spare while it runs.

The Deployment rolls one pod at a time (``maxSurge: 0, maxUnavailable: 1``): from the first pod
taken down to the last one Ready, one replica of the count set is not serving. (One replica
alone rolls with a surge pod instead and keeps serving: it needs no spare.) Whatever starts
the rollout (a max-batch change this policy made, or a spec change the user applied: a new image,
an engine argument), the size the load asks for is one replica short for all of it, and a fleet
sized at its target utilization breaks the SLO for the whole rollout. So while one runs the fleet
holds one replica more.

The fleet it keeps one above is the larger of the one the policy ran when the rollout began
(``PolicyState.rollout_base``) and what the load now asks for at the target utilization (a load
rising through a rollout). Never the count now, nor the recommendation: both are read from the
fleet that holds the spare (the hysteresis keeps the current count, a breach adds to it), and a
spare read back from them would add another at every decision.

On a cluster with no GPU free the spare cannot be scheduled, and a Pending spare holds the rollout
for good: the Deployment takes no old pod down (whose GPU the new pod would take) while the count
it keeps available is not met. A pod may also wait a little for the GPU of one still draining. So
no spare is added while a pod is Pending, and once one has waited a start-up horizon
(``PolicyState.rollout_pending_since``; a spare scheduled later would not serve in time anyway)
the rollout keeps none: a Pending one is given back, so the rollout can free a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from tailguard.policy.budget import planned_utilization
from tailguard.policy.need import ceil_replicas
from tailguard.policy.types import Observation, PolicyConfig


@dataclass(frozen=True)
class Spare:
    """The replica count with the rollout's spare, and the sentence it adds to the reason."""

    replicas: int
    parts: tuple[str, ...] = ()


def with_spare(config: PolicyConfig, demand: float, per_replica: float) -> int:
    """Replicas ``demand`` needs at ``per_replica`` each and the target utilization, plus the one
    a rolling restart has down."""
    return ceil_replicas(demand / (per_replica * planned_utilization(config))) + 1


def rollout_base(obs: Observation, stored: int | None, *, changed_to: int | None) -> int | None:
    """The fleet to keep a spare above while a rollout runs: ``changed_to`` where this decision
    starts one (a max-batch change: the replicas sized before its spare), else the stored base
    while the rollout runs, else the replica count set when it was first seen; ``None`` when no
    rollout runs."""
    if changed_to is not None:
        return changed_to
    if not obs.rollout_in_progress:
        return None
    return stored if stored is not None else obs.desired_replicas


def rollout_pending_since(
    obs: Observation, stored: float | None, now: float, patience_s: float
) -> float | None:
    """Since when a pod has been Pending for want of a GPU during the rollout under way (``now``
    if from this decision); ``None`` while none is, or when no rollout runs. Once a pod has waited
    ``patience_s``, the time is kept for the rest of the rollout (it is then starved: see
    :func:`keep_spare`), whatever is Pending later."""
    if not obs.rollout_in_progress:
        return None
    if starved(stored, now, patience_s):
        return stored
    if obs.pending_replicas:
        return stored if stored is not None else now
    return None


def starved(pending_since: float | None, now: float, patience_s: float) -> bool:
    """A pod of the rollout under way has waited ``patience_s`` for a GPU (since
    ``pending_since``, from :func:`rollout_pending_since`)."""
    return pending_since is not None and now - pending_since >= patience_s


@dataclass(frozen=True)
class Rollout:
    """The rollout under way as the policy follows it (``base`` ``None``: none runs)."""

    #: The fleet to keep a spare above (:func:`rollout_base`).
    base: int | None
    #: The rollout is a max-batch change this policy made (the reason says so).
    own_change: bool = False
    #: A pod of it waited a start-up horizon for a GPU (:func:`starved`).
    starved: bool = False


def keep_spare(
    config: PolicyConfig,
    obs: Observation,
    rollout: Rollout,
    *,
    replicas: int,
    demand: float,
    per_replica: float | None,
    idle: bool,
    broken: bool = False,
) -> Spare:
    """``replicas``, raised while a rollout runs to one more than its base or than what ``demand``
    needs at ``per_replica`` (:func:`with_spare`), whichever is more, at most ``max_replicas``;
    the reason says so at every decision the spare holds the fleet, not only at the one that
    added it. No spare for an idle service, for one replica (rolled with a surge pod), nor while a
    pod is Pending for want of a GPU (a spare would not be scheduled either). A starved rollout
    (a pod waited a start-up horizon for a GPU): no spare for the rest of it, and the replicas
    above its base that are Pending are given back, so the rollout can free a GPU (not in a
    breach: ``broken``, when nothing scales down)."""
    base = rollout.base
    if not obs.rollout_in_progress or base is None or idle:
        return Spare(replicas)
    if rollout.starved:
        kept = max(base, replicas - obs.pending_replicas)
        if kept >= replicas or broken:
            return Spare(replicas)
        return Spare(
            kept,
            (
                f"no replica spare for the rollout: {obs.pending_replicas} Pending for want of a GPU "
                "would hold it (the new pods take the old ones' GPUs)",
            ),
        )
    if obs.pending_replicas:
        return Spare(replicas)
    sized = with_spare(config, demand, per_replica) if per_replica is not None and per_replica > 0 else 0
    kept = max(base, sized - 1)
    spare = min(config.max_replicas, kept + 1)
    if kept <= 1 or spare < replicas or spare <= kept:
        # (one replica alone rolls with a surge pod, nothing down: ``k8s.render.rolling_update``;
        # more is asked for than the spare: a breach, a schedule; or max replicas leaves none)
        return Spare(replicas)
    what = (
        "the max-batch change rolls out"
        if rollout.own_change
        else "the rollout runs (one pod at a time is down)"
    )
    return Spare(spare, (f"one replica spare while {what}",))
