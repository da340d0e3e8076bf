"""One replica spare while any rollout runs: the Deployment rolls one pod at a time, so the count
set is one short of what serves until the last pod is Ready."""

from __future__ import annotations

from dataclasses import replace

import pytest

from policy.helpers import CONFIG, Run, healthy
from tailguard.policy import decide
from tailguard.policy.rollout import Rollout, keep_spare, rollout_base, rollout_pending_since

NOW = 5000.0
ROLLING = {"rollout_in_progress": True}


@pytest.mark.parametrize(
    ("name", "overrides", "base", "replicas", "idle", "expected", "says"),
    [
        (
            "a load risen through the rollout: what it needs, plus one",
            {**ROLLING, "demand": 100.0},
            4,
            5,
            False,
            7,
            True,
        ),
        (
            "a load fallen through it: the fleet it began with, plus one",
            {**ROLLING, "demand": 20.0},
            4,
            5,
            False,
            5,
            True,
        ),
        ("no rollout, no spare", {}, None, 4, False, 4, False),
        ("a rollout: the fleet it began with, plus one", ROLLING, 4, 4, False, 5, True),
        ("the load asks for less: the fleet it began with, plus one", ROLLING, 6, 5, False, 7, True),
        ("the spare already there: held, and said", ROLLING, 4, 5, False, 5, True),
        ("more than that asked (a grown load, a breach, a schedule): kept", ROLLING, 4, 8, False, 8, False),
        ("a pod Pending for a GPU: no spare", {**ROLLING, "pending_replicas": 1}, 4, 4, False, 4, False),
        ("an idle service: no spare", ROLLING, 2, 2, True, 2, False),
        ("one replica: rolled with a surge pod, no spare", ROLLING, 1, 1, False, 1, False),
        (
            "one replica, but the load asks for more: that, plus one",
            {**ROLLING, "demand": 30.0},
            1,
            2,
            False,
            3,
            True,
        ),
        (
            "never above max replicas",
            ROLLING,
            CONFIG.max_replicas,
            CONFIG.max_replicas,
            False,
            CONFIG.max_replicas,
            False,
        ),
    ],
)
def test_keep_spare(
    name: str,
    overrides: dict[str, object],
    base: int | None,
    replicas: int,
    idle: bool,
    expected: int,
    says: bool,
) -> None:
    fields = dict(overrides)
    demand = float(str(fields.pop("demand", 0.0)))
    obs = healthy(40.0, replicas, now=NOW, **fields)
    # 20 req/s per replica at the target utilization of 0.93: 100 req/s need 6
    spare = keep_spare(
        CONFIG, obs, Rollout(base), replicas=replicas, demand=demand, per_replica=20.0, idle=idle
    )
    assert spare.replicas == expected, name
    assert bool(spare.parts) == says, name


@pytest.mark.parametrize(
    ("name", "rolling", "stored", "changed_to", "desired", "expected"),
    [
        ("no rollout: none", False, None, None, 4, None),
        ("first seen: the count set then", True, None, None, 4, 4),
        ("while it runs: the stored one, not the count with its spare", True, 4, None, 5, 4),
        ("done: forgotten", False, 4, None, 5, None),
        ("a max-batch change this decision: the fleet sized before its spare", False, None, 6, 4, 6),
    ],
)
def test_rollout_base(
    name: str, rolling: bool, stored: int | None, changed_to: int | None, desired: int, expected: int | None
) -> None:
    obs = healthy(40.0, desired, now=NOW, rollout_in_progress=rolling)
    assert rollout_base(obs, stored, changed_to=changed_to) == expected, name


