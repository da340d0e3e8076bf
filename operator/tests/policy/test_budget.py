"""The error budget's headroom: what the load did, which quantile the budget allows, and the slow
outer loop on the burn rate; then the same through ``decide`` on a fake clock."""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policy.helpers import CONFIG, Run, breached, healthy
from tailguard.policy import Decision, Observation, PolicyConfig, PolicyState
from tailguard.policy.budget import (
    BUCKETS,
    GAIN_MAX,
    GAIN_MIN,
    MISS_SCALE_MAX,
    PEAK_BUCKETS,
    PEAK_FLOOR,
    PEAK_STEP,
    RATIO_STEP,
    BudgetMemory,
    adjust_gain,
    burn_rate,
    given_trend,
    headroom,
    miss_curve_scale,
    peak_follows,
    planned_utilization,
    record_attainment,
    record_curve_misses,
    record_load,
    soften,
    utilization_relief,
)
from tailguard.policy.need import gain_ceiling

HORIZON = 90.0
STEP = 15.0


def _memory(loads: list[float], memory: BudgetMemory | None = None) -> BudgetMemory:
    memory = memory or BudgetMemory()
    for i, load in enumerate(loads):
        memory = record_load(memory, i * STEP, load, STEP, HORIZON)
    return memory


def _bursts(calm: float, burst: float, minutes: int) -> list[float]:
    """Four minutes calm, one minute of burst, repeated."""
    period = [calm] * 16 + [burst] * 4
    return (period * (minutes * 4 // len(period) + 1))[: minutes * 4]


@pytest.mark.parametrize(
    ("loads", "ratio_at_least", "ratio_at_most"),
    [
        pytest.param([50.0] * 200, 1.0, 1.0, id="flat load: no jump"),
        pytest.param(_bursts(10.0, 40.0, 50), 3.5, 4.5, id="bursts of four times the calm"),
        pytest.param([10.0 + 0.01 * i for i in range(200)], 1.0, 1.1, id="slow ramp: a small jump"),
    ],
)
def test_the_jump_held_is_the_one_the_history_shows(
    loads: list[float], ratio_at_least: float, ratio_at_most: float
) -> None:
    room = headroom(_memory(loads), budget=0.01)
    assert room.learned
    assert ratio_at_least <= room.ratio <= ratio_at_most, room


@pytest.mark.parametrize(
    ("target", "position"),
    [
        pytest.param(0.99, 3.9, id="1% budget: nine tenths into the bucket"),
        pytest.param(0.95, 3.5, id="5% budget: halfway into it"),
    ],
)
def test_the_quantile_is_read_within_its_bucket_not_at_its_top(target: float, position: float) -> None:
    """Nine tenths of the requests met no jump and a tenth jumps of 1.31–1.43× (bucket 3): the
    quantile falls inside that bucket, and rounding it up to the bucket's top would hold up to a
    bucket's width (9.5%) more than the history shows, on every decision."""
    jumps = [900.0, 0.0, 0.0, 100.0] + [0.0] * (BUCKETS - 4)
    peaks = [0.0] * (PEAK_BUCKETS - 1) + [1000.0]
    room = headroom(BudgetMemory(jumps=tuple(jumps), peaks=tuple(peaks)), budget=1.0 - target)
    assert room.ratio == pytest.approx(RATIO_STEP**position), room
    assert RATIO_STEP**3 < room.ratio < RATIO_STEP**4


def test_a_burst_under_way_is_not_multiplied_by_the_jump_into_it() -> None:
    room = headroom(_memory(_bursts(10.0, 40.0, 50)), budget=0.01)
    # At the burst's level the peak caps what is held: about the burst, not four times it.
    held, floored = room.held(40.0)
    assert not floored
    assert 40.0 <= held <= 40.0 * 1.15, room


def _spiky(calms: list[float], bursts: list[float]) -> list[float]:
    """Two minutes calm, then a quarter minute of burst; the calm and the burst each in turn."""
    loads: list[float] = []
    for i in range(60):
        loads += [calms[i % len(calms)]] * 8 + [bursts[i % len(bursts)]]
    return loads


def test_peaks_that_come_whatever_the_calm_do_not_follow_it() -> None:
    """Code completion's bursts: the same heights out of calms of 2 to 12 req/s."""
    follows, usual = peak_follows(_memory(_spiky([2.0, 5.0, 12.0], [60.0, 90.0, 120.0, 75.0])))
    assert follows < 0.3
    assert 4.0 < usual < 30.0


@pytest.mark.parametrize(
    "loads",
    [
        pytest.param([70.0 * (1.0 + 0.6 * math.sin(2 * math.pi * i / 240.0)) for i in range(720)], id="days"),
        pytest.param([50.0] * 200, id="flat"),
    ],
)
def test_peaks_that_swell_with_the_load_follow_it(loads: list[float]) -> None:
    follows, _ = peak_follows(_memory(loads))
    assert follows > 0.85


def test_without_history_peaks_follow_the_load() -> None:
    assert peak_follows(BudgetMemory()) == (1.0, 0.0)


def test_a_calm_deeper_than_usual_holds_the_bursts_that_come_whatever_the_calm() -> None:
    """The history's jump times a calm deeper than usual under-reads the burst out of it: the
    bursts came at the same heights out of every calm, so the hold is about their peak."""
    memory = _memory(_spiky([4.0, 8.0, 16.0], [80.0, 100.0, 120.0]))
    room = headroom(memory, budget=0.01)
    deep, _ = room.held(2.0)
    assert room.start_scale(2.0) > 2.0, room
    assert deep > 2.0 * room.ratio * 2.0
    assert deep >= 0.8 * room.peak, room
    assert room.held(room.usual)[0] == pytest.approx(min(room.usual * room.ratio, room.peak))


def test_a_load_below_its_usual_level_holds_the_jump_it_always_met() -> None:
    """Where the peaks swell with the load (a day), a quiet night holds the night's jump, not the
    day's peak."""
    loads = [70.0 * (1.0 + 0.6 * math.sin(2 * math.pi * i / 240.0)) for i in range(720)]
    room = headroom(_memory(loads), budget=0.01)
    night = 70.0 * 0.45
    assert room.start_scale(night) == pytest.approx(1.0, abs=0.1)
    assert room.held(night)[0] < 0.6 * room.peak, room


def test_without_enough_history_nothing_is_held() -> None:
    room = headroom(_memory([5.0, 5.0]), budget=0.01)
    assert not room.learned
    assert room.ratio == 1.0


@pytest.mark.parametrize(
    ("target", "quantile"),
    [(0.999, 0.999), (0.99, 0.99), (0.95, 0.95), (0.5, 0.5)],
)
def test_the_quantile_is_what_the_budget_allows(target: float, quantile: float) -> None:
    room = headroom(_memory(_bursts(10, 40, 50)), budget=1.0 - target)
    assert room.quantile == pytest.approx(quantile)


@settings(max_examples=60, deadline=None)
@given(
    loads=st.lists(st.floats(0.0, 500.0), min_size=20, max_size=120),
    targets=st.tuples(st.sampled_from([0.8, 0.9, 0.95]), st.sampled_from([0.99, 0.995, 0.999])),
)
def test_a_lower_target_never_holds_more(loads: list[float], targets: tuple[float, float]) -> None:
    memory = _memory(loads)
    low, high = (headroom(memory, budget=1.0 - t) for t in targets)
    assert low.ratio <= high.ratio
    assert low.peak <= high.peak


@settings(max_examples=60, deadline=None)
@given(
    loads=st.lists(st.floats(0.0, 500.0), min_size=20, max_size=120),
    targets=st.tuples(st.sampled_from([0.8, 0.9, 0.95]), st.sampled_from([0.99, 0.995, 0.999])),
    now=st.floats(0.0, 500.0),
    gain=st.floats(GAIN_MIN, GAIN_MAX),
)
def test_a_lower_target_never_holds_a_larger_load(
    loads: list[float], targets: tuple[float, float], now: float, gain: float
) -> None:
    memory = replace(_memory(loads), gain=gain)
    low, high = (headroom(memory, budget=1.0 - t).held(now)[0] for t in targets)
    assert low <= high + 1e-9


@pytest.mark.parametrize(
    ("target", "share"),
    [
        pytest.param(0.99, None, id="a 1% budget: no floor"),
        pytest.param(0.995, None, id="a smaller budget: no floor"),
        pytest.param(0.95, 0.96, id="5%: at least 96% of the 1% budget's hold"),
        pytest.param(0.90, 0.91, id="10%: at least 91%"),
    ],
)
def test_a_larger_budget_keeps_the_share_of_the_burst_its_misses_could_pay_for(
    target: float, share: float | None
) -> None:
    """Calm at 10 req/s with a minute's burst to 40 every hundred minutes: at a 5% budget and the
    gain at its cap the quantile (p90) falls below the bursts' share of the requests and holds no
    jump at all; every burst would then break the SLO for far more than 5% of the requests."""
    rare = ([10.0] * 396 + [40.0] * 4) * 2
    memory = replace(_memory(rare), gain=GAIN_MAX)
    strict = headroom(memory, budget=0.01)
    room = headroom(memory, budget=1.0 - target)
    held, floored = room.held(10.0)
    if share is None:
        assert room.floor_share == 0.0
        assert not floored
        return
    assert room.ratio < 1.5, "the quantile alone holds (almost) no jump"
    assert floored
    assert held == pytest.approx(share * strict.held(10.0)[0])
    assert held >= 10.0 * 3.0, "the burst stays held"


def test_the_reason_says_when_the_floor_holds() -> None:
    run = Run(config=replace(CONFIG, budget_headroom=True, goodput_target=0.95, max_replicas=32), replicas=4)
    # (ten calm minutes after the last burst: the load no longer falls, so the whole history holds)
    for minute in range(210):
        burst = minute % 100 == 99
        run.hold(lambda n, b=burst: healthy(200.0 if b else 50.0, n), 60.0)
    run.state = replace(run.state, budget=replace(run.state.budget, gain=GAIN_MAX))
    decision = run.hold(lambda n: healthy(50.0, n), 60.0)
    assert "of the 1% budget's hold" in decision.reason, decision.reason


def test_the_histogram_stays_bounded_however_long_the_history() -> None:
    memory = _memory(_bursts(10.0, 40.0, 600))
    assert len(memory.jumps) == BUCKETS
    assert len(memory.loads) <= HORIZON / STEP + 1


@pytest.mark.parametrize(
    ("good", "expected"),
    [(0.99, 1.0), (0.98, 2.0), (1.0, 0.0), (0.995, 0.5)],
)
def test_burn_rate_is_the_miss_share_over_the_budget(good: float, expected: float) -> None:
    assert burn_rate(good * 10_000, 10_000, 0.01) == pytest.approx(expected)


def test_burn_rate_needs_enough_requests_to_tell() -> None:
    assert burn_rate(5, 10, 0.01) is None


def _gain_after(
    good_share: float, hours: float, start: float = 1.0, *, own_fleet: bool = True, ceiling: float = GAIN_MAX
) -> float:
    memory = BudgetMemory(gain=start)
    for _ in range(int(hours * 3600 / STEP)):
        memory = record_attainment(memory, good_share, 50.0, STEP)
        memory = adjust_gain(memory, 0.01, STEP, own_fleet=own_fleet, ceiling=ceiling)
    return memory.gain


def test_burning_too_fast_raises_the_headroom_and_slack_lowers_it() -> None:
    assert _gain_after(0.95, 1.0) < 1.0  # burning at 5×: a higher quantile (less gain)
    assert _gain_after(0.9999, 1.0) > 1.0  # burning at 0.01×: a lower quantile
    assert _gain_after(0.993, 1.0) == pytest.approx(1.0)  # at 0.7×: left alone


def test_a_fleet_larger_than_the_policy_asked_for_teaches_no_slack() -> None:
    # Met with room for an hour, but on a fleet held above the policy's need: no evidence that
    # less headroom would do. Burning still raises the headroom: that evidence stands.
    assert _gain_after(0.9999, 1.0, own_fleet=False) == pytest.approx(1.0)
    assert _gain_after(0.95, 1.0, own_fleet=False) < 1.0


def test_a_floor_above_the_need_leaves_the_headroom_as_learned() -> None:
    """An hour of bursts served by a fleet that ``minReplicas`` holds above the need misses
    nothing; with the floor gone, the hold is what the policy learned before, not thinner."""
    bursty = replace(CONFIG, budget_headroom=True, max_replicas=32)

    def hour(run: Run) -> Run:
        for minute in range(60):
            burst = minute % 20 == 19
            run.hold(lambda n, b=burst: healthy(200.0 if b else 50.0, n), 60.0)
        return run

    history = hour(Run(config=bursty, replicas=4))
    # The history learned, at a gain of 1 (the hour above met the SLO and relaxed it to its cap).
    learned = replace(history.state, budget=replace(history.state.budget, gain=1.0))
    floored = hour(Run(config=replace(bursty, min_replicas=24), replicas=24, state=learned, now=history.now))
    assert floored.state.budget.gain == pytest.approx(1.0), "a fleet the policy did not size taught nothing"
    free = hour(Run(config=bursty, replicas=history.replicas, state=learned, now=history.now))
    assert free.state.budget.gain > 1.5, "its own fleet, met with room: the headroom relaxes"


def test_the_gain_stays_within_its_bounds_and_comes_back() -> None:
    wound = _gain_after(0.5, 24.0)
    assert wound == pytest.approx(GAIN_MIN)
    assert _gain_after(1.0, 24.0, start=wound) == pytest.approx(GAIN_MAX)


def test_budget_memory_survives_the_annotation() -> None:
    memory = record_attainment(_memory(_bursts(10.0, 40.0, 30)), 0.98, 20.0, STEP)
    state = PolicyState(budget=memory)
    assert PolicyState.from_json(state.to_json()) == state
    loads, falling = _days(1)
    days = PolicyState(budget=_history(loads[:150], falling[:150]))  # (into the afternoon's fall)
    assert days.budget.falling_at
    assert sum(days.budget.fall_jumps) > 0
    assert PolicyState.from_json(days.to_json()) == days
    assert len(state.budget.peak_fit) == 5


@pytest.mark.parametrize(
    "fit",
    ["[1, 2, 3]", "[0, 1, 1, 1, 1]", "[5, 1, -1, 1, 1]", '[5, "x", 1, 1, 1]', '"nonsense"'],
)
def test_a_damaged_peak_fit_starts_over(fit: str) -> None:
    state = PolicyState.from_json('{"budget": {"peak_fit": ' + fit + "}}")
    assert state.budget.peak_fit == ()
    assert peak_follows(state.budget) == (1.0, 0.0)


def test_a_falling_mark_without_its_load_is_dropped() -> None:
    state = PolicyState.from_json(
        '{"budget": {"loads": [[10, 5.0], [25, 4.0]], "falling_at": [25, 40, "x", null], "fall_jumps": [1]}}'
    )
    assert state.budget.falling_at == (25.0,)
    assert state.budget.fall_jumps == ()


@pytest.mark.parametrize(
    "budget_json",
    [
        '"nonsense"',
        '{"jumps": [1, 2, 3]}',
        '{"loads": [[1, -5], ["x", 2]], "gain": -1}',
        '{"good_long": 10, "all_long": 5}',
    ],
)
def test_a_damaged_budget_memory_starts_over_and_never_fails(budget_json: str) -> None:
    state = PolicyState.from_json('{"version": 1, "budget": ' + budget_json + "}")
    room = headroom(state.budget, 0.01)
    assert not room.learned
    assert state.budget.gain > 0
    assert state.budget.good_long <= state.budget.all_long


# -- through decide -------------------------------------------------------------------------


def _after_bursts(target: float = 0.99) -> tuple[Run, Decision]:
    """A service that saw a burst of three times its load every five minutes, now two minutes into
    a calm; the run and its last decision."""
    config = replace(CONFIG, budget_headroom=True, goodput_target=target, max_replicas=32)
    run = Run(config=config, replicas=3)
    for _ in range(6):
        run.hold(lambda n: healthy(40.0, n), 240)
        run.hold(lambda n: healthy(120.0, n), 60)
    return run, run.hold(lambda n: healthy(40.0, n), 120)


def _calm_after_bursts(target: float) -> int:
    return _after_bursts(target)[1].replicas


def test_a_service_that_saw_bursts_holds_for_them_in_the_calm() -> None:
    plain = Run(config=replace(CONFIG, max_replicas=32), replicas=3)
    for _ in range(6):
        plain.hold(lambda n: healthy(40.0, n), 240)
        plain.hold(lambda n: healthy(120.0, n), 60)
    without = plain.hold(lambda n: healthy(40.0, n), 600).replicas
    with_budget = _calm_after_bursts(0.99)
    assert with_budget > without, (with_budget, without)


def test_a_calm_deeper_than_usual_holds_for_the_bursts_out_of_any_calm() -> None:
    """Bursts to 200 req/s every five minutes out of calms of 20 and 40: after a deeper calm of
    5 req/s has lasted long enough for the rate window to forget the last burst, the fleet still
    holds for most of the burst, and the reason says why."""
    config = replace(CONFIG, budget_headroom=True, max_replicas=32)
    run = Run(config=config, replicas=3)
    for i in range(12):
        run.hold(lambda n, calm=(20.0, 40.0)[i % 2]: healthy(calm, n), 240)
        burst = run.hold(lambda n: healthy(200.0, n), 60)
    deep = run.hold(lambda n: healthy(5.0, n), 150)
    room = headroom(run.state.budget, 1.0 - config.goodput_target)
    assert room.follows < 0.5, room
    # (the recommendation: the scale-down window keeps the burst's fleet a while yet)
    assert deep.recommended is not None
    assert burst.recommended is not None
    assert deep.recommended >= 0.6 * burst.recommended, (deep.reason, burst.reason)
    assert "below the usual" in deep.reason, deep.reason


def test_the_reason_says_what_is_held_and_why() -> None:
    _, decision = _after_bursts()
    assert "holding" in decision.reason
    assert "of the load within 90 s" in decision.reason
    assert "error budget burning at" in decision.reason


def test_a_lower_target_never_holds_more_replicas() -> None:
    held = [_calm_after_bursts(t) for t in (0.8, 0.95, 0.99)]
    assert held == sorted(held), held
    assert math.isfinite(held[-1])


def test_a_breach_asks_for_no_less_than_the_hold() -> None:
    run, calm = _after_bursts()
    holding = re.search(r"holding (\d+) for", calm.reason)
    assert holding is not None, calm.reason
    held = int(holding.group(1))
    # The fleet is short of the hold (scaled down by hand) when the next burst breaks the SLO.
    run.replicas = 3
    decision = run.step(breached(60.0, 3, waiting=5.0))
    assert decision.recommended is not None
    assert decision.recommended >= held, (decision.recommended, held, decision.reason)
    assert "holding" in decision.reason


@pytest.mark.parametrize("burst", [100.0, 120.0, 150.0])
def test_the_hold_comes_down_a_replica_with_a_band_to_spare(burst: float) -> None:
    """Bursts out of a calm of 40 req/s: through fifteen minutes of calm the fleet that met the
    bursts comes down only as far as the held load fits with a quarter of a replica to spare.
    Without that band a hold for 111 req/s at 37 per replica came down to three replicas at 99%
    of the capacity of each, and a capacity read a few percent higher or lower moved it by a
    replica either way."""
    config = replace(CONFIG, budget_headroom=True, max_replicas=32)
    run = Run(config=config, replicas=3)
    for _ in range(6):
        run.hold(lambda n: healthy(40.0, n), 240)
        run.hold(lambda n: healthy(burst, n), 60)
    calm = [run.step(healthy(40.0, run.replicas)) for _ in range(60)]
    last = calm[-1]
    holding = re.search(r"holding (\d+) for ([\d.]+) req/s", last.reason)
    capacity = re.search(r"capacity ([\d.]+) req/s per replica", last.reason)
    assert holding is not None, last.reason
    assert capacity is not None, last.reason
    held, per_replica = float(holding.group(2)), float(capacity.group(1))
    assert last.replicas >= math.ceil(held / per_replica + 0.25), (held, per_replica, last.reason)
    if last.replicas > math.ceil(held / per_replica - 0.02):
        assert "a replica kept until the load fits one fewer" in last.reason, last.reason
    sizes = [d.replicas for d in calm]
    assert sizes == sorted(sizes, reverse=True), sizes


@pytest.mark.parametrize(
    ("recommendations", "relaxes"),
    [
        # The policy's own scale-down window holds the fleet at 12 after its burst: its own fleet.
        (((700.0, 12), (985.0, 5)), True),
        # Nothing the policy asked for within the window reached 12: a floor holds it (minReplicas,
        # a schedule, a fixed fleet beside DryRun), and slack on it teaches nothing.
        (((500.0, 12), (700.0, 5), (985.0, 5)), False),
    ],
    ids=["held-by-its-own-window", "held-by-something-else"],
)
def test_slack_relaxes_the_headroom_only_on_a_fleet_the_policy_holds(
    recommendations: tuple[tuple[float, int], ...], relaxes: bool
) -> None:
    gain = _gain_after_slack(recommendations, replicas=12)
    assert (gain > 1.0) is relaxes, f"gain {gain} after a window of slack on 12 replicas"


def test_slack_on_a_fleet_smaller_than_the_policy_asks_teaches_nothing() -> None:
    # A fixed fleet of 6 beside DryRun (or a lead-in the policy only watched) met the SLO while the
    # policy asked for 12: it was sized by other means (foresight, a schedule kept by hand).
    assert _gain_after_slack(((985.0, 12),), replicas=6) == pytest.approx(1.0)
    assert _gain_after_slack(((985.0, 6),), replicas=6) > 1.0, "the same fleet, the policy's own"


def test_misses_on_a_fleet_smaller_than_the_policy_asks_teach_nothing() -> None:
    # The same fixed fleet of 6 missed the target while the policy asked for 12: it was short of
    # what the policy asked for, not of headroom (the benchmark's lead-in, served at the edge of
    # each minute's need, burned the budget at twice its rate and wound the gain down to 0.3).
    assert _gain_after_burn(((985.0, 12),), replicas=6) == pytest.approx(1.0)
    assert _gain_after_burn(((985.0, 6),), replicas=6) < 1.0, "the same fleet, the policy's own"
    assert _gain_after_burn(((985.0, 6),), replicas=9) < 1.0, "a larger fleet's misses stand"


def _gain_after_burn(recommendations: tuple[tuple[float, int], ...], *, replicas: int) -> float:
    """The gain after one decision on ``replicas`` missing the target, with a budget that burned
    at 5×."""
    burning = BudgetMemory(good_short=9_500.0, all_short=10_000.0, good_long=95_000.0, all_long=100_000.0)
    missing = healthy(20.0, replicas, goodput=0.95, ttft_within_slo=0.95)
    return _gain_after_decision(burning, recommendations, missing)


def _gain_after_slack(recommendations: tuple[tuple[float, int], ...], *, replicas: int) -> float:
    """The gain after one decision on ``replicas`` with a budget that burned at 0.01×."""
    slack = BudgetMemory(good_short=9_999.0, all_short=10_000.0, good_long=99_990.0, all_long=100_000.0)
    return _gain_after_decision(slack, recommendations, healthy(20.0, replicas))


def _gain_after_decision(
    memory: BudgetMemory, recommendations: tuple[tuple[float, int], ...], obs: Observation
) -> float:
    """The gain after one decision on ``obs``'s fleet, from ``memory`` and ``recommendations``."""
    state = PolicyState(budget=memory, recommendations=recommendations, started_at=0.0)
    run = Run(
        config=replace(CONFIG, budget_headroom=True), replicas=obs.desired_replicas, state=state, now=1000.0
    )
    run.step(obs)
    return run.state.budget.gain


def test_a_surge_read_at_a_bursts_onset_does_not_enlarge_the_history() -> None:
    # The running gauge runs ahead of the rate window at a burst's onset, and the load now is read
    # as the rate scaled by that surge: a reading to act on now, not a measure of what came. The
    # history of jumps and peaks is the load measured; a burst read at up to twice its rate made
    # the calm after it hold for bursts that never came (bursty benchmark: 139 req/s held for
    # bursts of 100).
    def surging(n: int) -> Observation:
        obs = healthy(120.0, n)
        assert obs.running is not None
        return replace(obs, running=obs.running * 1.8)

    config = replace(CONFIG, budget_headroom=True, max_replicas=32)
    plain, surged = Run(config=config, replicas=3), Run(config=config, replicas=3)
    for _ in range(6):
        for run, onset in ((plain, lambda n: healthy(120.0, n)), (surged, surging)):
            run.hold(lambda n: healthy(40.0, n), 240)
            run.hold(onset, 30)
            run.hold(lambda n: healthy(120.0, n), 30)
    calm_plain = plain.hold(lambda n: healthy(40.0, n), 120)
    calm_surged = surged.hold(lambda n: healthy(40.0, n), 120)

    # The surge was read: at the bursts' onsets the sizing asked for more than on the plain run.
    assert any(s.replicas > p.replicas for s, p in zip(surged.history, plain.history, strict=True))
    # (The fleet itself is still the surge's for a scale-down window: the recommendation is the hold.)
    assert calm_surged.recommended == calm_plain.recommended, (calm_surged.reason, calm_plain.reason)


def test_a_burst_the_rate_window_climbs_to_is_held_in_full() -> None:
    # The measured load is the rate window's mean: a burst of three times the calm shows in it as
    # a climb over the window's two minutes, so within one start-up (90 s) of the last calm sample
    # it reads only part of the jump. The history looks half a window further ahead.
    def ramp(start: float, end: float, seconds: float) -> list[float]:
        steps = int(seconds // STEP)
        return [start + (end - start) * (i + 1) / steps for i in range(steps)]

    config = replace(CONFIG, budget_headroom=True, max_replicas=32)
    run = Run(config=config, replicas=3)
    for _ in range(6):
        for rate in [40.0] * 16 + ramp(40.0, 120.0, 120.0) + [120.0] * 4 + ramp(120.0, 40.0, 120.0):
            run.step(healthy(rate, run.replicas))
    calm = run.hold(lambda n: healthy(40.0, n), 300)
    held, _ = headroom(run.state.budget, 1.0 - config.goodput_target).held(40.0)
    assert held >= 115.0, calm.reason
    assert f"for {held:.1f} req/s" in calm.reason, "the decision holds the same load"


def _cliff(load: float) -> float:
    """A hard bound: nothing missed up to the capacity, everything beyond it."""
    return 0.0 if load <= 1.0 else 1.0


def _gentle(load: float) -> float:
    """A soft bound: 1% missed at the capacity, growing with the cube of the load, all at 3×."""
    return 1.0 if load >= 3.0 else min(1.0, 0.01 * load**3)


def _weighted_misses(weights: tuple[float, ...], held: float, misses: Callable[[float], float]) -> float:
    values = [PEAK_FLOOR * PEAK_STEP ** (i + 0.5) for i in range(len(weights))]
    return sum(w * misses(v / held) for w, v in zip(weights, values, strict=True)) / sum(weights)


def test_a_soft_capacity_holds_what_the_misses_above_it_cost() -> None:
    """Four minutes calm at 10 req/s, a minute of bursts to 40: a hard bound holds the burst; a
    soft one holds less, as much as keeps the history's misses within the budget."""
    memory = _memory(_bursts(10.0, 40.0, 50))
    room = headroom(memory, budget=0.01)
    hard = soften(room, memory, 0.01, _cliff)
    soft = soften(room, memory, 0.01, _gentle)
    assert hard.held(10.0)[0] == pytest.approx(room.held(10.0)[0], rel=0.1)
    assert not room.soft
    assert soft.soft
    held = soft.held(10.0)[0]
    assert 10.0 < held < 0.9 * room.held(10.0)[0], (held, room.held(10.0))
    # at the peak it holds for, the history's requests miss about the budget's share
    assert _weighted_misses(memory.peaks, soft.peak, _gentle) == pytest.approx(0.01, rel=0.2)


@settings(max_examples=40, deadline=None)
@given(
    loads=st.lists(st.floats(0.0, 500.0), min_size=20, max_size=120),
    targets=st.tuples(st.sampled_from([0.8, 0.9, 0.95]), st.sampled_from([0.99, 0.995, 0.999])),
    now=st.floats(0.0, 500.0),
    gain=st.floats(GAIN_MIN, GAIN_MAX),
)
def test_a_soft_capacity_never_holds_more_and_keeps_the_order_of_targets(
    loads: list[float], targets: tuple[float, float], now: float, gain: float
) -> None:
    memory = replace(_memory(loads), gain=gain)
    low, high = (soften(headroom(memory, 1.0 - t), memory, 1.0 - t, _gentle) for t in targets)
    assert low.held(now)[0] <= high.held(now)[0] + 1e-9
    for target, room in zip(targets, (low, high), strict=True):
        assert room.held(now)[0] <= headroom(memory, 1.0 - target).held(now)[0] + 1e-9


@pytest.mark.parametrize(
    ("missed", "expected", "scale_from", "scale_to"),
    [
        pytest.param(0.02, 0.005, 3.5, 4.0, id="windows miss four times what the curve reads"),
        pytest.param(0.001, 0.005, 1.0, 1.0, id="a curve that reads more is kept as it is"),
        pytest.param(
            0.5, 0.0, MISS_SCALE_MAX, MISS_SCALE_MAX, id="misses the curve never reads: at most the cap"
        ),
    ],
)
def test_the_miss_curve_is_scaled_to_what_the_services_own_windows_showed(
    missed: float, expected: float, scale_from: float, scale_to: float
) -> None:
    memory = BudgetMemory()
    for _ in range(240):  # an hour of windows at 20 req/s
        memory = record_curve_misses(memory, missed, expected, 20.0, STEP)
    assert scale_from <= miss_curve_scale(memory, 0.01) <= scale_to


def test_the_miss_curve_is_not_scaled_on_a_few_requests_and_forgets_an_old_hour() -> None:
    few = record_curve_misses(BudgetMemory(), 0.5, 0.001, 5.0, STEP)  # 75 requests, under 1/budget
    assert miss_curve_scale(few, 0.01) == 1.0
    first = record_curve_misses(few, 0.5, 0.001, 5.0, STEP)
    assert miss_curve_scale(first, 0.01) < 100.0, "one request each way keeps a first miss modest"
    memory = BudgetMemory()
    for _ in range(240):
        memory = record_curve_misses(memory, 0.02, 0.005, 20.0, STEP)
    for _ in range(240 * 4):  # four hours at the curve's own misses
        memory = record_curve_misses(memory, 0.005, 0.005, 20.0, STEP)
    assert miss_curve_scale(memory, 0.01) < 1.2


@settings(max_examples=40, deadline=None)
@given(
    loads=st.lists(st.floats(0.0, 500.0), min_size=20, max_size=120),
    scales=st.tuples(st.floats(1.0, 100.0), st.floats(1.0, 100.0)),
    now=st.floats(0.0, 500.0),
)
def test_a_scaled_miss_curve_holds_more_but_never_more_than_the_quantile(
    loads: list[float], scales: tuple[float, float], now: float
) -> None:
    memory = _memory(loads)
    room = headroom(memory, 0.01)
    low, high = sorted(scales)
    held_low = soften(room, memory, 0.01, _gentle, low).held(now)[0]
    held_high = soften(room, memory, 0.01, _gentle, high).held(now)[0]
    assert held_low <= held_high + 1e-9
    assert held_high <= room.held(now)[0] + 1e-9


def _prompt_heavy(rate: float, replicas: int) -> Observation:
    """Code completion on 8B H100 replicas (2,000-token prompts, 30-token answers) at ``rate``:
    the step, batch and p99 TPOT the simulator's engine shows, the prompts' chunks included."""
    per = rate / replicas
    alpha, beta, gamma, prompt, out = 0.0074, 0.000055, 0.00003, 2000.0, 30.0
    batch = 1.0
    for _ in range(50):  # N = λ·out·τ(N), τ stretched by the prompt chunks
        step = (alpha + beta * batch) / (1.0 - gamma * per * prompt)
        batch = per * out * step
    lift = 0.5 * gamma * prompt * math.sqrt(gamma * per * prompt) / (1.0 - gamma * per * prompt) ** 2
    return healthy(
        rate,
        replicas,
        itl_mean_s=step,
        p99_tpot_s=step + lift + 0.001,
        p99_ttft_s=0.25,
        running=batch * replicas,
        prompt_token_rate=rate * prompt,
        generation_token_rate=rate * out,
        kv_cache_usage=0.05,
    )


def test_a_prompt_heavy_service_holds_less_than_its_bursts_where_misses_grow_gently() -> None:
    """Bursts to 30 req/s over a calm of 3, on replicas whose TPOT bound comes from the prompts'
    chunks: above it a few more requests miss, so the hold stays below the bursts' height."""
    config = replace(CONFIG, budget_headroom=True, ttft_slo_s=1.0, max_replicas=32)
    run = Run(config=config, replicas=4)
    for _ in range(8):
        run.hold(lambda n: _prompt_heavy(3.0, n), 240)
        run.hold(lambda n: _prompt_heavy(30.0, n), 60)
    calm = run.hold(lambda n: _prompt_heavy(3.0, n), 120)
    assert "of its requests in TPOT misses (they grow gently above the capacity)" in calm.reason
    holding = re.search(r"holding (\d+) for ([\d.]+) req/s", calm.reason)
    assert holding is not None, calm.reason
    assert 3.0 < float(holding.group(2)) < 30.0, calm.reason
    assert "bound by TPOT SLO" in calm.reason, calm.reason


def test_a_curve_whose_floor_alone_spends_the_budget_holds_the_unsoftened_quantile() -> None:
    """Scaled by what the windows showed, a curve may miss more than the budget's share even far
    below every load in the history: no softer hold pays for that, so the quantile is held."""
    memory = _memory(_bursts(10.0, 40.0, 50))
    room = headroom(memory, budget=0.01)
    floored = soften(room, memory, 0.01, lambda load: min(1.0, 0.0005 + _gentle(load)), scale=40.0)
    assert floored.held(10.0)[0] == pytest.approx(room.held(10.0)[0])
    assert not floored.soft


def test_a_prompt_heavy_service_whose_windows_miss_more_than_the_curve_holds_more() -> None:
    """The same bursts, but each burst's windows show 0.1% of requests missing on the fleet the
    policy sized, about twice what the curve reads for them: the curve is scaled to what the
    windows showed, the hold is for a larger load, and the reason says so."""
    config = replace(CONFIG, budget_headroom=True, ttft_slo_s=1.0, max_replicas=32)

    def calm_after(burst_good: float) -> Decision:
        run = Run(config=config, replicas=4)
        for _ in range(8):
            run.hold(lambda n: _prompt_heavy(3.0, n), 240)
            run.hold(lambda n: replace(_prompt_heavy(30.0, n), goodput=burst_good), 60)
        return run.hold(lambda n: _prompt_heavy(3.0, n), 120)

    def held_for(decision: Decision) -> float:
        holding = re.search(r"holding \d+ for ([\d.]+) req/s", decision.reason)
        assert holding is not None, decision.reason
        return float(holding.group(1))

    as_modelled, missing = calm_after(1.0), calm_after(0.999)
    assert "× the model's, as its windows showed" not in as_modelled.reason, as_modelled.reason
    assert re.search(r"gently above the capacity; [\d.]+× the model's, as its windows showed", missing.reason)
    assert held_for(missing) > held_for(as_modelled), (missing.reason, as_modelled.reason)


def test_a_calm_that_never_tests_the_hold_cannot_relax_it_below_a_recurring_burst() -> None:
    """A minute at 2.5× the calm every 48 minutes: about 7% of the requests' horizons see a burst
    coming. Slack in the calm says nothing of what an unheld burst costs, so however long the calm,
    the gain stops where such bursts stay held (p98 at a 1% budget); at a gain of 8 (p92) the
    quantile fell below them and every burst broke the SLO (the bursty benchmark at half its rate:
    0.9752)."""
    memory = _memory(([20.0] * 188 + [50.0] * 4) * 3)
    for _ in range(48):  # four hours of healthy slack on the policy's own fleet
        memory = record_attainment(memory, 1.0, 20.0, 300.0)
        memory = adjust_gain(memory, 0.01, 300.0)
    assert memory.gain == pytest.approx(GAIN_MAX)
    held, _ = headroom(memory, budget=0.01).held(20.0)
    assert held >= 0.95 * 50.0, "the burst stays held (to within its bucket)"
    assert headroom(replace(memory, gain=8.0), budget=0.01).held(20.0)[0] == held, (
        "no gain reads below the quantile's top (a gain of 8 read p92 and dropped it)"
    )


def test_the_first_window_filling_up_is_no_jump_in_the_history() -> None:
    # A new service: the rate window holds only the seconds since its first request, so the first
    # readings climb to the load over one window (a tenth of it, a fifth, ...). Recorded, each
    # would be a jump of several times into the load, and a hold at the top quantile kept the
    # fleet at the day's peak for an hour (long-context benchmark: 9.22 GPU-h, now 8.33).
    config = replace(CONFIG, budget_headroom=True, max_replicas=32)
    window_steps = int(config.rate_window_s // STEP)
    filling = [40.0 * (i + 1) / window_steps for i in range(window_steps)]

    def history_after(first: list[float]) -> BudgetMemory:
        run = Run(config=config, replicas=3)
        for rate in first + [40.0] * 40:
            run.step(healthy(rate, run.replicas))
        return run.state.budget

    filled = history_after(filling)
    steady = history_after([40.0] * window_steps)
    assert sum(steady.jumps[1:]) == 0.0
    assert sum(filled.jumps[1:]) == 0.0, "the climb of the first window is no jump"
    assert all(t >= 1000.0 + config.rate_window_s for t, _ in filled.loads)
    held, _ = headroom(filled, 1.0 - config.goodput_target).held(40.0)
    assert held < 48.0, held


def _counted(rate: float, windows: list[float], window_s: float = 120.0, seed: int = 1) -> list[float]:
    """Rate readings every ``STEP`` of a Poisson load counted over ``window_s``; ``windows[i]`` is
    the multiple of ``rate`` arriving in reading i's step (seeded: deterministic)."""
    rnd = random.Random(seed)
    per_step = [sum(1 for _ in _poisson_times(rnd, rate * k, STEP)) for k in windows]
    span = int(window_s // STEP)
    return [sum(per_step[max(0, i - span + 1) : i + 1]) / window_s for i in range(span, len(per_step))]


def _poisson_times(rnd: random.Random, rate: float, length_s: float) -> list[float]:
    times, t = [], rnd.expovariate(rate) if rate > 0 else math.inf
    while t < length_s:
        times.append(t)
        t += rnd.expovariate(rate)
    return times


@pytest.mark.parametrize("rate", [0.5, 1.0])
def test_counting_noise_at_a_low_rate_is_no_jump(rate: float) -> None:
    """A steady load of a request or so per second counted over two minutes reads jumps of 30–40%
    within a horizon from the counts alone; held as jumps, a long-context service kept a fleet
    for half as much again as its load all day. Read beyond two spreads of their count, the
    history keeps none of it here."""
    loads = _counted(rate, [1.0] * 420)
    raw, counted = _memory(loads), BudgetMemory()
    for i, load in enumerate(loads):
        counted = record_load(counted, i * STEP, load, STEP, HORIZON, count_window_s=120.0)
    noisy, denoised = headroom(raw, budget=0.01), headroom(counted, budget=0.01)
    assert noisy.ratio > 1.25, noisy
    assert denoised.ratio < 1.1, denoised


def test_a_jump_beyond_the_counting_noise_is_held_in_full() -> None:
    """Bursts of four times a load of a request per second stand far beyond its counts' noise:
    the hold keeps them (to within a few spreads of the burst's count)."""
    loads = _counted(1.0, [1.0] * 16 + [4.0] * 12 + [1.0] * 12 + [4.0] * 12 + [1.0] * 400)
    memory = BudgetMemory()
    for i, load in enumerate(loads):
        memory = record_load(memory, i * STEP, load, STEP, HORIZON, count_window_s=120.0)
    room = headroom(memory, budget=0.01)
    assert room.ratio > 2.5, room


@pytest.mark.parametrize(("peak", "start"), [(80.0, 70.0), (1.5, 1.0), (0.1, 1.0), (0.0, 0.0)])
def test_the_noise_read_off_a_peak_never_takes_it_below_its_start(peak: float, start: float) -> None:
    memory = BudgetMemory()
    for i, load in enumerate([start] + [peak] * 12):
        memory = record_load(memory, i * STEP, load, STEP, HORIZON, count_window_s=120.0)
    jumps = memory.jumps
    assert sum(jumps) >= 0.0
    assert sum(jumps[1:]) == 0.0 or peak > start


def _history(loads: list[float], falling: list[bool]) -> BudgetMemory:
    memory = BudgetMemory()
    for i, (load, fall) in enumerate(zip(loads, falling, strict=True)):
        memory = record_load(memory, i * STEP, load, STEP, HORIZON, falling=fall)
    return memory


def _days(days: int) -> tuple[list[float], list[bool]]:
    """A day in an hour, ±60% around 70 req/s, and whether each sample is on its way down."""
    loads = [70.0 * (1.0 + 0.6 * math.sin(2 * math.pi * i * STEP / 3600.0)) for i in range(days * 240)]
    return loads, [i > 0 and loads[i] < loads[i - 1] for i in range(len(loads))]


def test_a_falling_load_holds_what_falling_loads_met() -> None:
    """Half a day the load climbs and half it falls: a falling load met no jump within a horizon,
    and holding the climb's jumps on the way down kept replicas for a rise that never came."""
    memory = _history(*_days(3))
    whole = headroom(memory, budget=0.01)
    down = headroom(given_trend(memory, falling=True), budget=0.01)
    assert whole.ratio > 1.05, whole
    assert down.ratio == 1.0, down
    assert given_trend(memory, falling=False) is memory


def test_a_calm_between_bursts_keeps_its_bursts_in_the_falling_history() -> None:
    """Where the next burst comes while the last one's fall is still read, the falling loads met
    it: the history they hold from says so."""
    period = [10.0] * 4 + [40.0] * 4 + [30.0, 20.0, 15.0, 12.0]
    loads = period * 60
    falling = [(i > 0 and loads[i] < loads[i - 1]) or (i % len(period)) < 4 for i in range(len(loads))]
    memory = _history(loads, falling)
    down = headroom(given_trend(memory, falling=True), budget=0.01)
    assert down.ratio > 3.0, down


def test_a_thin_falling_history_holds_from_the_whole() -> None:
    """A fall or two are no quantile: a falling load holds from the whole history until the falls
    carry a tenth of its weight."""
    loads = ([50.0] * 40 + [100.0] * 4) * 5 + [50.0] * 8 + [40.0, 30.0] + [30.0] * 8
    memory = _history(loads, [False] * (len(loads) - 10) + [True, True] + [False] * 8)
    assert sum(memory.fall_jumps) > 0
    assert given_trend(memory, falling=True) is memory


def test_an_evening_holds_from_what_evenings_met() -> None:
    """Through decide: after three days in three hours, the morning's climb holds for the jumps
    of the whole history, while the evening holds only for what falling loads met (no more
    than the load), though its history holds the mornings' climbs too."""
    config = replace(CONFIG, budget_headroom=True, max_replicas=32)
    run = Run(config=config, replicas=4)
    morning: list[Decision] = []
    evening: list[Decision] = []
    for i in range(4 * 240):
        rate = 60.0 * (1.0 + 0.6 * math.sin(2 * math.pi * i * STEP / 3600.0))
        decision = run.step(healthy(rate, run.replicas))
        if i >= 3 * 240 and i % 240 < 40:
            morning.append(decision)
        if i >= 3 * 240 and 100 <= i % 240 < 160:
            evening.append(decision)
            whole = headroom(run.state.budget, 1.0 - config.goodput_target)
            assert whole.ratio > 1.05, whole
    assert any("holding" in d.reason and "in its history" in d.reason for d in morning)
    assert any(d.reason_code.value == "LoadFalling" for d in evening)
    assert not [d.reason for d in evening if "holding" in d.reason]


# The budget's slack beyond the quantile's top relieves the target utilization (the simulator's
# steady load: tests/sim/test_relief_runs.py).

BUDGETED = replace(CONFIG, budget_headroom=True)


def test_slack_beyond_the_quantiles_top_raises_the_gain_to_its_ceiling_and_no_further() -> None:
    ceiling = gain_ceiling(BUDGETED)
    assert ceiling == pytest.approx(GAIN_MAX / BUDGETED.target_utilization)
    memory = BudgetMemory(gain=_gain_after(1.0, 24.0, start=GAIN_MAX, ceiling=ceiling))  # a day of slack
    assert memory.gain == pytest.approx(ceiling)
    assert utilization_relief(memory) == pytest.approx(1.0 / BUDGETED.target_utilization)
    assert planned_utilization(BUDGETED, utilization_relief(memory)) == pytest.approx(1.0)


def test_the_relief_leaves_the_quantile_at_its_top() -> None:
    """What the gain relieves beyond ``GAIN_MAX`` is the utilization, never the hold: the bursts
    that p98 keeps stay kept."""
    memory = _memory(([20.0] * 188 + [50.0] * 4) * 3)
    at_top = headroom(replace(memory, gain=GAIN_MAX), budget=0.01)
    beyond = headroom(replace(memory, gain=GAIN_MAX * 1.5), budget=0.01)
    assert (beyond.quantile, beyond.ratio, beyond.peak) == (at_top.quantile, at_top.ratio, at_top.peak)


@pytest.mark.parametrize(
    ("user_headroom", "relief", "expected"), [(0.0, 1.0, 0.93), (0.0, 2.0, 1.0), (0.25, 2.0, 0.8)]
)
def test_the_relief_never_plans_beyond_the_capacity_nor_the_users_headroom(
    user_headroom: float, relief: float, expected: float
) -> None:
    config = replace(CONFIG, headroom=user_headroom, target_utilization=0.93)
    assert planned_utilization(config, relief) == pytest.approx(expected)


def test_nothing_to_relieve_at_full_utilization_or_without_the_budgets_headroom() -> None:
    assert gain_ceiling(replace(CONFIG, target_utilization=1.0)) == pytest.approx(GAIN_MAX)
    assert gain_ceiling(replace(CONFIG, budget_headroom=False)) == pytest.approx(GAIN_MAX)


def test_a_burn_takes_the_relief_back_first() -> None:
    ceiling = gain_ceiling(BUDGETED)
    memory = BudgetMemory(
        gain=_gain_after(0.95, 10 / 60, start=ceiling, ceiling=ceiling)
    )  # ten minutes at 5×
    assert utilization_relief(memory) == pytest.approx(1.0)
    assert memory.gain < GAIN_MAX


#: A tight TPOT SLO, so that the capacity is bound by an SLO and not by the max batch.
TPOT_BOUND = replace(BUDGETED, tpot_slo_s=0.025, max_replicas=32)


def _relieved_ramp(slope: float, config: PolicyConfig = TPOT_BOUND) -> tuple[Run, float]:
    """Five replicas at 150 req/s for twenty minutes (the budget, unspent, relieves them to all of
    their capacity), then fifteen minutes of a load changing by ``slope`` req/s each second (0.05:
    +3% over a start-up, under the trend's significance). Returns the run and when the ramp began."""
    run = Run(config=config, replicas=5)
    run.hold(lambda n: healthy(150.0, n, now=run.now), 1200.0)
    began = run.now
    run.hold(lambda n: healthy(150.0 + slope * (run.now - began), n, now=run.now), 900.0)
    return run, began


def test_a_relieved_fleet_asks_for_a_replica_one_start_up_ahead_of_a_slow_rise() -> None:
    """The margin the budget relieves is what covers a rise while a new replica starts: a relieved
    fleet on a load tripling within the hour broke the SLO at every replica it crossed."""
    run, began = _relieved_ramp(0.05)
    ramp = run.history[80:]
    at, decision = next((began + i * run.config.interval_s, d) for i, d in enumerate(ramp) if d.replicas > 5)
    load_then = 150.0 + 0.05 * (at - began)
    assert "sized at 100% of it while the error budget lasts, for the load rising to" in decision.reason, (
        decision.reason
    )
    assert decision.capacity_per_replica is not None
    # Asked while the five replicas still served the load within all of their capacity.
    assert load_then < 5 * decision.capacity_per_replica, decision.reason


@pytest.mark.parametrize("slope", [0.0, -0.05], ids=["flat", "falling"])
def test_a_relieved_fleet_on_a_flat_or_falling_load_sizes_for_the_load_now(slope: float) -> None:
    run, _ = _relieved_ramp(slope)
    assert not [d.reason for d in run.history if "rising to" in d.reason]
    assert max(d.replicas for d in run.history) == 5


def test_a_capacity_the_slots_bound_is_not_relieved() -> None:
    """A full batch's throughput is saturation, where requests queue for a slot without end: the
    budget relieves only a capacity an SLO bounds."""
    tpot, _ = _relieved_ramp(0.0)
    assert "bound by TPOT SLO" in tpot.history[-1].reason
    assert "while the error budget lasts" in tpot.history[-1].reason
    slots, _ = _relieved_ramp(0.0, config=replace(BUDGETED, max_replicas=32))
    assert "bound by max batch" in slots.history[-1].reason
    assert "while the error budget lasts" not in slots.history[-1].reason
