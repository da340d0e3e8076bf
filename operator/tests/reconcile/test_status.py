"""When a message quoting live figures is worth rewriting, and the status blocks built from figures."""

from __future__ import annotations

import pytest

from tailguard.metrics.figures import ServiceFigures
from tailguard.reconcile.status import conditions_moved, figures_moved, observed_status
from tailguard.reconcile.timestamps import iso, seconds_since


@pytest.mark.parametrize(
    ("old", "new", "moved"),
    [
        pytest.param("load 2.6 req/s", "load 10.0 req/s", True, id="load-quadrupled"),
        pytest.param("load 46.7 req/s", "load 4.0 req/s", True, id="load-fell"),
        pytest.param("load 2.6 req/s", "load 2.9 req/s", False, id="wobble"),
        pytest.param("load 0.1 req/s", "load 0.3 req/s", False, id="small-absolute"),
        pytest.param("1 engine(s) reporting", "2 engine(s) reporting", True, id="one-more-engine"),
        pytest.param("load 2.6 req/s", "holding 1 replica", True, id="other-words"),
        pytest.param(None, "load 2.6 req/s", True, id="nothing-before"),
        pytest.param("p99 TTFT 120.5 ms", "p99 TTFT 140.0 ms", False, id="within-a-quarter"),
        pytest.param("p99 TTFT 10 ms", "p99 TTFT 19 ms", False, id="a-light-loads-p99-wobbles"),
        pytest.param("p99 TTFT 10 ms", "p99 TTFT 20 ms", True, id="doubled"),
        pytest.param(
            "load 2.0 req/s; capacity 190.0 req/s per replica (bound by max batch: batch 218)",
            "load 2.1 req/s; capacity 120.0 req/s per replica (bound by max batch: batch 218; prefill 6% of engine time)",
            False,
            id="an-aside-changes",
        ),
        pytest.param(
            "load 2.0 req/s (forecast 2.6 in 90 s); holding 3",
            "load 2.0 req/s; holding 9",
            True,
            id="outside-the-aside",
        ),
    ],
)
def test_figures_moved(old: str | None, new: str, moved: bool) -> None:
    assert figures_moved(old, new) is moved


def _condition(reason: str, message: str, status: str = "True") -> dict[str, object]:
    return {"type": "SLOMet", "status": status, "reason": reason, "message": message, "observedGeneration": 1}


def test_conditions_move_on_status_reason_or_a_material_figure() -> None:
    base = [_condition("GoodputMet", "goodput 0.9990 vs target 0.99; p99 TTFT 120.0 ms")]
    assert not conditions_moved(
        base, [_condition("GoodputMet", "goodput 0.9970 vs target 0.99; p99 TTFT 125.0 ms")]
    )
    assert conditions_moved(
        base, [_condition("GoodputMet", "goodput 0.9990 vs target 0.99; p99 TTFT 400.0 ms")]
    )
    assert conditions_moved(base, [_condition("GoodputBelowTarget", base[0]["message"], "False")])  # type: ignore[arg-type]
    assert conditions_moved(base, [])


def test_observed_status_rounds_and_stamps() -> None:
    block = observed_status(ServiceFigures(p99_ttft_s=0.12345, goodput=0.999949, request_rate=2.0), now=0.0)
    assert block["time"] == "1970-01-01T00:00:00Z"
    assert (block["p99TtftMs"], block["goodput"], block["requestRate"], block["p99TpotMs"]) == (
        123.5,
        0.9999,
        2.0,
        None,
    )


def test_timestamps_round_trip_and_unreadable_ones_are_infinitely_old() -> None:
    assert seconds_since(iso(1_000_000.0), 1_000_030.0) == 30.0
    assert seconds_since("yesterday", 0.0) == float("inf")
    assert seconds_since(None, 0.0) == float("inf")


def test_each_service_has_one_turn_per_period_and_turns_spread() -> None:
    from tailguard.reconcile.timestamps import in_turn

    keys = [("team-a", f"svc-{i}") for i in range(200)]
    slots = [[now for now in range(0, 60, 15) if in_turn(key, 1_800_000_000.0 + now, 15, 60)] for key in keys]
    assert all(len(turns) == 1 for turns in slots), "one turn a minute each"
    per_slot = [sum(1 for turns in slots if turns == [now]) for now in range(0, 60, 15)]
    assert min(per_slot) >= 30, f"turns spread over the minute: {per_slot}"


def test_the_workload_fields_named_are_the_ones_workload_status_writes() -> None:
    """``resync_finds_the_same`` reads what a resync writes from these two names: they must not
    drift from what :func:`workload_status` and :func:`invalid_spec_status` write."""
    from tailguard.api import parse_inference_service
    from tailguard.reconcile.sizing import running_size
    from tailguard.reconcile.status import (
        WORKLOAD_CONDITIONS,
        WORKLOAD_STATUS_FIELDS,
        invalid_spec_status,
        workload_status,
    )
    from tailguard.reconcile.workload import Workload
    from tg_testing import manifest

    isvc = parse_inference_service(manifest())
    written = workload_status(isvc, Workload(), running_size(isvc), now=1_800_000_000.0)
    assert set(written) == WORKLOAD_STATUS_FIELDS
    invalid = invalid_spec_status([], "spec.replicas: bad", now=1_800_000_000.0, generation=1)
    types = {c["type"] for c in [*written["conditions"], *invalid["conditions"]]}
    assert types == WORKLOAD_CONDITIONS