@pytest.mark.parametrize(
    ("name", "rolling", "pending", "stored", "expected"),
    [
        ("no rollout: no clock", False, 1, NOW - 500.0, None),
        ("nothing Pending: no clock", True, 0, None, None),
        ("a pod Pending: from now", True, 1, None, NOW),
        ("still Pending: since then", True, 1, NOW - 30.0, NOW - 30.0),
        (
            "scheduled within the patience (a GPU a draining pod held): the clock stops",
            True,
            0,
            NOW - 30.0,
            None,
        ),
        ("waited the patience: kept for the rest of the rollout", True, 0, NOW - 90.0, NOW - 90.0),
        ("the rollout done: forgotten", False, 0, NOW - 500.0, None),
    ],
)
def test_rollout_pending_since(
    name: str, rolling: bool, pending: int, stored: float | None, expected: float | None
) -> None:
    obs = healthy(40.0, 4, now=NOW, rollout_in_progress=rolling, pending_replicas=pending)
    assert rollout_pending_since(obs, stored, NOW, 90.0) == expected, name


@pytest.mark.parametrize(
    ("name", "pending", "replicas", "broken", "expected"),
    [
        ("the Pending spare is given back, so the rollout can free a GPU", 1, 5, False, 4),
        ("never below the fleet it began with", 2, 5, False, 4),
        ("no spare pending: nothing to give back", 0, 4, False, 4),
        ("in a breach nothing scales down", 1, 5, True, 5),
    ],
)
def test_a_starved_rollout_keeps_no_spare(
    name: str, pending: int, replicas: int, broken: bool, expected: int
) -> None:
    obs = healthy(40.0, replicas, now=NOW, rollout_in_progress=True, pending_replicas=pending)
    spare = keep_spare(
        CONFIG, obs, Rollout(4, starved=True), replicas=replicas, demand=0.0, per_replica=None, idle=False,
        broken=broken,
    )  # fmt: skip
    assert spare.replicas == expected, name
    assert bool(spare.parts) == (expected < replicas), name


def test_the_reason_says_whose_rollout_it_is() -> None:
    obs = healthy(40.0, 4, now=NOW, **ROLLING)
    theirs = keep_spare(CONFIG, obs, Rollout(4), replicas=4, demand=0.0, per_replica=None, idle=False)
    ours = keep_spare(
        CONFIG, obs, Rollout(4, own_change=True), replicas=4, demand=0.0, per_replica=None, idle=False
    )
    assert theirs.parts == ("one replica spare while the rollout runs (one pod at a time is down)",)
    assert ours.parts == ("one replica spare while the max-batch change rolls out",)


def test_a_users_rollout_keeps_one_spare_until_it_is_done_and_no_more() -> None:
    """A spec change (a new image) rolls every pod: the fleet the load needs plus one, held at
    every decision of the rollout (the spare is never read back as demand), gone after it."""
    run = Run(replicas=4)
    for _ in range(60):
        run.step(healthy(120.0, run.replicas))
    before = run.replicas
    sizes = []
    for _ in range(30):  # seven and a half minutes of rollout
        decision = run.step(healthy(120.0, run.replicas, rollout_in_progress=True))
        sizes.append(decision.replicas)
    assert set(sizes) == {before + 1}, sizes
    assert "one replica spare while the rollout runs" in run.history[-1].reason
    for _ in range(40):
        run.step(healthy(120.0, run.replicas))
    assert run.replicas == before, run.history[-1].reason


def test_the_spare_is_not_read_back_as_demand() -> None:
    """The recommendations stay the load's and the base the fleet the rollout began with: the
    state holds nothing above what the load asked for, and the base survives the annotation."""
    run = Run(replicas=4)
    for _ in range(60):
        run.step(healthy(120.0, run.replicas))
    obs = replace(healthy(120.0, run.replicas, rollout_in_progress=True), sample_time=run.now - 5.0)
    decision, state = decide(CONFIG, run.state, obs, run.now)
    assert decision.replicas == run.replicas + 1
    assert decision.recommended is not None
    assert max(r for _, r in state.recommendations) <= max(decision.recommended, run.replicas)
    assert state.rollout_base == run.replicas
    assert type(state).from_json(state.to_json()).rollout_base == run.replicas
