"""What the policy remembers between decisions, and its JSON form for the state annotation.

The parser is lenient by design: a field that does not parse keeps its default, so an older or
newer operator (or a hand edit) never stops the policy; an unreadable text is the empty state.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from tailguard.policy.budget import BUCKETS as JUMP_BUCKETS
from tailguard.policy.budget import PEAK_BUCKETS, BudgetMemory

_STATE_VERSION = 1

#: Jump buckets of annotations written before the histogram reached 78× (its top was 16×).
LEGACY_JUMP_BUCKETS = 32


@dataclass(frozen=True)
class PolicyState:
    """What the policy remembers between decisions; small, stored as JSON in an annotation.

    Unknown keys are ignored and missing ones take their defaults, so an older or newer operator
    can read it. An empty state (after a restart without the annotation) makes the policy
    cautious: no scale-down until a full stabilization window of its own observations.
    """

    version: int = _STATE_VERSION
    started_at: float | None = None
    last_valid_at: float | None = None
    #: ``(time, recommended replicas)`` within the longest stabilization window.
    recommendations: tuple[tuple[float, int], ...] = ()
    #: Smoothed arrival rate (req/s), its trend (req/s per s), and the queue at the last decision.
    rate_level: float | None = None
    rate_trend: float = 0.0
    waiting: float | None = None
    #: Mean output tokens per request (smoothed).
    output_tokens: float | None = None
    #: Decayed sums of (replica batch N, step time τ): weight, ΣN, ΣN², Στ, ΣNτ.
    fit: tuple[float, float, float, float, float] = (0.0, 0.0, 0.0, 0.0, 0.0)
    #: Decayed sums on the same pairs with the prompt tokens x prefilled per step: Σx, Σx², ΣNx, Σxτ.
    prefill_fit: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)
    #: Mean prompt tokens per request (smoothed); ``None`` while no prompt-token rate was read.
    prompt_tokens: float | None = None
    #: Shortest step time seen (the base step) and how far p99 TPOT runs above the mean step.
    step_floor_s: float | None = None
    tpot_offset_s: float | None = None
    #: Seconds one prompt token costs, from the mean prefill time (smoothed); ``None`` while none
    #: was read. The prompt cost's prior where the steps carry too few prompt tokens to fit it.
    prompt_cost_s: float | None = None
    #: Correction of the model's capacity: below 1 from breaches, above it from loads met with
    #: margin beyond the model's figure.
    capacity_scale: float = 1.0
    #: The most one replica served with margin beyond the model's figure (req/s), which bounds a
    #: correction above 1 (``learning.replica_capacity``); ``None`` while it is at most 1.
    capacity_shown: float | None = None
    #: The share of the corrected capacity a replica meets of a burst (≤ 1): from the modelled
    #: prefill queue, lifted by what the replicas sustained over a rate window and cut by bursts
    #: that broke the SLO on a fleet held for them (``learning._burst_correction``); and when a
    #: breach last cut it.
    burst_scale: float = 1.0
    burst_cut_at: float | None = None
    #: When a window last taught the step-time curve (``learning.learn_engine``).
    curve_taught_at: float | None = None
    #: The most one replica sustains (req/s), learned while the error budget burned on a fleet
    #: that did not settle (``learning.replica_capacity``); ``None``: no such bound.
    capacity_ceiling: float | None = None
    #: Ready replicas at the last decision and when that count last changed.
    ready: int | None = None
    ready_changed_at: float | None = None
    last_scale_at: float | None = None
    last_direction: int = 0
    last_max_batch_change_at: float | None = None
    #: The ``--max-num-seqs`` the pods ran before the last change, while that change rolls out:
    #: the pods not restarted yet still run it.
    max_batch_before: int | None = None
    #: The replicas the policy ran when the rollout under way began (the fleet it keeps one spare
    #: above until the rollout is done: ``rollout.keep_spare``); ``None`` when none runs.
    rollout_base: int | None = None
    #: Since when a pod has been Pending for want of a GPU during the rollout under way (kept for
    #: the rest of it once one waited a start-up horizon: ``rollout.rollout_pending_since``).
    rollout_pending_since: float | None = None
    #: When the SLO was last seen broken, and the arrivals' smoothed level (req/s) then.
    last_breach_at: float | None = None
    breach_load: float | None = None
    #: The fleet the budget's relief last shed a replica to, and the load (req/s) that fleet was
    #: judged to hold then (``need``: chance within it takes no replica back); ``None``: none kept.
    shed_replicas: int | None = None
    shed_capacity: float | None = None
    #: The last replica added for a breach the model saw room for: the replicas serving when it
    #: was asked for, the share of that window's requests that missed, the load per replica then,
    #: and when (see ``need``: a breach the added replica did not lower adds no more).
    probe_replicas: int | None = None
    probe_misses: float | None = None
    probe_load: float | None = None
    probe_at: float | None = None
    #: ``(sample time, requests running + waiting, serving replicas)`` over the last rate window.
    in_flight: tuple[tuple[float, float, int], ...] = ()
    #: When requests last queued (more than one waiting per serving replica).
    queue_seen_at: float | None = None
    #: When the running gauge last read a jump of the load (see ``decide``'s surge).
    jump_seen_at: float | None = None
    #: ``(time, replicas set)`` within the scale-down window, each larger than every newer one:
    #: the largest fleet of the window, which bounds how much one window may remove.
    fleet_sizes: tuple[tuple[float, int], ...] = ()
    #: The error budget's memory: the load's recent jumps and the attainment (see ``budget``).
    budget: BudgetMemory = field(default_factory=BudgetMemory)

    def at_last_decision(self, at: float | None) -> bool:
        """Whether ``at`` (a time the state keeps, such as ``queue_seen_at``) is the last valid
        decision's: what that decision saw is still seen now."""
        return at is not None and at == self.last_valid_at

    def to_json(self) -> str:
        """Compact JSON; ``from_json`` reads it back to an equal state."""
        return json.dumps(_finite_only(asdict(self)), separators=(",", ":"), sort_keys=True)

    @staticmethod
    def from_json(text: str | None) -> PolicyState:
        """Parse ``to_json`` output; anything unreadable yields the empty (cautious) state."""
        if not text:
            return PolicyState()
        try:
            raw = json.loads(text)
        except (ValueError, TypeError):
            return PolicyState()
        if not isinstance(raw, dict):
            return PolicyState()
        values: dict[str, Any] = {}
        for f in fields(PolicyState):
            if f.name not in raw:
                continue
            parsed = _parse_field(f.name, raw[f.name])
            if parsed is not _INVALID:
                values[f.name] = parsed
        return PolicyState(**values)


