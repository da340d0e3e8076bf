"""tailguard's own policy, with its state kept as JSON between calls (as in the annotation).

Its knobs are ``PolicyConfig``'s fields, read from the dataclass: a field added there is a new
``--tailguard-…`` option with the field's ``#:`` comment as help, and no line to add here.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from collections import Counter
from dataclasses import MISSING, fields, replace
from typing import Any

from tailguard.policy import PolicyConfig, PolicyState, decide
from tailguard.policy.types import SETTING_RANGES, SettingRange
from tailguard.sim.fleet import Action, FleetView, PodPhase
from tailguard.sim.policies.base import BuildContext, Knob, PolicySpec, Setting, Settings


class Tailguard:
    """tailguard's ``decide``; it reads the modelled Prometheus over ``config.rate_window_s``.

    The policy sees the simulated clock shifted by ``clock_origin_s`` (the UNIX time of the trace's
    start), so that declared schedule windows open at their wall-clock times.
    """

    name = "tailguard"

    def __init__(self, config: PolicyConfig, *, clock_origin_s: float = 0.0) -> None:
        self.config = config
        self.clock_origin_s = clock_origin_s
        self.interval_s = config.interval_s
        self.window_s = config.rate_window_s
        self.state_json: str | None = None
        self.reasons: Counter[str] = Counter()

    def step(self, now: float, view: FleetView) -> Action:
        metrics = view.prometheus.observe(
            now,
            window_s=self.window_s,
            ttft_slo_s=self.config.ttft_slo_s,
            tpot_slo_s=self.config.tpot_slo_s,
            burst_window_s=self.config.burst_window_s,
        )
        obs = replace(
            metrics,
            ready_replicas=view.ready,
            starting_replicas=view.count(PodPhase.STARTING),
            pending_replicas=view.count(PodPhase.PENDING),
            desired_replicas=view.desired,
            max_batch=view.max_batch,
            rollout_in_progress=view.rollout_in_progress,
        )
        origin = self.clock_origin_s
        if origin and obs.sample_time is not None:
            obs = replace(obs, sample_time=obs.sample_time + origin)
        decision, state = decide(self.config, PolicyState.from_json(self.state_json), obs, now + origin)
        self.state_json = state.to_json()
        self.reasons[decision.reason_code.value] += 1
        return Action(
            decision.replicas,
            decision.max_batch,
            decision.reason,
            reason_code=decision.reason_code.value,
            recommended=decision.recommended,
            capacity_per_replica=decision.capacity_per_replica,
            limits=decision.limits,
        )


#: ``PolicyConfig`` fields the scenario sets from its own options (the SLO, the bounds, the max
#: batch bounds); they are not repeated as ``--tailguard-…`` options, but a sweep may set them
#: (the frontier sweeps ``goodput_target``).
SCENARIO_FIELDS = frozenset(
    {
        "min_replicas",
        "max_replicas",
        "ttft_slo_s",
        "tpot_slo_s",
        "goodput_target",
        "max_batch_min",
        "max_batch_max",
    }
)
#: Fields that are not a number or a switch, set by options of their own (``--schedule``).
STRUCTURED_FIELDS = frozenset({"schedules"})
#: Fields whose default the scenario derives (shown as such in ``--help``).
DERIVED = {
    "startup_s": "1.5 × --cold-start-s",
    "rate_window_s": "max(120, 4 × --scrape-interval-s)",
    "burst_window_s": "2 × --scrape-interval-s",
}


def field_comments(cls: type) -> dict[str, str]:
    """The ``#:`` comment above each field of a dataclass, joined into one line. A field with none
    shares the comment of the field before it when that comment names it (fields grouped under
    one comment, as ``scale_up_limit_factor`` and ``_pods``); otherwise it has none."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    tree = ast.parse(source)
    klass = tree.body[0]
    assert isinstance(klass, ast.ClassDef)
    out: dict[str, str] = {}
    previous = ""
    for node in klass.body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        comment: list[str] = []
        index = node.lineno - 2
        while index >= 0 and lines[index].strip().startswith("#:"):
            comment.insert(0, lines[index].strip().removeprefix("#:").strip())
            index -= 1
        name = node.target.id
        last = name.removesuffix("_s").rsplit("_", 1)[-1]
        text = " ".join(comment) or (previous if name in previous or last in previous else "")
        if text:
            out[name] = text
        previous = text
    return out


def config_knobs() -> tuple[Knob, ...]:
    """One knob per ``PolicyConfig`` field the scenario does not set."""
    comments = field_comments(PolicyConfig)
    knobs = []
    for f in fields(PolicyConfig):
        if f.default is MISSING:
            continue
        kind = str(f.type).replace(" ", "")
        help_text = comments.get(f.name, "") or f.name.replace("_", " ")
        derived = f.name in DERIVED or f.name in SCENARIO_FIELDS
        if f.name in DERIVED:
            help_text += f" (default: from the scenario, {DERIVED[f.name]})"
        cli = f.name not in SCENARIO_FIELDS
        if kind == "bool":
            default: Setting = "" if derived else ("true" if f.default else "false")
            knobs.append(
                Knob(f.name, default, help_text, choices=("true", "false"), derived=derived, cli=cli)
            )
        elif kind in {"int", "float", "float|None", "int|None"}:
            value = f.default
            default = "" if derived or not isinstance(value, int | float) else value
            bounds = SETTING_RANGES.get(f.name, SettingRange())
            knobs.append(
                Knob(
                    f.name, default, help_text,
                    minimum=bounds.minimum, inclusive=bounds.inclusive, maximum=bounds.maximum,
                    integer=kind.startswith("int"), derived=derived, cli=cli,
                )
            )  # fmt: skip
    return tuple(knobs)


def _make(ctx: BuildContext, settings: Settings) -> Tailguard:
    return Tailguard(config_with(ctx.policy_config, settings), clock_origin_s=ctx.clock_origin_s)


def config_with(config: PolicyConfig, settings: Settings) -> PolicyConfig:
    """``config`` with the knobs' values; derived knobs left at their default keep the scenario's."""
    knobs = {k.name: k for k in SPEC.knobs}
    changes: dict[str, Any] = {}
    for key, value in settings.items():
        knob = knobs[key]
        if value == "":
            continue
        if knob.choices == ("true", "false"):
            changes[key] = value == "true"
        elif knob.integer:
            changes[key] = int(value)
        else:
            changes[key] = float(value)
    return replace(config, **changes)


SPEC = PolicySpec(
    name="tailguard",
    describe="tailguard's policy (tailguard.policy.decide)",
    knobs=config_knobs(),
    make=_make,
    grid=tuple({"goodput_target": g} for g in (0.90, 0.95, 0.99, 0.995)),
)
