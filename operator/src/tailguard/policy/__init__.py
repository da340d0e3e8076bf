"""The scaling policy: pure, deterministic decisions from observations, with no I/O.

``decide(config, state, observation, now)`` returns a :class:`Decision` and the next
:class:`PolicyState`; the caller stores the state (``to_json``) and passes it back next time.
"""

from tailguard.policy.decide import decide
from tailguard.policy.schedules import ScheduledFloor, ScheduleWindow, scheduled_floor
from tailguard.policy.state import PolicyState
from tailguard.policy.types import (
    Decision,
    EngineFigures,
    Limit,
    Observation,
    PolicyConfig,
    Reason,
)

__all__ = [
    "Decision",
    "EngineFigures",
    "Limit",
    "Observation",
    "PolicyConfig",
    "PolicyState",
    "Reason",
    "ScheduleWindow",
    "ScheduledFloor",
    "decide",
    "scheduled_floor",
]