_INVALID = object()


def _finite_only(value: Any) -> Any:
    """JSON has no NaN or infinity: such a value is written as null (and read back as unknown)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, list | tuple):
        return [_finite_only(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite_only(v) for k, v in value.items()}
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _parse_field(name: str, value: Any) -> Any:
    """One field of the stored state, type-checked; ``_INVALID`` keeps the default."""
    if name in ("version", "last_direction"):
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else _INVALID
    if name in ("ready", "probe_replicas", "max_batch_before", "rollout_base", "shed_replicas"):
        if value is None:
            return None
        return int(value) if isinstance(value, int) and not isinstance(value, bool) else _INVALID
    if name in ("recommendations", "fleet_sizes"):
        if not isinstance(value, list):
            return _INVALID
        out = []
        for item in value:
            if isinstance(item, list) and len(item) == 2:
                t, r = _number(item[0]), item[1]
                if t is not None and isinstance(r, int) and not isinstance(r, bool):
                    out.append((t, r))
        return tuple(out)
    if name == "in_flight":
        if not isinstance(value, list):
            return _INVALID
        rows = []
        for item in value:
            if isinstance(item, list) and len(item) == 3:
                t, n, k = _number(item[0]), _number(item[1]), item[2]
                if t is not None and n is not None and isinstance(k, int) and not isinstance(k, bool):
                    rows.append((t, n, k))
        return tuple(rows)
    if name == "budget":
        return _parse_budget(value)
    if name in ("fit", "prefill_fit"):
        if not isinstance(value, list) or len(value) != (5 if name == "fit" else 4):
            return _INVALID
        nums = [_number(v) for v in value]
        if any(n is None for n in nums):
            return _INVALID
        return tuple(n for n in nums if n is not None)
    if name in ("rate_trend", "capacity_scale", "burst_scale"):
        number = _number(value)
        return number if number is not None else _INVALID
    # every other field is an optional float
    if value is None:
        return None
    number = _number(value)
    return number if number is not None else _INVALID


def _parse_budget(value: Any) -> Any:
    """The budget memory, each part checked; a part that does not parse starts over."""
    if not isinstance(value, dict):
        return _INVALID

    def floats(raw: Any, length: int) -> tuple[float, ...]:
        if not isinstance(raw, list) or len(raw) != length:
            return ()
        nums = [_number(v) for v in raw]
        return tuple(n for n in nums if n is not None and n >= 0) if all(n is not None for n in nums) else ()

    loads = []
    for item in value.get("loads", []) if isinstance(value.get("loads"), list) else []:
        if isinstance(item, list) and len(item) == 2:
            t, load = _number(item[0]), _number(item[1])
            if t is not None and load is not None and load >= 0:
                loads.append((t, load))
    sums = {}
    for key in ("good_short", "all_short", "good_long", "all_long"):
        number = _number(value.get(key))
        sums[key] = number if number is not None and number >= 0 else 0.0
    if sums["good_short"] > sums["all_short"] or sums["good_long"] > sums["all_long"]:
        sums = dict.fromkeys(sums, 0.0)
    gain = _number(value.get("gain"))
    raw_jumps = value.get("jumps")
    jumps = floats(raw_jumps, JUMP_BUCKETS)
    if not jumps:
        # Written when the histogram stopped at 16×: the same buckets, and none above them.
        legacy = floats(raw_jumps, LEGACY_JUMP_BUCKETS)
        jumps = legacy + (0.0,) * (JUMP_BUCKETS - LEGACY_JUMP_BUCKETS) if legacy else ()
    peaks = floats(value.get("peaks"), PEAK_BUCKETS)
    fall_jumps = floats(value.get("fall_jumps"), JUMP_BUCKETS)
    raw_fit = value.get("peak_fit")
    fit = [_number(v) for v in raw_fit] if isinstance(raw_fit, list) and len(raw_fit) == 5 else []
    peak_fit = tuple(n for n in fit if n is not None) if all(n is not None for n in fit) else ()
    if peak_fit and (peak_fit[0] <= 0 or peak_fit[2] < 0):
        peak_fit = ()
    curve = {}
    for key in ("curve_requests", "curve_missed", "curve_expected"):
        number = _number(value.get(key))
        curve[key] = number if number is not None and number >= 0 else 0.0
    if max(curve["curve_missed"], curve["curve_expected"]) > curve["curve_requests"]:
        curve = dict.fromkeys(curve, 0.0)
    raw_fell = value.get("falling_at")
    fell = [_number(v) for v in raw_fell] if isinstance(raw_fell, list) else []
    recent = tuple(loads[-64:])
    times = {t for t, _ in recent}
    return BudgetMemory(
        loads=recent,
        jumps=jumps if len(jumps) == JUMP_BUCKETS else (),
        peaks=peaks if len(peaks) == PEAK_BUCKETS else (),
        fall_jumps=fall_jumps if len(fall_jumps) == JUMP_BUCKETS else (),
        falling_at=tuple(t for t in fell if t is not None and t in times),
        gain=gain if gain is not None and gain > 0 else 1.0,
        peak_fit=peak_fit,
        **sums,
        **curve,
    )
