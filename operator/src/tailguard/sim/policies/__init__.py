"""The policies the simulator runs, one module each, and their registry.

Each module exposes a :class:`PolicySpec`: the policy's name, its knobs (each a
``--<policy>-<knob>`` option of ``tailguard simulate``, with its default and help), the grid the
frontier benchmark sweeps and how to build it from a :class:`BuildContext`. The peers are
reproduced from their documented defaults (``shared/reference/peers.md``); where a detail is not
documented the choice is named in the class text and in docs/simulator.md.
"""

from __future__ import annotations

from tailguard.sim.fleet import Autoscaler
from tailguard.sim.policies import dynamo, hindsight, hpa, keda, kpa, tailguard, wva
from tailguard.sim.policies.base import BuildContext, Knob, PolicySpec, Setting, Settings, SloAndBounds

REGISTRY: dict[str, PolicySpec] = {
    spec.name: spec
    for spec in (
        tailguard.SPEC,
        hpa.SPEC,
        keda.SPEC,
        kpa.SPEC,
        wva.SPEC,
        dynamo.SPEC,
        dynamo.SLA_SPEC,
        hindsight.STATIC,
        hindsight.FLAT,
        hindsight.ORACLE,
    )
}

#: What ``tailguard simulate`` runs when no ``--policies`` is given.
DEFAULT_POLICIES = ("tailguard", "hpa", "keda", "kpa", "wva", "dynamo", "static", "oracle")


def get(name: str) -> PolicySpec:
    """The policy called ``name``; a ``ValueError`` lists the known ones."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(REGISTRY)}") from None


def build(name: str, ctx: BuildContext, settings: Settings | None = None) -> Autoscaler:
    return get(name).build(ctx, settings)


__all__ = [
    "DEFAULT_POLICIES",
    "REGISTRY",
    "BuildContext",
    "Knob",
    "PolicySpec",
    "Setting",
    "Settings",
    "SloAndBounds",
    "build",
    "get",
]
